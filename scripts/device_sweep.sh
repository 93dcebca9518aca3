#!/usr/bin/env bash
# Shape behaviour on the H200 (no network), in one device call, all under $OUT: `fsbench kernels bench --sweep`
# (the fused Gluon kernel, cuDNN FP8 and cuDNN BF16 over 4k-128k keys at 24 and 40 heads, interleaved, median of
# 5, each row held CLOCK_S seconds for its clock, power and TFLOP/J), then the plot of TFLOP/s against sequence
# length. cudnn-frontend's wheel comes from wheelhouse/ (only it: the image has the rest). SWEEP_S bounds the
# sweep (default 480 s; the JSON is rewritten after every shape, so a stopped sweep keeps what it measured).
# Extra arguments go to the bench (e.g. --rows gluon-fused-mxfp8,cudnn-fp8,sdpa-cudnn-bf16,fa3-fp8).
#   FSBENCH_COMMIT=<sha> bash scripts/device_sweep.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
shopt -s nullglob
wheels=(wheelhouse/nvidia_cudnn_frontend-*.whl wheelhouse/sageattention-*.whl wheelhouse/flash_attn_3-*.whl)
# the kernels need nothing of the wheelhouse but these and fsbench itself (the image has torch and triton)
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . "${wheels[@]}"
timeout "${SWEEP_S:-480}" python3 -m fsbench kernels bench --sweep --repeats 5 --clock-seconds "${CLOCK_S:-3}" \
  --json "$OUT/sweep.json" --markdown "$OUT/sweep.md" "$@" >"$OUT/sweep.log" 2>&1
tail -46 "$OUT/sweep.log"  # the whole table
python3 -m fsbench kernels plot-sweep "$OUT/sweep.json" "$OUT/sweep.png"
