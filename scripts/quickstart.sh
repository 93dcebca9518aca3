#!/usr/bin/env bash
# Install (or reuse) .venv, then run the main job on the embedded tiny model (nothing is downloaded): the campaign
# scenarios/campaigns/tiny-demo.toml, i.e. a SingleStream performance run of three precision schedules, their
# accuracy sweep over the tiny model's own prompts, PSNR/SSIM of each against the BF16 run, and the comparison
# table, plots and page (index.html: the videos side by side, in sync). Rerun it and every finished stage is
# skipped. LPIPS and VBench need weights that cannot be downloaded here (scripts/fetch_eval_weights.py fetches
# them on a connected machine).
set -euo pipefail
source "$(dirname "$0")/_venv.sh"
# The tiny model is too small to gain from threads; one thread avoids oversubscribing a shared machine.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
RUNS=${FSBENCH_QUICKSTART_OUT:-results/runs/campaigns/tiny-demo}
FSBENCH=.venv/bin/fsbench

"$FSBENCH" schedules --steps 4 --layers 2
"$FSBENCH" campaign scenarios/campaigns/tiny-demo.toml --out "$RUNS"

echo
echo "Runs:             $RUNS/{bf16,mxfp8,hybrid} (videos/*.mp4, manifest.json, LoadGen logs, eval/)"
echo "Comparison:       $RUNS/compare/compare.md, speedup.png, frames.png"
echo "Comparison page:  $RUNS/compare/html/index.html (open it in a browser; no server needed)"
