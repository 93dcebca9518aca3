#!/usr/bin/env bash
# Every baseline at its best on one sm_90 node (no network), in one command of at most 600 s:
#  1. fsbench installed from this tree without dependencies, with cudnn-frontend from wheelhouse/; FlashAttention-3
#     and SageAttention2 build meanwhile from build/peers-src (scripts/peer_sources.sh) unless wheelhouse/ holds
#     their wheels;
#  2. the baselines' GPU tests (tests/test_baselines_gpu.py, tests/test_kernels_peers_gpu.py);
#  3. `fsbench kernels bench --calibrate`: NVIDIA's published configuration (64 query heads, 8 KV heads, 4k, 16k
#     and 32k keys) as the call and as the kernel alone, beside NVIDIA's figures, with clock and power; with
#     CUDNN_SITE=DIR (an unpacked nvidia-cudnn-cu13 wheel), its cuDNN rows again under that cuDNN;
#  4. every BF16 row, every FP8 peer and the fused Gluon mxfp8 kernel at both paper shapes, as the call and as the
#     kernel alone, with clock and power; the best BF16 row and FP8 peer at each shape named.
# OUT gets calibrate.json, calibrate.md, paper.json, paper.md, the peers' wheels and logs.tgz (every log).
#   FSBENCH_COMMIT=<sha> [CUDNN_SITE=DIR] bash scripts/device_calibrate.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
logs=$(mktemp -d)
trap 'tar -czf "$OUT/logs.tgz" -C "$logs" .' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$logs/device.txt"
python3 -m pip show nvidia-cudnn-cu13 torch 2>/dev/null | grep -E "^(Name|Version)" | tee -a "$logs/device.txt"
echo "fsbench commit: ${FSBENCH_COMMIT:-unknown}" | tee -a "$logs/device.txt"
shopt -s nullglob
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . wheelhouse/nvidia_cudnn_frontend-*.whl \
  2>&1 | tail -3
peers=(wheelhouse/sageattention-*.whl wheelhouse/flash_attn_3-*.whl)
if ((${#peers[@]} < 2)) && [[ -d build/peers-src ]]; then
  PEER_BUILD_S=${BUILD_S:-300} bash scripts/build_peers.sh build/peers-src "$logs/peers" > "$logs/peers_build.log" 2>&1
  cat "$logs/peers/peers_build.txt"
  cp "$logs"/peers/wheels/*.whl "$OUT"/
fi
peers=(wheelhouse/sageattention-*.whl wheelhouse/flash_attn_3-*.whl)
((${#peers[@]})) && python3 -m pip install -q --no-index --no-deps "${peers[@]}" 2>&1 | tail -3
timeout "${TESTS_S:-120}" python3 -m pytest -q -rfs -p no:cacheprovider tests/test_baselines_gpu.py \
  tests/test_kernels_peers_gpu.py > "$logs/gpu_tests.log" 2>&1
tail -4 "$logs/gpu_tests.log"
site=()
[[ -n ${CUDNN_SITE:-} ]] && site=(--cudnn-site "$CUDNN_SITE")
timeout "${CALIBRATE_S:-240}" python3 -m fsbench kernels bench --calibrate --repeats 7 --clock-seconds "${CLOCK_S:-2}" "${site[@]}" \
  --json "$OUT/calibrate.json" --markdown "$OUT/calibrate.md" > "$logs/calibrate.log" 2>&1
grep -v "^-" "$logs/calibrate.log" | tail -24
# the rows of that list that can run here (a peer whose build failed is left out, as `--list` says)
rows=$(python3 -m fsbench kernels bench --list | grep -v "cannot run here" | grep -xE \
  "sdpa-cudnn-bf16|sdpa-flash-bf16|cudnn-bf16|fa3-bf16|cudnn-fp8|sage2-fp8|fa3-fp8|gluon-fused-mxfp8" | paste -sd,)
timeout "${PAPER_S:-200}" python3 -m fsbench kernels bench --rows "$rows" --no-emulate --repeats 7 --kernel-calls 5 \
  --clock-seconds 2 --json "$OUT/paper.json" --markdown "$OUT/paper.md" "$@" > "$logs/paper.log" 2>&1
grep -v "^-" "$logs/paper.log" | tail -22
