#!/usr/bin/env bash
# a14b-synthetic at 720x1280x81 with FP8 GEMMs on one host of several GPUs, for bf16, mxfp8 and hybrid (no figure
# on the front page yet):
#   singlestream  every query on all GPUs: --cfg-parallel 2 --ulysses GPUS/2 (NVIDIA's MLPerf layout)
#   offline       one pipeline replica per GPU
#   baseline      the same on one GPU, for the scaling efficiency
# At 20 steps one SingleStream query takes about 45-60 s on 8 H200s and one Offline sample 5-8 minutes per GPU;
# the Offline and baseline phases run OFF_STEPS (4) steps and report per-step time. All phases: about 25 minutes.
#
#   benchmarks/multigpu.sh --out DIR [singlestream|offline|baseline|all]   -> DIR/<phase>-<schedule>/, commands.txt
#
# Knobs (environment): GPUS (8), STEPS (20), OFF_STEPS (4), SS_COUNT (SingleStream queries per schedule, 2; 64
# gives a VALID result), OFF_COUNT (Offline samples, = GPUS), SCHEDULES ("bf16 mxfp8 hybrid"), GEMM (fp8).
# The same runs under torchrun (every process one rank; fsbench reads WORLD_SIZE):
#   torchrun --nproc_per_node=8 -m fsbench run --model a14b-synthetic --scenario SingleStream --schedule hybrid \
#     --cfg-parallel 2 --ulysses 4 --gemm fp8 --count 2 --time 0 --target-latency 45000
set -euo pipefail
if [[ ${1:-} != --out || -z ${2:-} ]]; then
  echo "usage: benchmarks/multigpu.sh --out DIR [singlestream|offline|baseline|all]" >&2
  exit 2
fi
out=$(realpath -m "$2")
PHASE=${3:-all}
GPUS=${GPUS:-8}
STEPS=${STEPS:-20}
OFF_STEPS=${OFF_STEPS:-4}
SS_COUNT=${SS_COUNT:-2}
OFF_COUNT=${OFF_COUNT:-$GPUS}
SCHEDULES=${SCHEDULES:-"bf16 mxfp8 hybrid"}
GEMM=${GEMM:-fp8}
PY=${PYTHON:-python3}
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader || true

fsbench() {
  echo "fsbench run $*" | tee -a "$out/commands.txt"
  "$PY" -m fsbench run "$@"
}

common=(--model a14b-synthetic --preset mlperf --gemm "$GEMM" --time 0)
for schedule in $SCHEDULES; do
  if [[ $PHASE == all || $PHASE == singlestream ]]; then
    fsbench "${common[@]}" --schedule "$schedule" --steps "$STEPS" --scenario SingleStream --gpus "$GPUS" \
      --cfg-parallel 2 --ulysses $((GPUS / 2)) --count "$SS_COUNT" --target-latency 45000 \
      --system "h200x$GPUS-a14b-synthetic" --out "$out/singlestream-$schedule"
  fi
  if [[ $PHASE == all || $PHASE == offline ]]; then
    fsbench "${common[@]}" --schedule "$schedule" --steps "$OFF_STEPS" --scenario Offline --gpus "$GPUS" \
      --count "$OFF_COUNT" --target-qps 0.025 --profile \
      --system "h200x$GPUS-a14b-synthetic" --out "$out/offline-$schedule"
  fi
  if [[ $PHASE == all || $PHASE == baseline ]]; then
    fsbench "${common[@]}" --schedule "$schedule" --steps "$OFF_STEPS" --scenario SingleStream --count 1 \
      --target-latency 300000 --profile --system "h200x1-a14b-synthetic" --out "$out/baseline-$schedule"
  fi
done
