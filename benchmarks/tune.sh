#!/usr/bin/env bash
# The tuner on a GPU: `fsbench tune` on a14b-synthetic at 480x832 (81 frames, 4 steps), 2 calibration and 2
# held-out validation prompts, one candidate of the front besides every single-format schedule, the fidelity
# bounds PSNR >= 25 dB and SSIM >= 0.8 against BF16 (scikit-image, no weights to fetch), into DIR/tune/;
# then DIR/tune_summary.json: its tune.json with the command, commit, device, date and the wall time of the whole
# tune, and DIR/report.md, its report. The front page's "The tuner on a GPU". About 8 minutes on one H100 or H200.
#
#   benchmarks/tune.sh --out DIR [TUNE OPTIONS...]   (e.g. --prompts FILE)
#                                                    -> DIR/tune/, DIR/tune_summary.json, DIR/report.md
set -euo pipefail
if [[ ${1:-} != --out || -z ${2:-} ]]; then
  echo "usage: benchmarks/tune.sh --out DIR [fsbench tune options...]" >&2
  exit 2
fi
out=$(realpath -m "$2")
shift 2
cd "$(dirname "$0")/.."
mkdir -p "$out"
PY=${PYTHON:-python3}
args=(--model a14b-synthetic --height 480 --width 832 --steps 4 --calibration 2 --validation 2 --candidates 1
      --budget "psnr>=25" --budget "ssim>=0.8" --out "$out/tune" "$@")
start=$(date +%s.%N)
"$PY" -m fsbench tune "${args[@]}"
end=$(date +%s.%N)
cp "$out/tune/report.md" "$out/report.md"
"$PY" - "$out" "$start" "$end" "fsbench tune ${args[*]}" <<'PY'
import json, sys
from pathlib import Path

from fsbench.harness.run.writer import provenance

out, start, end, command = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
import torch

doc = provenance(torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")
doc["command"] = command
doc["wall_s"] = end - start
doc["tune"] = json.loads((out / "tune" / "tune.json").read_text())
(out / "tune_summary.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
PY
