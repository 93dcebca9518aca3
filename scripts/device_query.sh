#!/usr/bin/env bash
# One real 720x1280x81 SingleStream query of a14b-synthetic on one H200 node (no network), in one command of at
# most 600 s: fsbench installed from wheelhouse/ (scripts/install_offline.sh), then `scripts/e2e_queries.py` for
# SCHEDULE in CONFIG (default mxfp8, optimized). With CHECK=1 it first runs the kernels' GPU tests and the bench's
# fused mxfp8 call at (1,40,75600,128) three ways, interleaved with clock and power: BHSD tensors, BSHD tensors
# through the custom op (the pipeline's call), cuDNN FP8; the bench runs again right after the query, on the GPU the
# query left hot. OUT gets: e2e_queries.json (the row), query.tgz (the run folder without its video), bench_*.json
# and logs.tgz.
#   FSBENCH_COMMIT=<sha> SCHEDULE=bf16 CONFIG=optimized CHECK=0 bash scripts/device_query.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
schedule=${SCHEDULE:-mxfp8} config=${CONFIG:-optimized}
logs=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$logs/device.txt"
scripts/install_offline.sh wheelhouse --model a14b-synthetic --plain > "$logs/install.log" 2>&1 || {
  tail -20 "$logs/install.log"; exit 1; }
export FSBENCH_DATA=/tmp/data
mkdir -p "$FSBENCH_DATA"
echo "a red fox running through fresh snow at dawn" > "$FSBENCH_DATA/vbench_prompts.txt"
bench() {  # $1: the JSON's name
  timeout 120 python3 -m fsbench kernels bench --rows gluon-fused-mxfp8,gluon-fused-mxfp8-op,cudnn-fp8 \
    --shape 1,40,75600,128 --interleave --repeats 7 --no-emulate --clock-seconds 3 --json "$OUT/$1.json" \
    > "$logs/$1.log" 2>&1
  grep -v "^-" "$logs/$1.log" | tail -6
}
if [[ ${CHECK:-0} == 1 ]]; then
  tests=(tests/test_triton_gpu.py)
  [[ -f tests/test_kernels_prologue_gpu.py ]] && tests+=(tests/test_kernels_prologue_gpu.py)
  timeout "${TESTS_S:-120}" python3 -m pytest -q -rfs -p no:cacheprovider "${tests[@]}" > "$logs/gpu_tests.log" 2>&1
  tail -3 "$logs/gpu_tests.log"
  bench bench_before
fi
python3 scripts/e2e_queries.py --schedule "$schedule" --config "$config" --runs /tmp/e2e \
  --table "$OUT/e2e_queries.json" 2>&1 | tee "$logs/query.log" | tail -4
[[ ${CHECK:-0} == 1 ]] && bench bench_after
tar czf "$OUT/query.tgz" --exclude='*.mp4' -C /tmp/e2e .
tar czf "$OUT/logs.tgz" -C "$logs" .
