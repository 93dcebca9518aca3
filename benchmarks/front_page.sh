#!/usr/bin/env bash
# Every GPU figure of the front page, most valuable first, within a time budget, resumable (a second call into
# the same DIR goes on where the first stopped): benchmarks/front_page.py says how. Then
# `python benchmarks/render.py --from DIR` publishes what is done.
#
#   benchmarks/front_page.sh --out DIR [--minutes N]   -> DIR/<step>/, DIR/<step>.log, DIR/front_page.json
set -euo pipefail
if [[ ${1:-} != --out || -z ${2:-} ]]; then
  echo "usage: benchmarks/front_page.sh --out DIR [--minutes N]" >&2
  exit 2
fi
exec "${PYTHON:-python3}" "$(dirname "$0")/front_page.py" "$@"
