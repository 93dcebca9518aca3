#!/usr/bin/env bash
# Create (or reuse) .venv-vbench: vbench 0.1.5 pins transformers 4.33 and numpy<2, which cannot share the
# diffusers environment, so fsbench calls it across a process boundary (eval/vbench_runner.py).
# The order matters: torch first (local wheels), then vbench, then
# setuptools<81 because openai-clip still imports pkg_resources. About 3 min and 6.7 GB on a clean machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
VENV=${FSBENCH_VBENCH_VENV:-.venv-vbench}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
VPY="$VENV/bin/python"
if "$VPY" -c "import vbench, clip, decord, numpy; assert numpy.__version__ < '2'" 2>/dev/null; then
  echo "vbench environment ready: $VENV"
  exit 0
fi
"$VPY" -m pip install -q torch==2.14.1 torchvision==0.29.1
"$VPY" -m pip install -q vbench==0.1.5
"$VPY" -m pip install -q "setuptools<81"
"$VPY" -c "import vbench, clip, decord"
echo "vbench environment ready: $VENV"
