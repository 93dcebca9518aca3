#!/usr/bin/env bash
# Install (or reuse) .venv, then run the test suite. GPU tests are skipped where no CUDA device is present.
set -euo pipefail
source "$(dirname "$0")/_venv.sh"
export FSBENCH_DATA=${FSBENCH_DATA:-$(cd .. && pwd)/shared/data}
exec .venv/bin/python -m pytest -q "$@"
