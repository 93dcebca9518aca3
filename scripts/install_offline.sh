#!/usr/bin/env bash
# On a GPU node without network: install fsbench from a wheelhouse folder made by scripts/wheelhouse.sh into the
# node's own Python, then run `fsbench doctor` to say what the node can run.
#
#   scripts/install_offline.sh WHEELHOUSE [--extras gpu] [DOCTOR OPTIONS...]    e.g. --model a14b-synthetic
#
# pip installs with --no-index from WHEELHOUSE only, and upgrades a package only where fsbench needs a newer one.
# The node's torch, triton and CUDA runtime libraries (wheelhouse_plan.py's list) are pinned to the versions
# installed (a constraints file made from `pip list --format=freeze`), so nothing in the wheelhouse replaces them:
# a wheel that would need another torch makes pip stop before it installs anything. A Triton older than the gpu
# extra asks stays too: fsbench is then installed without that extra, and impl=auto runs the Triton kernel instead
# of Gluon.
# PYTHON names the interpreter (default python3). Exit status: pip's; the doctor's verdict is printed.
set -euo pipefail
if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  [[ $# -ge 1 ]] && exit 0 || exit 2
fi
wheelhouse=$(realpath "$1")
shift
extras=gpu
if [[ ${1:-} == --extras ]]; then extras=$2; shift 2; fi
PY=${PYTHON:-python3}
wheel=$(ls "$wheelhouse"/fsbench-*.whl 2>/dev/null | tail -1 || true)
if [[ -z $wheel ]]; then
  echo "install_offline.sh: error: no fsbench-*.whl in $wheelhouse: build the folder with scripts/wheelhouse.sh" \
       "on a connected machine and copy it here" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip list --format=freeze > "$work/freeze.txt" 2>/dev/null
"$PY" "$(dirname "$0")/wheelhouse_plan.py" --pins "$work/freeze.txt" > "$work/pins.txt"
echo "kept as installed: $(tr '\n' ' ' < "$work/pins.txt")"
pip_install=("$PY" -m pip install --no-index --find-links "$wheelhouse" --constraint "$work/pins.txt")
if "$PY" -c 'import os, sys, sysconfig; sys.exit(sys.prefix != sys.base_prefix or not os.path.isfile(
    os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
  echo "$PY is the system's Python (EXTERNALLY-MANAGED): installing beside its packages, its torch, triton and" \
       "CUDA libraries pinned as they are (a venv --system-site-packages avoids this)"
  pip_install+=(--break-system-packages)
fi
requested=("$wheel${extras:+[$extras]}")
if [[ ,$extras, == *,gpu,* ]] && ! "${pip_install[@]}" -q --dry-run "${requested[@]}" 2> "$work/dry-run.txt"; then
  if ! grep -qi triton "$work/dry-run.txt"; then cat "$work/dry-run.txt" >&2; exit 1; fi
  echo "the node's triton is older than fsbench[gpu] asks: installing without the gpu extra (impl=auto runs the" \
       "Triton kernel, not Gluon; the run manifest says so)"
  others=$(echo ",$extras," | sed 's/,gpu,/,/; s/^,//; s/,$//')
  requested=("$wheel${others:+[$others]}")
  ls "$wheelhouse"/nvidia_cudnn_frontend-*.whl >/dev/null 2>&1 && requested+=(nvidia-cudnn-frontend)
fi
"${pip_install[@]}" --upgrade-strategy only-if-needed "${requested[@]}"
# the same version number may already be installed from an older tree: this wheel replaces it
"${pip_install[@]}" -q --no-deps --force-reinstall "$wheel"
"$PY" -m pip check || echo "(pip check: the conflicts above are between packages of the node's own image)"
cd /  # the installed package, not a source tree in the working directory
"$PY" -m fsbench doctor "$@" || echo "install_offline.sh: fsbench is installed; the doctor's MISSING lines say" \
                                     "what this node still lacks for the mode asked"
