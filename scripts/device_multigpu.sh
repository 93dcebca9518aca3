#!/usr/bin/env bash
# On one 8-GPU H200 host (Python 3.12, torch, triton, transformers preinstalled; no network): the multi-GPU runs of
# a14b-synthetic at 720x1280x81 with FP8 GEMMs for bf16, mxfp8 and hybrid:
#   singlestream  every query on all GPUs: --cfg-parallel 2 --ulysses GPUS/2 (NVIDIA's MLPerf layout)
#   offline       one pipeline replica per GPU
#   baseline      the same two runs on one GPU, for the scaling efficiency
# Usage: scripts/device_multigpu.sh [singlestream|offline|baseline|all]   (default all; one phase per device call
# keeps each under the 10-minute command limit at the default counts). Results: $OUT/<phase>-<schedule>/ run
# folders (manifest.json holds the layout under results.<Scenario>.performance.parallel) and $OUT/commands.txt.
# fsbench is installed from wheelhouse/ as for scripts/device_e2e.sh.
#
# Knobs (environment): GPUS (8), STEPS (20), SS_COUNT (SingleStream queries per schedule, 2; 64 gives a VALID
# result), OFF_COUNT (Offline samples, = GPUS), SCHEDULES ("bf16 mxfp8 hybrid"), GEMM (fp8), OUT (results/h200x8).
# At 20 steps one SingleStream query is expected near 45-60 s on 8 GPUs, one Offline sample 5-8 min per GPU:
# OFFLINE at 20 steps needs more than one 10-minute call per schedule, so the default Offline phase runs with
# STEPS=${OFF_STEPS:-4} and reports per-step time; scale to 20 steps from its profile, or raise OFF_STEPS where
# a longer call is possible.
#
# The same runs under torchrun (every process one rank; fsbench reads WORLD_SIZE):
#   torchrun --nproc_per_node=8 -m fsbench run --model a14b-synthetic --scenario SingleStream --schedule hybrid \
#     --cfg-parallel 2 --ulysses 4 --gemm fp8 --count 2 --time 0 --target-latency 45000
set -euo pipefail
cd "$(dirname "$0")/.."
PHASE=${1:-all}
GPUS=${GPUS:-8}
STEPS=${STEPS:-20}
OFF_STEPS=${OFF_STEPS:-4}
SS_COUNT=${SS_COUNT:-2}
OFF_COUNT=${OFF_COUNT:-$GPUS}
SCHEDULES=${SCHEDULES:-"bf16 mxfp8 hybrid"}
GEMM=${GEMM:-fp8}
OUT=${OUT:-results/h200x8}
export FSBENCH_DIST_TIMEOUT=${FSBENCH_DIST_TIMEOUT:-3600}
scripts/install_offline.sh wheelhouse --model a14b-synthetic
mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader || true
nvidia-smi topo -m || true

fsbench() {
  echo "python3 -m fsbench run $*" | tee -a "$OUT/commands.txt"
  python3 -m fsbench run "$@"
}

common=(--model a14b-synthetic --preset mlperf --gemm "$GEMM" --time 0)
for schedule in $SCHEDULES; do
  if [[ $PHASE == all || $PHASE == singlestream ]]; then
    fsbench "${common[@]}" --schedule "$schedule" --steps "$STEPS" --scenario SingleStream --gpus "$GPUS" \
      --cfg-parallel 2 --ulysses $((GPUS / 2)) --count "$SS_COUNT" --target-latency 45000 \
      --system "h200x$GPUS-a14b-synthetic" --out "$OUT/singlestream-$schedule"
  fi
  if [[ $PHASE == all || $PHASE == offline ]]; then
    fsbench "${common[@]}" --schedule "$schedule" --steps "$OFF_STEPS" --scenario Offline --gpus "$GPUS" \
      --count "$OFF_COUNT" --target-qps 0.025 --profile \
      --system "h200x$GPUS-a14b-synthetic" --out "$OUT/offline-$schedule"
  fi
  if [[ $PHASE == all || $PHASE == baseline ]]; then
    fsbench "${common[@]}" --schedule "$schedule" --steps "$OFF_STEPS" --scenario SingleStream --count 1 \
      --target-latency 300000 --profile --system "h200x1-a14b-synthetic" --out "$OUT/baseline-$schedule"
  fi
done
python3 - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
for manifest in sorted(Path(sys.argv[1]).glob("*/manifest.json")):
    for scenario, modes in json.loads(manifest.read_text())["results"].items():
        s = modes.get("performance", {})
        print(f"{manifest.parent.name:28} {scenario:12} steps {json.loads(manifest.read_text())['settings']['steps']:2}"
              f"  p50 {s.get('latency_p50_ns', 0) / 1e9:8.2f} s  samples/s {s.get('samples_per_second', 0):.4g}"
              f"  layout {s.get('parallel', {'processes': 1})}")
EOF
