#!/usr/bin/env bash
# Energy per FLOP of our kernels of one tile structure, from the FP8 skeleton (both GEMMs, no softmax) through the
# fused mxfp8, mxfp6 and mxfp4 kernels and the conventional one, beside cuDNN FP8: each row 3 s back to back for
# its clock, power and TFLOP/J, at (1,24,32768,128) and (1,40,75600,128) unless --shape is given. With the
# instructions per key tile from the kernels' SASS it gives the front page's "ceiling the numerics set". About 3
# minutes on one H100 or H200.
#
#   benchmarks/energy.sh --out DIR [BENCH OPTIONS...]   -> DIR/energy_rows.json, energy_rows.md
set -euo pipefail
if [[ ${1:-} != --out || -z ${2:-} ]]; then
  echo "usage: benchmarks/energy.sh --out DIR [fsbench kernels bench options...]" >&2
  exit 2
fi
out=$(realpath -m "$2")
shift 2
mkdir -p "$out"
shapes=(--shape 1,24,32768,128 --shape 1,40,75600,128)
[[ " $* " == *" --shape "* ]] && shapes=()
"${PYTHON:-python3}" -m fsbench kernels bench \
  --rows skeleton-fp8,gluon-fused-mxfp8,gluon-fused-mxfp6,gluon-fused-mxfp4,gluon-conventional-fp8,cudnn-fp8 \
  "${shapes[@]}" --interleave --repeats 5 --no-emulate --clock-seconds 3 --json "$out/energy_rows.json" \
  --markdown "$out/energy_rows.md" "$@"
