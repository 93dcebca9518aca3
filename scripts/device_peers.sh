#!/usr/bin/env bash
# The attention peers on the H200 (no network), in one device call of at most 600 s, all under $OUT:
#  1. build SageAttention2's sm90 kernel and FlashAttention-3's FP8 forward from build/peers-src
#     (scripts/peer_sources.sh lays it out; scripts/build_peers.sh builds; wheels to wheelhouse/ and $OUT/wheels),
#     unless wheelhouse/ already holds both wheels (put $OUT/wheels there for later calls) and REBUILD is unset;
#  2. install them and cudnn-frontend's wheel from wheelhouse/ into /tmp/site (only these: the image has the rest
#     the bench needs, and the sources and wheels stay small enough to travel with the call);
#  3. check each peer against BF16 SDPA (tests/test_kernels_peers_gpu.py);
#  4. bench every peer that imports beside cuDNN FP8, the fused Gluon kernel and cuDNN BF16 at both paper shapes,
#     interleaved, median of 5, with clock, power and TFLOP/J (extra arguments go to the bench).
# BUILD_S (each build, the two run at once), TESTS_S and BENCH_S bound the steps: 300 + 60 + 200 s by default.
# Name the tree with FSBENCH_COMMIT=<sha>: the copy there may carry stale git metadata.
#   FSBENCH_COMMIT=<sha> bash scripts/device_peers.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
shopt -s nullglob
sage2=(wheelhouse/sageattention-*.whl)
fa3=(wheelhouse/flash_attn_3-*.whl)
if [[ -n ${REBUILD:-} ]] || ((${#sage2[@]} == 0 || ${#fa3[@]} == 0)); then
  PEER_BUILD_S=${BUILD_S:-300} bash scripts/build_peers.sh build/peers-src "$OUT"
else
  echo "peers: the wheels already in wheelhouse/ (REBUILD=1 builds them again): ${sage2[*]} ${fa3[*]}" \
    | tee -a "$OUT/device.txt"
fi
wheels=(wheelhouse/nvidia_cudnn_frontend-*.whl wheelhouse/sageattention-*.whl wheelhouse/flash_attn_3-*.whl)
# the kernels need nothing of the wheelhouse but these and fsbench itself (the image has torch and triton)
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . "${wheels[@]}"
rows=gluon-fused-mxfp8,sdpa-cudnn-bf16
for pair in cudnn-fp8:cudnn fa3-fp8:flash_attn_interface sage2-fp8:sageattention._qattn_sm90; do
  if python3 -c "import ${pair#*:}" 2>>"$OUT/imports.log"; then rows=${pair%%:*},$rows; fi
done
echo "rows: $rows" | tee -a "$OUT/device.txt"
timeout "${TESTS_S:-60}" python3 -m pytest -q -rs -p no:cacheprovider tests/test_kernels_peers_gpu.py \
  >"$OUT/peers_gpu_tests.log" 2>&1
tail -6 "$OUT/peers_gpu_tests.log"
timeout "${BENCH_S:-200}" python3 -m fsbench kernels bench --rows "$rows" --interleave --repeats 5 --clock-seconds 3 \
  --json "$OUT/peers.json" --markdown "$OUT/peers.md" "$@" 2>&1 | tee "$OUT/peers.log" | grep -v "^-" | tail -30
