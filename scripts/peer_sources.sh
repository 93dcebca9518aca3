#!/usr/bin/env bash
# Source releases of the attention peers of `fsbench kernels bench` (rows sage2-fp8 and fa3-fp8), at pinned
# commits and cut to what their sm_90 builds need, into DEST (default build/peers-src, git-ignored: other
# projects' code is never committed here): SageAttention's package and CUDA sources; FlashAttention-3's hopper/
# with the CUTLASS headers (CUTLASS at FlashAttention's submodule commit) that its hdim-128 forward, scheduler and
# API include, so DEST stays small enough to travel with a device command. Writes DEST/SOURCES.txt.
# Needs git with network access, or SAGE_REPO / FA_REPO / CUTLASS_REPO naming local clones, and nvcc (>= 12.3)
# to list the headers. scripts/build_peers.sh builds the wheels.
#   scripts/peer_sources.sh [DEST]
set -euo pipefail
DEST=$(realpath -m "${1:-build/peers-src}")
SAGE_URL=https://github.com/thu-ml/SageAttention
SAGE_REPO=${SAGE_REPO:-$SAGE_URL}
SAGE_COMMIT=d1a57a546c3d395b1ffcbeecc66d81db76f3b4b5  # v2.2.0-38, 2026-01-17
FA_URL=https://github.com/Dao-AILab/flash-attention
FA_REPO=${FA_REPO:-$FA_URL}
FA_COMMIT=0251105a2fb19d2957484b7f023cd8c115286ced  # fa4-v4.0.0.beta27, 2026-08-15
CUTLASS_URL=https://github.com/NVIDIA/cutlass
CUTLASS_REPO=${CUTLASS_REPO:-$CUTLASS_URL}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$DEST/SageAttention" "$DEST/flash-attention"
mkdir -p "$DEST/SageAttention" "$DEST/flash-attention/csrc/cutlass"

# export REPO COMMIT DIR PATHS...: the files of PATHS at COMMIT into DIR. A URL is cloned without blobs (git
# fetches only those of PATHS); a local git directory is read as it is.
export_tree() {
  local repo=$1 commit=$2 dir=$3 git_dir
  shift 3
  git_dir=$work/$(basename "$dir").git
  if [[ -d $repo ]]; then
    git_dir=$(git -C "$repo" rev-parse --absolute-git-dir)
  else
    git clone -q --bare --filter=blob:none "$repo" "$git_dir"
  fi
  git --git-dir="$git_dir" archive "$commit" "$@" | tar -x -C "$dir"
  echo "$git_dir"
}

export_tree "$SAGE_REPO" "$SAGE_COMMIT" "$DEST/SageAttention" setup.py pyproject.toml README.md LICENSE csrc sageattention \
  >/dev/null
fa_git=$(export_tree "$FA_REPO" "$FA_COMMIT" "$DEST/flash-attention" hopper README.md LICENSE)
CUTLASS_COMMIT=$(git --git-dir="$fa_git" rev-parse "$FA_COMMIT:csrc/cutlass")
export_tree "$CUTLASS_REPO" "$CUTLASS_COMMIT" "$DEST/flash-attention/csrc/cutlass" include LICENSE.txt >/dev/null

# The CUTLASS headers the build includes: nvcc's host pass (-M) and its device pass for sm_90a (the dry run's
# preprocessing command with -M), with the feature switches scripts/build_peers.sh sets.
hopper=$DEST/flash-attention/hopper
cutlass_inc=$DEST/flash-attention/csrc/cutlass/include
flags=(-std=c++17 -I"$hopper" -I"$cutlass_inc" -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DCUTLASS_ENABLE_GDC_FOR_SM90
       -DNDEBUG -gencode arch=compute_90a,code=sm_90a)
for f in BACKWARD PAGEDKV SPLIT APPENDKV LOCAL SOFTCAP PACKGQA FP16 VARLEN CLUSTER HDIM64 HDIM96 HDIM192 HDIM256 SM8x \
         HDIMDIFF64 HDIMDIFF192; do
  flags+=(-DFLASHATTENTION_DISABLE_$f)
done
export CPLUS_INCLUDE_PATH="$(dirname "$NVCC")/../include/cccl${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}"
deps=$work/deps
: >"$deps"
list_headers() {  # the headers the sources include, appended to $deps; fails on a missing one
  for src in instantiations/flash_fwd_hdim128_e4m3_sm90.cu instantiations/flash_fwd_hdim128_bf16_sm90.cu \
             flash_prepare_scheduler.cu; do
    (cd "$hopper" && "$NVCC" -M "${flags[@]}" "$src" >>"$deps")
    device=$(cd "$hopper" && "$NVCC" --dryrun -c "${flags[@]}" "$src" -o "$work/x.o" 2>&1 \
             | grep -- '-D__CUDA_ARCH__=900.* -E ' | sed -e 's/^#\$ //' -e 's/ -E / -M /' -e 's/ -o "[^"]*"/ -o "$out"/')
    (cd "$hopper" && out=$work/device.d && eval "$device" && cat "$out" >>"$deps")
  done
  # the API's torch and Python headers are not here: -MG lists them without reading them
  (cd "$hopper" && g++ -M -MG -std=c++17 -I. -I"$cutlass_inc" flash_api_stable.cpp >>"$deps")
}
list_headers
tr ' \\' '\n\n' <"$deps" | grep -F "$cutlass_inc/" | xargs -r realpath -m | sort -u >"$work/keep"
find "$cutlass_inc" -type f | sort | comm -23 - "$work/keep" | xargs -r rm
find "$cutlass_inc" -type d -empty -delete
: >"$deps"
list_headers  # again on the cut tree: every header is still there

{
  echo "repository	commit	paths"
  echo "$SAGE_URL	$SAGE_COMMIT	setup.py pyproject.toml README.md LICENSE csrc sageattention"
  echo "$FA_URL	$FA_COMMIT	hopper README.md LICENSE"
  echo "$CUTLASS_URL	$CUTLASS_COMMIT	include (the $(wc -l <"$work/keep") headers the sm_90 hdim-128 forward includes) LICENSE.txt"
} >"$DEST/SOURCES.txt"
cat "$DEST/SOURCES.txt"
du -sh "$DEST"
