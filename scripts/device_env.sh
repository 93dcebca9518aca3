# Sourced by the device scripts on the H200 (Python 3.12, torch, triton, transformers preinstalled; no
# network): install from the wheelhouse/ folder only the packages that do not import there, so nothing
# the image ships is shadowed, and put the repository on PYTHONPATH. scripts/device_e2e.sh says how the
# wheelhouse is fetched. Name the tree with FSBENCH_COMMIT=<sha> in the device command: the copy there may carry
# stale git metadata (harness.results.git_commit).
SITE=/tmp/site

# module:wheel-prefix pairs; a wheel is installed only when its module does not import (nothing is shadowed).
missing=()
for pair in diffusers:diffusers mlperf_loadgen:mlcommons_loadgen importlib_metadata:importlib_metadata zipp:zipp \
            requests:requests urllib3:urllib3 idna:idna certifi:certifi charset_normalizer:charset_normalizer \
            PIL:pillow imageio:imageio imageio_ffmpeg:imageio_ffmpeg click:click cudnn:nvidia_cudnn_frontend; do
  python3 -c "import ${pair%%:*}" 2>/dev/null || missing+=(wheelhouse/"${pair#*:}"-*.whl)
done
# NVML's energy counter (joules per video); optional: without its wheel the profile integrates nvidia-smi's power
python3 -c "import pynvml" 2>/dev/null || for w in wheelhouse/nvidia_ml_py-*.whl; do if [[ -e $w ]]; then missing+=("$w"); fi; done
# diffusers needs huggingface_hub >= 1.32
python3 -c "import huggingface_hub as h, sys; sys.exit(tuple(map(int, h.__version__.split('.')[:2])) < (1, 32))" \
  2>/dev/null || missing+=(wheelhouse/huggingface_hub-*.whl)
# the attention peers, where scripts/build_peers.sh has built their wheels (the newest of each)
for pair in sageattention:sageattention flash_attn_interface:flash_attn_3; do
  wheel=$(ls -t wheelhouse/"${pair#*:}"-*.whl 2>/dev/null | head -1)
  if [[ -n $wheel ]] && ! python3 -c "import ${pair%%:*}" 2>/dev/null; then missing+=("$wheel"); fi
done
if ((${#missing[@]})); then
  echo "installing into $SITE: ${missing[*]}"
  python3 -m pip install -q --no-index --no-deps --target "$SITE" "${missing[@]}"
fi
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
