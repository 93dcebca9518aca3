#!/usr/bin/env bash
# Paper Table 8 on the CPU (float64, no GPU): the relative error of each Schraudolph proxy width's 2^x over one
# doubling of x, beside the paper's figures. A few seconds.
#
#   benchmarks/table8.sh --out DIR   -> DIR/table8.json
set -euo pipefail
if [[ ${1:-} != --out || -z ${2:-} ]]; then
  echo "usage: benchmarks/table8.sh --out DIR" >&2
  exit 2
fi
out=$(realpath -m "$2")
mkdir -p "$out"
PY=${PYTHON:-python3}
commit=$(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown)
"$PY" -m fsbench kernels proxy-table --json | "$PY" -c '
import datetime, json, os, platform, sys
rows = json.load(sys.stdin)
print(json.dumps({"command": "fsbench kernels proxy-table --json", "git_commit": sys.argv[1],
                  "device": f"CPU ({platform.machine()}, {os.cpu_count()} cores); float64, no GPU involved",
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "rows": rows}, indent=2))' "$commit" > "$out/table8.json"
