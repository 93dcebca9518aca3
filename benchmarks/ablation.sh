#!/usr/bin/env bash
# Paper Table 4 on the GPU emulator: the Fused-Softmax components one by one, relative error and cosine against
# BF16 attention at (1,24,32768,128), mean over ten seeds, every format. The JSON is rewritten after every seed,
# so a stopped run keeps the seeds it finished (`fsbench kernels ablation-merge` joins two parts). About 11
# minutes on one H200.
#
#   benchmarks/ablation.sh --out DIR [ABLATION OPTIONS...]   -> DIR/table4.json
set -euo pipefail
if [[ ${1:-} != --out || -z ${2:-} ]]; then
  echo "usage: benchmarks/ablation.sh --out DIR [fsbench kernels ablation options...]" >&2
  exit 2
fi
out=$(realpath -m "$2")
shift 2
mkdir -p "$out"
"${PYTHON:-python3}" -m fsbench kernels ablation --shape 1,24,32768,128 --seeds 10 --device cuda \
  --out "$out/table4.json" "$@"
