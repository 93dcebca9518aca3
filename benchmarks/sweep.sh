#!/usr/bin/env bash
# The fused Gluon kernel, cuDNN FP8 and cuDNN BF16 over 4k-128k keys at 24 and 40 heads (head dim 128), in one
# process, interleaved, median of 5, each row 2 s back to back for its clock, power and TFLOP/J; then the plot of
# TFLOP/s and TFLOP/J against sequence length: the front page's "Against sequence length". The JSON is rewritten
# after every shape. About 8 minutes on one H100 or H200.
#
#   benchmarks/sweep.sh --out DIR [BENCH OPTIONS...]   -> DIR/sweep.json, sweep.md, sweep.png
set -euo pipefail
if [[ ${1:-} != --out || -z ${2:-} ]]; then
  echo "usage: benchmarks/sweep.sh --out DIR [fsbench kernels bench options...]" >&2
  exit 2
fi
out=$(realpath -m "$2")
shift 2
mkdir -p "$out"
PY=${PYTHON:-python3}
"$PY" -m fsbench kernels bench --sweep --repeats 5 --clock-seconds 2 --json "$out/sweep.json" \
  --markdown "$out/sweep.md" "$@"
"$PY" -m fsbench kernels plot-sweep "$out/sweep.json" "$out/sweep.png"
