#!/usr/bin/env bash
# One H200 node (no network), one command of at most 600 s: fsbench installed from wheelhouse/ (once per node
# kept warm, by scripts/install_offline.sh), then the tasks named on the command line, in order:
#   check                   the kernels' GPU tests ($CHECK_TESTS, default tests/test_triton_gpu.py and
#                           tests/test_kernels_prologue_gpu.py) and the prologue's timing (scripts/lab/prologue_time.py);
#                           stops the command where a test fails
#   bench NAME              the fused mxfp8 call at (1,40,75600,128) three ways, interleaved, with clock and power:
#                           BHSD tensors, the pipeline's call (projections through the self_attention op), cuDNN FP8
#   query SCHEDULES CONFIGS real 720x1280x81 SingleStream queries of a14b-synthetic (scripts/e2e_queries.py), one
#                           for each schedule in each configuration (comma lists), as many at once as the node has
#                           GPUs, each alone on its GPU
# OUT gets e2e_queries.json (one row per query), query.tgz (each run folder's records: manifest, profile, log and
# LoadGen summary; the videos and the latent stay), NAME.json per bench, prologue_time.json and logs.tgz.
#   FSBENCH_COMMIT=<sha> bash scripts/device_query.sh check bench cold query mxfp8 optimized bench hot
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 FSBENCH_DATA=/tmp/data
logs=$(mktemp -d)
records() {  # each query's manifest, profile, log and LoadGen summary (a video is 14 MB, the latent 19 MB)
  tar czf "$OUT/logs.tgz" -C "$logs" .
  [[ -d /tmp/e2e ]] && (cd /tmp/e2e && find . \( -name "profile.*" -o -name manifest.json -o -name fsbench.log \
    -o -name mlperf_log_summary.txt \) -print0 | tar czf "$OUT/query.tgz" --null -T -)
}
trap records EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$logs/device.txt"
# a node kept warm between commands keeps what the last one installed: the same wheels are not installed again
installed=/tmp/fsbench-wheelhouse.sha256
sha256sum wheelhouse/*.whl > "$logs/wheelhouse.sha256"
if cmp -s "$logs/wheelhouse.sha256" "$installed"; then
  echo "wheelhouse already installed on this node"
else
  scripts/install_offline.sh wheelhouse --model a14b-synthetic --plain > "$logs/install.log" 2>&1 || {
    tail -20 "$logs/install.log"; exit 1; }
  cp "$logs/wheelhouse.sha256" "$installed"
fi
mkdir -p "$FSBENCH_DATA"
echo "a red fox running through fresh snow at dawn" > "$FSBENCH_DATA/vbench_prompts.txt"
while (($#)); do
  case $1 in
    check)
      timeout "${TESTS_S:-240}" python3 -m pytest -q -rfs -p no:cacheprovider \
        ${CHECK_TESTS:-tests/test_triton_gpu.py tests/test_kernels_prologue_gpu.py} > "$logs/gpu_tests.log" 2>&1
      status=$?
      tail -3 "$logs/gpu_tests.log"
      ((status)) && { echo "GPU tests failed ($status): stopping"; exit 1; }
      timeout 120 python3 scripts/lab/prologue_time.py --json "$OUT/prologue_time.json" > "$logs/prologue_time.log" 2>&1
      tail -4 "$logs/prologue_time.log"
      shift ;;
    bench)
      timeout 150 python3 -m fsbench kernels bench --rows gluon-fused-mxfp8,gluon-fused-mxfp8-op,cudnn-fp8 \
        --shape 1,40,75600,128 --interleave --repeats 7 --no-emulate --clock-seconds 3 --json "$OUT/bench_$2.json" \
        > "$logs/bench_$2.log" 2>&1
      grep -v "^-" "$logs/bench_$2.log" | tail -6
      shift 2 ;;
    query)
      IFS=, read -ra schedules <<< "$2"
      IFS=, read -ra configs <<< "$3"
      python3 scripts/e2e_queries.py ${schedules[@]/#/--schedule } ${configs[@]/#/--config } \
        --gpus "$(nvidia-smi -L | wc -l)" --runs /tmp/e2e --table "$OUT/e2e_queries.json" \
        2>&1 | tee "$logs/query_${2//,/+}_${3//,/+}.log" | tail -12
      shift 3 ;;
    *) echo "device_query.sh: error: unknown task $1" >&2; exit 2 ;;
  esac
done
