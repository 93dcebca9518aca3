#!/usr/bin/env bash
# Builds the attention peers of `fsbench kernels bench` for sm_90 only, on the H200 node (nvcc >= 12.3, torch,
# setuptools, wheel, ninja; no network), from the sources scripts/peer_sources.sh laid out in SRC_DIR, into wheels
# in wheelhouse/ (git-ignored; scripts/install_offline.sh installs them), against the node's own torch:
#   sage2: SageAttention's sm90 kernel (INT8 QK, FP8 PV) and the CUDA quantization kernels it calls; its sm80 and
#          sm89 kernels are left out (a build-time edit of its setup.py, made in the scratch copy);
#   fa3:   FlashAttention-3's forward at head dim 128, FP8 e4m3 (and BF16, which its API links against), every other
#          feature switched off by FlashAttention's own FLASH_ATTENTION_DISABLE_* flags.
# The two build at once (about 100 s each on 16 cores), each in a scratch copy of its sources (SRC_DIR is left as
# it is). OUT_DIR gets each build's log, a copy of each wheel (OUT_DIR/wheels)
# and peers_build.txt: the sources' commits, each build's seconds and status, the sizes of wheel and libraries.
# Exit status: 0 when both wheels were built, 1 otherwise (the logs say why).
#   scripts/build_peers.sh SRC_DIR OUT_DIR
set -uo pipefail
if (($# != 2)) || [[ ! -f $1/SOURCES.txt ]]; then
  echo "usage: scripts/build_peers.sh SRC_DIR OUT_DIR (SRC_DIR as laid out by scripts/peer_sources.sh)" >&2
  exit 2
fi
SRC=$(realpath "$1")
OUT_DIR=$(realpath -m "$2")
cd "$(dirname "$0")/.."
WHEELHOUSE=$PWD/wheelhouse
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT_DIR/wheels" "$WHEELHOUSE"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST=9.0 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA_HOME/bin:$PATH"
# torch's ATen/cuda headers include cuSPARSE, cuBLAS and cuSOLVER headers, and SageAttention links the driver
# (-lcuda): where the toolkit lacks them, take the headers from the CUDA library wheels torch depends on, and
# the driver's library from the toolkit's stubs or the driver's folder
wheel_headers=$("$PYTHON" - "$CUDA_HOME/include" <<'PY'
import glob, os, sys
wanted = ("cusparse.h", "cublas_v2.h", "cublasLt.h", "cusolverDn.h")
if any(not os.path.exists(os.path.join(sys.argv[1], h)) for h in wanted):
    try:
        import nvidia
    except ImportError:
        sys.exit()
    print(":".join(sorted({os.path.dirname(f) for p in nvidia.__path__ for h in wanted
                           for f in glob.glob(os.path.join(p, "**", "include", h), recursive=True)})))
PY
)
if [[ -n $wheel_headers ]]; then
  export CPLUS_INCLUDE_PATH="$wheel_headers${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}"
fi
export LIBRARY_PATH="${LIBRARY_PATH:+$LIBRARY_PATH:}$CUDA_HOME/lib64/stubs:/usr/local/nvidia/lib64"
linkable=$(ls "$CUDA_HOME/lib64/stubs/libcuda.so" /usr/local/nvidia/lib64/libcuda.so \
           /usr/lib/x86_64-linux-gnu/libcuda.so 2>/dev/null)
if [[ -z $linkable ]]; then  # only the loader's libcuda.so.1: link against it under the name -lcuda looks for
  driver=$(ldconfig -p | grep -m1 -o '/[^ ]*/libcuda\.so\.1$')
  if [[ -n $driver ]]; then
    mkdir -p "$scratch/lib" && ln -s "$driver" "$scratch/lib/libcuda.so" && LIBRARY_PATH+=":$scratch/lib"
  fi
fi
report=$OUT_DIR/peers_build.txt
{
  echo "sources (SRC_DIR/SOURCES.txt):"
  cat "$SRC/SOURCES.txt"
  echo "nvcc: $(nvcc --version | grep -o 'release [0-9.]*')"
  "$PYTHON" -c "import torch, setuptools; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'setuptools', setuptools.__version__)"
  echo "library headers from wheels: ${wheel_headers:-none needed}"
} | tee "$report"

# replace FILE OLD NEW: OLD must occur exactly once (a changed upstream file stops the build, not silently)
replace() {
  "$PYTHON" - "$@" <<'EOF'
import pathlib, sys
path, old, new = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
text = path.read_text()
if text.count(old) != 1:
    sys.exit(f"{path}: expected one {old!r}, found {text.count(old)}")
path.write_text(text.replace(old, new))
EOF
}

build_sage2() {
  local dir=$scratch/SageAttention
  cp -r "$SRC/SageAttention" "$dir"
  # its sm80 and sm89 kernels only for those GPUs (upstream builds them for sm_90 too)
  replace "$dir/setup.py" \
    "    if HAS_SM80 or HAS_SM86 or HAS_SM89 or HAS_SM90 or HAS_SM100 or HAS_SM120 or HAS_SM121:" \
    "    if HAS_SM80 or HAS_SM86:" &&
  replace "$dir/setup.py" "    if HAS_SM89 or HAS_SM90 or HAS_SM100 or HAS_SM120 or HAS_SM121:" "    if HAS_SM89:" &&
  # torch >= 2.14's headers require C++20 where SageAttention asks for C++17 (the last -std wins); -g0: no host
  # debug information in the libraries
  local std
  std=$("$PYTHON" -c "import torch; print('-std=c++20' if tuple(map(int, torch.__version__.split('.')[:2])) >= (2, 14) \
else '')")
  CXX_APPEND_FLAGS="-g0 $std" NVCC_APPEND_FLAGS="$std" EXT_PARALLEL=2 "$PYTHON" -m pip wheel -v --no-deps --no-build-isolation --no-cache-dir \
    -w "$scratch/wheels-sage2" "$dir"
}

build_fa3() {
  local dir=$scratch/flash-attention
  cp -r "$SRC/flash-attention" "$dir"
  # the CUTLASS headers come with the sources (no git submodule, no network)
  replace "$dir/hopper/setup.py" '    subprocess.run(["git", "submodule", "update", "--init", "../csrc/cutlass"])' \
    '    pass' &&
  env FLASH_ATTENTION_FORCE_BUILD=TRUE $(for f in BACKWARD SPLIT PAGEDKV APPENDKV LOCAL SOFTCAP PACKGQA FP16 VARLEN \
    CLUSTER HDIM64 HDIM96 HDIM192 HDIM256 SM80 HDIMDIFF64 HDIMDIFF192; do echo FLASH_ATTENTION_DISABLE_$f=TRUE; done) \
    "$PYTHON" -m pip wheel -v --no-deps --no-build-isolation --no-cache-dir -w "$scratch/wheels-fa3" "$dir/hopper"
}

export SRC scratch PYTHON
export -f replace build_sage2 build_fa3
declare -A pid start
for peer in sage2 fa3; do
  start[$peer]=$(date +%s)
  bash -c "build_$peer" >"$OUT_DIR/build_$peer.log" 2>&1 &
  pid[$peer]=$!
done
status=0
for peer in sage2 fa3; do
  wait "${pid[$peer]}"
  rc=$?
  seconds=$(($(date +%s) - start[$peer]))
  wheel=$(ls "$scratch/wheels-$peer"/*.whl 2>/dev/null | head -1)
  if ((rc == 0)) && [[ -n $wheel ]]; then
    cp "$wheel" "$WHEELHOUSE/" && cp "$wheel" "$OUT_DIR/wheels/"
    libs=$("$PYTHON" -c "import sys, zipfile; print(', '.join(f'{i.filename} {i.file_size / 2**20:.1f} MiB' \
for i in zipfile.ZipFile(sys.argv[1]).infolist() if i.filename.endswith('.so')))" "$wheel")
    echo "$peer: built in $seconds s: $(basename "$wheel") $(du -h "$wheel" | cut -f1) ($libs)" | tee -a "$report"
  else
    status=1
    echo "$peer: FAILED after $seconds s (exit $rc); the end of $OUT_DIR/build_$peer.log:" | tee -a "$report"
    grep -v "^ptxas info\|^    [0-9]* bytes stack\|^ptxas *info" "$OUT_DIR/build_$peer.log" | tail -25 | tee -a "$report"
  fi
done
exit $status
