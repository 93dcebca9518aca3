#!/usr/bin/env bash
# The Gluon kernels against the emulator on the GPU: every format and softmax, random inputs, late sinks,
# staircases, tail tiles and the gate switched off; relative error against float32 SDPA and the difference between
# kernel and emulator. The front page's "Accuracy against the emulator". About a minute on one H100 or H200.
#
#   benchmarks/check.sh --out DIR [CHECK OPTIONS...]   -> DIR/check_gluon.json
set -euo pipefail
if [[ ${1:-} != --out || -z ${2:-} ]]; then
  echo "usage: benchmarks/check.sh --out DIR [fsbench kernels check options...]" >&2
  exit 2
fi
out=$(realpath -m "$2")
shift 2
mkdir -p "$out"
"${PYTHON:-python3}" -m fsbench kernels check --impl gluon --json "$out/check_gluon.json" "$@"
