#!/usr/bin/env bash
# On one H200 (Python 3.12, torch, triton and transformers preinstalled; no network): install fsbench from the
# wheelhouse/ folder (scripts/install_offline.sh), then measure a14b-synthetic at 720x1280x81 (75600 tokens):
# per-denoising-step latency (both CFG passes) for bf16 and each schedule, the self-attention share of a step, and one
# SingleStream query with 2 steps. Writes $OUT/device_e2e.json (default results/h200/device-e2e) plus the
# query's LoadGen run folders. Fits in about 6 minutes; extra arguments go to scripts/device_e2e.py.
# Build the git-ignored wheelhouse/ on a machine with PyPI (about 50 MB; imageio-ffmpeg 0.6.0 because 0.8.1 alone
# is 68 MB; cudnn-frontend 1.16.0 for the bench's cudnn-fp8 row, 2 MB where 1.32 is 12 MB):
#   scripts/wheelhouse.sh --have torch==2.11.0 --have triton==3.6.0 --have transformers==5.17.0 \
#     --pin imageio-ffmpeg==0.6.0 --pin nvidia-cudnn-frontend==1.16.0 --pin 'huggingface-hub>=1.32,<2'
# Name the tree with FSBENCH_COMMIT=<sha> in the device command: the copy there may carry stale git metadata.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/h200/device-e2e}
scripts/install_offline.sh wheelhouse --model a14b-synthetic
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import torch, triton, transformers, diffusers as d; print(torch.__version__, triton.__version__, \
  transformers.__version__, d.__version__, sep=' / ')"
python3 scripts/device_e2e.py --out "$OUT" "$@"
