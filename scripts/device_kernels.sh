#!/usr/bin/env bash
# The attention kernels on one H200 node (no network) in one command of at most 600 s:
#  1. fsbench installed from this tree without dependencies (the kernels need only the node's torch and triton) with
#     cudnn-frontend from wheelhouse/; the peers (SageAttention2, FlashAttention-3) build meanwhile from
#     build/peers-src (scripts/peer_sources.sh) unless wheelhouse/ holds their wheels;
#  2. the kernels' GPU tests: emulator agreement of the Triton and Gluon kernels, cuDNN FP8;
#  3. with OLD_TREE=DIR (`git archive COMMIT fsbench | tar -x -C DIR`), that tree's Gluon kernel against this one in
#     one process, outputs bit for bit and TFLOP/s at both paper shapes (scripts/lab/ab_gluon.py);
#  4. the peers that built, their GPU test, and `fsbench kernels bench --interleave` of every row that runs at both
#     paper shapes, with clock, power and TFLOP/J. Extra arguments go to the bench.
# OUT gets at most eight files: ab_gluon.json, bench.json, bench.md, the peers' wheels and logs.tgz (every log).
#   FSBENCH_COMMIT=<sha> OLD_TREE=build/old-tree bash scripts/device_kernels.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
logs=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$logs/device.txt"
shopt -s nullglob
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . wheelhouse/nvidia_cudnn_frontend-*.whl \
  2>&1 | tail -3
peers=(wheelhouse/sageattention-*.whl wheelhouse/flash_attn_3-*.whl)
if ((${#peers[@]} < 2)) && [[ -d build/peers-src ]]; then
  PEER_BUILD_S=${BUILD_S:-300} bash scripts/build_peers.sh build/peers-src "$logs/peers" > "$logs/peers_build.log" 2>&1 &
  build=$!
fi
timeout "${TESTS_S:-150}" python3 -m pytest -q -rfs -p no:cacheprovider tests/test_triton_gpu.py \
  tests/test_kernels_emulator_gpu.py tests/test_cudnn_fp8_gpu.py > "$logs/gpu_tests.log" 2>&1
tail -3 "$logs/gpu_tests.log"
[[ -n ${build:-} ]] && { wait "$build"; cat "$logs/peers/peers_build.txt"; cp "$logs"/peers/wheels/*.whl "$OUT"/; }
if [[ -n ${OLD_TREE:-} ]]; then
  timeout "${AB_S:-150}" python3 scripts/lab/ab_gluon.py --old-tree "$OLD_TREE" --shape 1,40,75600,128 \
    --shape 1,24,32768,128 --configs fused-mxfp8,fused-mxfp6,fused-mxfp4 --repeats 9 --json "$OUT/ab_gluon.json" \
    > "$logs/ab_gluon.log" 2>&1
  tail -12 "$logs/ab_gluon.log"
fi
peers=(wheelhouse/sageattention-*.whl wheelhouse/flash_attn_3-*.whl)
((${#peers[@]})) && python3 -m pip install -q --no-index --no-deps "${peers[@]}"
rows=gluon-fused-mxfp8,gluon-conventional-fp8,skeleton-fp8,sdpa-cudnn-bf16
for pair in cudnn-fp8:cudnn fa3-fp8:flash_attn_interface sage2-fp8:sageattention._qattn_sm90; do
  python3 -c "import ${pair#*:}" 2>>"$logs/imports.log" && rows=${pair%%:*},$rows
done
timeout 60 python3 -m pytest -q -rfs -p no:cacheprovider tests/test_kernels_peers_gpu.py > "$logs/peers_tests.log" 2>&1
tail -3 "$logs/peers_tests.log"
timeout "${BENCH_S:-220}" python3 -m fsbench kernels bench --rows "$rows" --interleave --repeats 5 --no-emulate \
  --clock-seconds "${CLOCK_S:-3}" --json "$OUT/bench.json" --markdown "$OUT/bench.md" "$@" > "$logs/bench.log" 2>&1
grep -v "^-" "$logs/bench.log" | tail -24
tar czf "$OUT/logs.tgz" -C "$logs" .
