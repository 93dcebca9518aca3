#!/usr/bin/env bash
# Every baseline at its best. 1. NVIDIA's published configuration (64 query heads sharing 8 KV heads, head dim 128,
# 4k, 16k and 32k keys, BSHD): cuDNN's BF16 and FP8 graphs, SDPA's cuDNN and flash rows and FlashAttention-3's BF16
# and FP8 forward, each as the timed call and as its attention kernel alone under the profiler, beside NVIDIA's
# published H200 figures (`fsbench kernels bench --calibrate`), with clock and power; with --cudnn-site DIR among
# the options (an unpacked nvidia-cudnn-cu13 wheel) its cuDNN rows again under that cuDNN. 2. Every BF16 row,
# every FP8 peer and the fused Gluon mxfp8 kernel at the paper's shapes, as the call and as the kernel alone, the
# best BF16 row and FP8 peer named at each shape. The peers are first checked against SDPA. About 5 minutes on
# one H100 or H200; FlashAttention-3 needs the wheel scripts/build_peers.sh builds.
#
#   benchmarks/calibrate.sh --out DIR [BENCH OPTIONS...]  -> DIR/calibrate.json, calibrate.md, paper.json, paper.md
set -euo pipefail
if [[ ${1:-} != --out || -z ${2:-} ]]; then
  echo "usage: benchmarks/calibrate.sh --out DIR [fsbench kernels bench options...]" >&2
  exit 2
fi
out=$(realpath -m "$2")
shift 2
cd "$(dirname "$0")/.."
mkdir -p "$out"
PY=${PYTHON:-python3}
"$PY" -m pytest -q -rs -p no:cacheprovider tests/test_baselines_gpu.py tests/test_kernels_peers_gpu.py \
  > "$out/baselines_tests.log" 2>&1 || { tail -20 "$out/baselines_tests.log"; exit 1; }
"$PY" -m fsbench kernels bench --calibrate --repeats 7 --clock-seconds 2 \
  --json "$out/calibrate.json" --markdown "$out/calibrate.md" "$@"
# the rows of this list that run here (a peer not installed is left out, as `--list` says)
rows=$("$PY" -m fsbench kernels bench --list | grep -v "cannot run here" | grep -xE \
  "sdpa-cudnn-bf16|sdpa-flash-bf16|cudnn-bf16|fa3-bf16|cudnn-fp8|sage2-fp8|fa3-fp8|gluon-fused-mxfp8" | paste -sd,)
"$PY" -m fsbench kernels bench --rows "$rows" --no-emulate --repeats 7 --kernel-calls 5 --clock-seconds 2 \
  --json "$out/paper.json" --markdown "$out/paper.md"
