#!/usr/bin/env bash
# Install (or reuse) .venv, then run the main job on the embedded tiny model (nothing is downloaded):
# a SingleStream performance run (64 queries, the fewest LoadGen's early stopping accepts), an accuracy
# sweep of three precision schedules over the tiny model's own prompts, PSNR/SSIM of each against the BF16
# run, and the comparison table, plots and page (index.html: the videos side by side, in sync). About 4 minutes
# on 2 CPU cores. LPIPS and VBench need weights that cannot be downloaded here (scripts/fetch_eval_weights.py
# fetches them on a connected machine).
set -euo pipefail
source "$(dirname "$0")/_venv.sh"
# The tiny model is too small to gain from threads; one thread avoids oversubscribing a shared machine.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
RUNS=${FSBENCH_QUICKSTART_OUT:-results/runs/quickstart}
FSBENCH=.venv/bin/fsbench

"$FSBENCH" schedules --steps 4 --layers 2
"$FSBENCH" run --model tiny --preset mlperf --schedule bf16 --scenario SingleStream --mode performance \
  --count 64 --time 0 --target-latency 1000 --out "$RUNS/single-stream-bf16"
"$FSBENCH" sweep --model tiny --preset mlperf --schedules bf16,mxfp8,hybrid --out "$RUNS/sweep"
for schedule in bf16 mxfp8 hybrid; do  # latency for the comparison; 16 queries is too few to be VALID
  "$FSBENCH" run --model tiny --preset mlperf --schedule "$schedule" --scenario SingleStream --count 16 --time 0 \
    --target-latency 1000 --out "$RUNS/sweep/$schedule"
done
for schedule in mxfp8 hybrid; do
  "$FSBENCH" eval "$RUNS/sweep/$schedule" --reference "$RUNS/sweep/bf16" --metrics psnr,ssim
done
"$FSBENCH" compare "$RUNS/sweep/bf16" "$RUNS/sweep/mxfp8" "$RUNS/sweep/hybrid" --out "$RUNS/compare" \
  --html "$RUNS/compare/html"

echo
echo "SingleStream run: $RUNS/single-stream-bf16"
echo "  (manifest.json, cpu-tiny/wan-2.2-t2v-a14b/SingleStream/performance/run_1/mlperf_log_summary.txt)"
echo "Schedule sweep:   $RUNS/sweep/{bf16,mxfp8,hybrid} (videos/*.mp4, manifest.json, Offline/accuracy logs, eval/)"
echo "Comparison:       $RUNS/compare/compare.md, speedup.png, frames.png"
echo "Comparison page:  $RUNS/compare/html/index.html (open it in a browser; no server needed)"
