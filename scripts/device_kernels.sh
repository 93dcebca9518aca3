#!/usr/bin/env bash
# Kernel benchmarks on the H200 (fsbench installed from wheelhouse/; see device_e2e.sh): `fsbench kernels bench` at
# both shapes
# (JSON and markdown rewritten after each shape), `fsbench kernels check` of the Triton and the Gluon
# kernels, then the GPU tests (both kernels); all under $OUT. Extra arguments go to the bench
# (e.g. --rows triton-fused-mxfp8,sdpa-cudnn-bf16). The default limits (BENCH_S, CHECK_S per engine, TESTS_S)
# add up to 550 s, inside one 600 s device call (2026-12-03: every row at both shapes took 130 s).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install_offline.sh wheelhouse --model a14b-synthetic
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"
date -u +%FT%TZ | tee -a "$OUT/device.txt"
timeout "${BENCH_S:-200}" python3 -m fsbench kernels bench --repeats 5 --no-emulate --json "$OUT/kernels_bench.json" \
  --markdown "$OUT/kernels_bench.md" "$@" 2>&1 | tee "$OUT/bench.log" | grep -v "^-" | tail -36
for engine in triton gluon; do
  timeout "${CHECK_S:-75}" python3 -m fsbench kernels check --engine $engine --json "$OUT/kernels_check_$engine.json" \
    > "$OUT/check_$engine.log" 2>&1
  tail -22 "$OUT/check_$engine.log"
done
timeout "${TESTS_S:-200}" python3 -m pytest -q -rf -p no:cacheprovider tests/test_triton_gpu.py > "$OUT/triton_gpu_tests.log" 2>&1
tail -8 "$OUT/triton_gpu_tests.log"
