#!/usr/bin/env bash
# Install (or reuse) .venv and the VBench environment .venv-vbench, then lint (ruff), type-check (mypy) and run
# the test suite on two pytest-xdist workers, each test file whole on one worker so its module fixtures are made
# once (`-n 0` after the script's name runs it in one process; other arguments go to pytest).
# --fast: the inner loop, every test not marked `slow` (README: "Tests" says what that leaves out), without
# building .venv-vbench. CI runs everything.
# GPU tests are skipped where no CUDA device is present. FSBENCH_VBENCH=0 skips building .venv-vbench
# (its end-to-end tests then skip with the reason).
set -euo pipefail
FAST=()
if [ "${1:-}" = --fast ]; then
  shift
  FAST=(-m "not slow")
  FSBENCH_VBENCH=0
fi
source "$(dirname "$0")/_venv.sh"
[ "${FSBENCH_VBENCH:-1}" = 0 ] || bash scripts/setup_vbench_env.sh
export FSBENCH_DATA=${FSBENCH_DATA:-$(cd .. && pwd)/shared/data}
# lint and types first: a finding fails the run before any test starts (settings in pyproject.toml)
.venv/bin/python -m ruff check .
.venv/bin/python -m mypy
exec .venv/bin/python -m pytest -q -n 2 --dist loadfile "${FAST[@]}" "$@"
