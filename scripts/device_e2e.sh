#!/usr/bin/env bash
# On one H200 (Python 3.12, torch, triton and transformers preinstalled; no network): install what is missing
# from the wheelhouse/ folder, then measure a14b-synthetic at 720x1280x81 (75600 tokens): per-denoising-step
# latency (both CFG passes) for bf16 and each schedule, the self-attention share of a step, and one
# SingleStream query with 2 steps. Writes $OUT/device_e2e.json (default results/h200/device-e2e) plus the
# query's LoadGen run folders. Fits in about 6 minutes; extra arguments go to scripts/device_e2e.py.
# Fetch the wheels into the git-ignored wheelhouse/ on a machine with PyPI (about 46 MB; imageio-ffmpeg
# 0.6.0 because 0.8.1 alone is 68 MB; cudnn-frontend 1.16.0 for the bench's
# cudnn-fp8 row, 2 MB where 1.32 is 12 MB):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d wheelhouse diffusers==0.42.1 mlcommons-loadgen==6.0.17 importlib-metadata \
#     zipp requests urllib3 idna certifi charset-normalizer pillow imageio imageio-ffmpeg==0.6.0 click \
#     "huggingface-hub>=1.32,<2" nvidia-cudnn-frontend==1.16.0 nvidia-ml-py
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/h200/device-e2e}
source scripts/device_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import torch, triton, transformers, diffusers as d; print(torch.__version__, triton.__version__, \
  transformers.__version__, d.__version__, sep=' / ')"
python3 scripts/device_e2e.py --out "$OUT" "$@"
