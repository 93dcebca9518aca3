#!/usr/bin/env bash
# On a GPU node without network: install fsbench from a wheelhouse folder made by scripts/wheelhouse.sh, into the
# node's own Python, then run `fsbench doctor` to say what the node can run.
#
#   scripts/install_offline.sh WHEELHOUSE [--extras gpu] [--mode run] [-- PIP_OPTIONS...]
#
# pip installs with --no-index from WHEELHOUSE only, and upgrades a package only where fsbench needs a newer
# one. The node's torch, triton and nvidia-* CUDA libraries are pinned to the versions installed (a constraints
# file made from `pip list --format=freeze`), so nothing in the wheelhouse can replace them: a wheel that would
# need another torch makes pip stop before installing anything. PYTHON names the interpreter (default python3);
# the doctor's mode (run, eval, submission, all) is --mode; its exit code is this script's.
set -euo pipefail
if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  [[ $# -ge 1 ]] && exit 0 || exit 2
fi
wheelhouse=$1
shift
extras=gpu
mode=run
pip_options=()
while (($#)); do
  case $1 in
    --extras) extras=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --) shift; pip_options=("$@"); break ;;
    *) echo "install_offline.sh: error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
wheel=$(ls "$wheelhouse"/fsbench-*.whl 2>/dev/null | tail -1 || true)
if [[ -z $wheel ]]; then
  echo "install_offline.sh: error: no fsbench-*.whl in $wheelhouse: build the folder with scripts/wheelhouse.sh" \
       "on a connected machine and copy it here" >&2
  exit 2
fi
pins=$(mktemp)
trap 'rm -f "$pins"' EXIT
"$PY" -m pip list --format=freeze 2>/dev/null | grep -iE '^(torch|triton|pytorch-triton|nvidia-[a-z0-9_.-]+)==' \
  | grep -iv '^nvidia-cudnn-frontend==' > "$pins" || true
echo "kept as installed: $(tr '\n' ' ' < "$pins")"
"$PY" -m pip install --no-index --find-links "$wheelhouse" --constraint "$pins" --upgrade-strategy only-if-needed \
  "${pip_options[@]}" "$wheel${extras:+[$extras]}"
# the same version number may already be installed from an older tree: this wheel replaces it
"$PY" -m pip install -q --no-index --no-deps --force-reinstall "$wheel"
"$PY" -m pip check || echo "(pip check: conflicts above are between packages of the node's own image)"
cd /  # the installed package, not a source tree in the working directory
"$PY" -m fsbench doctor --mode "$mode"
