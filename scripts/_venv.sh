# Sourced by quickstart.sh and test.sh: create or reuse .venv and install fsbench with its whole stack.
# torch and torchvision go first, pinned to the releases pip finds on local disk here (torchvision is
# needed by lpips); everything else comes from setup.cfg.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python
if ! "$VPY" -c "import torch, torchvision" 2>/dev/null; then
  "$VPY" -m pip install -q torch==2.14.1 torchvision==0.29.1
fi
"$VPY" -m pip install -q -e ".[eval,dev]"
