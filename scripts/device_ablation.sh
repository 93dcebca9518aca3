#!/usr/bin/env bash
# On the H200 (fsbench installed from wheelhouse/; see device_e2e.sh): the CUDA-emulator tests, then paper Table 4
# at the paper's
# shape with ten seeds (extra arguments go to the ablation, e.g. --formats bf16). The JSON is rewritten after every seed, so a stopped run keeps what it finished.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install_offline.sh wheelhouse --model a14b-synthetic
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"
python3 -m pytest -q -rf -p no:cacheprovider tests/test_kernels_emulator_gpu.py > "$OUT/emulator_gpu_tests.log" 2>&1
tail -15 "$OUT/emulator_gpu_tests.log"
time python3 -m fsbench kernels ablation --shape 1,24,32768,128 --seeds 10 --device cuda \
  --out "$OUT/ablation_table4.json" "$@" 2>&1 | tr '\r' '\n' | tail -12 | tee "$OUT/ablation_table4.log"
