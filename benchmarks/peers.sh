#!/usr/bin/env bash
# The attention peers built on this node and benched beside every BF16 row: where FlashAttention-3 is not
# installed, scripts/build_peers.sh builds FlashAttention-3 and SageAttention2 for sm_90 from the sources
# scripts/peer_sources.sh laid out in build/peers-src, and pip installs what was built; then benchmarks/kernels.sh
# (every row that runs here: FlashAttention-3's FP8 and BF16 forward, cuDNN's and SDPA's BF16 among them). About
# 9 minutes on one H100 or H200 (4 of them the builds).
#
#   benchmarks/peers.sh --out DIR [BENCH OPTIONS...]   -> DIR/build/ (logs, wheels), DIR/bench.json, bench.md
set -euo pipefail
if [[ ${1:-} != --out || -z ${2:-} ]]; then
  echo "usage: benchmarks/peers.sh --out DIR [fsbench kernels bench options...]" >&2
  exit 2
fi
out=$(realpath -m "$2")
shift 2
cd "$(dirname "$0")/.."
mkdir -p "$out"
PY=${PYTHON:-python3}
if ! "$PY" -c "import flash_attn_interface" 2>/dev/null; then
  PYTHON=$PY scripts/build_peers.sh build/peers-src "$out/build" || echo "a peer did not build: $out/build says why"
  wheels=("$out"/build/wheels/*.whl)
  [[ -e ${wheels[0]} ]] && "$PY" -m pip install -q --no-index --no-deps --force-reinstall "${wheels[@]}"
fi
benchmarks/kernels.sh --out "$out" "$@"
