#!/usr/bin/env bash
# The install check on a GPU node without network: fsbench installed from a wheelhouse (scripts/wheelhouse.sh
# builds it on a connected machine) by scripts/install_offline.sh, then `fsbench doctor`'s verdict for the
# a14b-synthetic model. About 2 minutes.
#
#   benchmarks/install.sh --out DIR WHEELHOUSE   -> DIR/install_offline.log
set -euo pipefail
if [[ ${1:-} != --out || -z ${2:-} || -z ${3:-} ]]; then
  echo "usage: benchmarks/install.sh --out DIR WHEELHOUSE" >&2
  exit 2
fi
out=$(realpath -m "$2")
wheelhouse=$3
cd "$(dirname "$0")/.."
mkdir -p "$out"
scripts/install_offline.sh "$wheelhouse" --model a14b-synthetic 2>&1 | tee "$out/install_offline.log"
