#!/usr/bin/env bash
# The attention kernels beside their peers at the paper's two shapes, (1,40,75600,128) and (1,24,32768,128): the
# front page's first table. Every row that runs here is benched: ours (fused mxfp8, conventional FP8, the FP8
# skeleton), cuDNN BF16 through SDPA, cuDNN's own FP8 and BF16 graphs (need nvidia-cudnn-frontend) and the peers
# SageAttention2 and FlashAttention-3's FP8 and BF16 forward (need the wheels scripts/build_peers.sh builds from
# scripts/peer_sources.sh's sources), so that the best BF16 row and the best FP8 peer are named from one run.
# The peers are first checked against BF16 SDPA. Rows round-robin, median of 5, then each row 3 s back to back
# for its SM clock, board power and TFLOP/J. About 4 minutes on one H100 or H200.
#
#   benchmarks/kernels.sh --out DIR [BENCH OPTIONS...]   -> DIR/bench.json, bench.md, peers_tests.log
set -euo pipefail
if [[ ${1:-} != --out || -z ${2:-} ]]; then
  echo "usage: benchmarks/kernels.sh --out DIR [fsbench kernels bench options...]" >&2
  exit 2
fi
out=$(realpath -m "$2")
shift 2
cd "$(dirname "$0")/.."
mkdir -p "$out"
PY=${PYTHON:-python3}
rows=gluon-fused-mxfp8,gluon-conventional-fp8,skeleton-fp8,sdpa-cudnn-bf16
for pair in cudnn-bf16:cudnn fa3-bf16:flash_attn_interface cudnn-fp8:cudnn fa3-fp8:flash_attn_interface \
            sage2-fp8:sageattention._qattn_sm90; do
  "$PY" -c "import ${pair#*:}" 2>/dev/null && rows=${pair%%:*},$rows
done
echo "rows: $rows"
"$PY" -m pytest -q -rs -p no:cacheprovider tests/test_kernels_peers_gpu.py > "$out/peers_tests.log" 2>&1 || {
  tail -20 "$out/peers_tests.log"; exit 1; }
"$PY" -m fsbench kernels bench --rows "$rows" --interleave --repeats 5 --no-emulate --clock-seconds 3 \
  --json "$out/bench.json" --markdown "$out/bench.md" "$@"
