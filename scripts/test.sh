#!/usr/bin/env bash
# Install (or reuse) .venv and the VBench environment .venv-vbench, then lint (ruff), type-check (mypy) and run
# the test suite.
# GPU tests are skipped where no CUDA device is present. FSBENCH_VBENCH=0 skips building .venv-vbench
# (its end-to-end tests then skip with the reason).
set -euo pipefail
source "$(dirname "$0")/_venv.sh"
[ "${FSBENCH_VBENCH:-1}" = 0 ] || bash scripts/setup_vbench_env.sh
export FSBENCH_DATA=${FSBENCH_DATA:-$(cd .. && pwd)/shared/data}
# lint and types first: a finding fails the run before any test starts (settings in pyproject.toml)
.venv/bin/python -m ruff check .
.venv/bin/python -m mypy
exec .venv/bin/python -m pytest -q "$@"
