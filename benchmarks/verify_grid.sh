#!/usr/bin/env bash
# The kernels on the pattern grid, on one sm_90 card in one call (about 5 minutes): the Gluon and Triton kernels
# against the emulator (`fsbench kernels check`), the GPU tests of the kernels and the emulator, an interleaved A/B of
# the Gluon kernel against an older tree's (--old-tree: `git archive COMMIT | tar -x -C TREE`), then the bench table
# at the paper's shapes beside cuDNN and the skeleton, and the --sweep grid. Each step writes under DIR and a failing
# step does not stop the next; the exit status is that of the first failure.
#
#   benchmarks/verify_grid.sh --out DIR [--old-tree TREE]
#     -> DIR/check_gluon.json, check_triton.json, gpu_tests.log, ab_gluon.json, bench.json, bench.md, sweep.json
set -uo pipefail
if [[ ${1:-} != --out || -z ${2:-} ]]; then
  echo "usage: benchmarks/verify_grid.sh --out DIR [--old-tree TREE]" >&2
  exit 2
fi
out=$(realpath -m "$2")
old=""
if [[ ${3:-} == --old-tree ]]; then
  [[ -d ${4:-} ]] || { echo "verify_grid.sh: --old-tree ${4:-} is not a folder" >&2; exit 2; }
  old=$(realpath "$4")
fi
cd "$(dirname "$0")/.."
mkdir -p "$out"
PY=${PYTHON:-python3}
status=0
run() {  # run one step, keep going on failure, remember the first
  echo "== $*"
  "$@" || { rc=$?; echo "!! step failed ($rc): $*"; [[ $status != 0 ]] || status=$rc; }
}
run "$PY" -m fsbench kernels check --impl gluon --json "$out/check_gluon.json"
run "$PY" -m fsbench kernels check --impl triton --json "$out/check_triton.json"
run bash -c "'$PY' -m pytest -q -rs -p no:cacheprovider tests/test_kernels_emulator_gpu.py tests/test_triton_gpu.py \
  > '$out/gpu_tests.log' 2>&1; rc=\$?; tail -5 '$out/gpu_tests.log'; exit \$rc"
if [[ -n $old ]]; then
  run "$PY" benchmarks/lab/ab_gluon.py --old-tree "$old" --configs fused-mxfp8,fused-mxfp6 --repeats 5 \
    --shape 1,40,75600,128 --shape 1,24,32768,128 --json "$out/ab_gluon.json"
fi
rows=gluon-fused-mxfp8,skeleton-fp8,sdpa-cudnn-bf16
"$PY" -c "import cudnn" 2>/dev/null && rows=cudnn-fp8,$rows
run "$PY" -m fsbench kernels bench --rows "$rows" --interleave --repeats 5 --no-emulate \
  --shape 1,40,75600,128 --shape 1,24,32768,128 --shape 1,40,32768,128 \
  --json "$out/bench.json" --markdown "$out/bench.md"
run "$PY" -m fsbench kernels bench --rows "$rows" --sweep --interleave --repeats 3 --no-emulate \
  --json "$out/sweep.json"
exit $status
