#!/usr/bin/env bash
# Latency parts on one H200 (no network; fsbench installed from wheelhouse/ as scripts/device_e2e.sh describes):
# the parts of one a14b-synthetic 720x1280x81 SingleStream video, per GEMM kind (bf16, fp8) and attention
# format (bf16, mxfp8, mxfp6, mxfp4), written to $OUT/device_speed.json after every measurement, then the
# Table 6 latency columns assembled from them ($OUT/speed.md, $OUT/speed.json). scripts/device_speed.py
# says what is measured and how the total is summed. Three 10-minute commands (each under 510 s of measuring):
#   OUT=A scripts/device_speed.sh                                                   # eager: every part
#   OUT=B scripts/device_speed.sh --compile --parts forwards --gemms bf16 --repeats 2  # compiled blocks
#   OUT=C scripts/device_speed.sh --compile --parts forwards --gemms fp8 --repeats 2   # (compiling: ~2 min)
# then, on any machine: python3 scripts/device_speed.py assemble A B C --out results/h200/e2e
# (one table per compile setting; the compiled one takes text, VAE, mp4 and LoadGen parts from A).
# Extra arguments go to `device_speed.py measure`.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/h200/device-speed}
export PYTHONUNBUFFERED=1
scripts/install_offline.sh wheelhouse --model a14b-synthetic
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
python3 -c "import torch, triton, diffusers as d; print(torch.__version__, triton.__version__, d.__version__, sep=' / ')"
python3 scripts/device_speed.py measure --out "$OUT" --budget-s 510 "$@"
python3 scripts/device_speed.py assemble "$OUT" --out "$OUT" | tail -20
