#!/usr/bin/env bash
# On a connected machine: build a wheelhouse folder with everything fsbench needs on a GPU node without network,
# beyond what the node's Python already has. Copy the folder to the node and run scripts/install_offline.sh there.
#
#   scripts/wheelhouse.sh [--python 3.12] [--platform TAG]... [--extras gpu] [--node-freeze FILE]
#                         [--have NAME[==VERSION]]... [--pin NAME==VERSION]... [--out wheelhouse]
#
#   --python       the node's Python version (default 3.12)
#   --platform     wheel platform tags of the node (default: manylinux 2.28/2.27/2.17 x86_64)
#   --extras       fsbench extras to bring (default gpu; eval adds scipy and matplotlib, about 60 MB more)
#   --node-freeze  `python3 -m pip list --format=freeze` of the node's Python: nothing it already satisfies is
#                  downloaded, and nothing is checked against guesses
#   --have         without a freeze: a package the node has (it and all it requires are not downloaded);
#                  torch and triton need their version, e.g. --have torch==2.11.0 --have triton==3.6.0
#   --pin          a wheel to bring, in this version range, even where the node may have it (pip on the node
#                  uses it only if its own copy does not do), e.g. imageio-ffmpeg==0.6.0 (29 MB where 0.8.1
#                  is 68 MB) or 'huggingface-hub>=1.32,<2' (diffusers needs that, an image may have older)
#
# The node's torch, triton and CUDA runtime libraries (nvidia-cublas-cu12, nvidia-cudnn-cu13, ...: the list is
# wheelhouse_plan.py's) are never downloaded: pip resolves against an empty stand-in for each (torch's CUDA wheels
# alone are gigabytes). Every other package travels, nvidia-ml-py and nvidia-cutlass-dsl included. The folder holds
# fsbench's own wheel (`pip wheel --no-deps .`) and a plan.txt of what was chosen and why.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
python=3.12
platforms=()
extras=gpu
freeze=
have=()
pins=()
out=wheelhouse
while (($#)); do
  case $1 in
    --python) python=$2; shift 2 ;;
    --platform) platforms+=("$2"); shift 2 ;;
    --extras) extras=$2; shift 2 ;;
    --node-freeze) freeze=$(realpath "$2"); shift 2 ;;
    --have) have+=("$2"); shift 2 ;;
    --pin) pins+=("$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "wheelhouse.sh: error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
((${#platforms[@]})) ||
  platforms=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64)
if [[ -z $freeze && ${#have[@]} -eq 0 ]]; then
  echo "wheelhouse.sh: error: say what the node has: --node-freeze FILE (python3 -m pip list --format=freeze" \
       "on the node) or --have torch==VERSION --have triton==VERSION ..." >&2
  exit 2
fi
for h in "${have[@]}"; do
  if [[ $h =~ ^(torch|triton)$ ]]; then
    echo "wheelhouse.sh: error: --have $h needs the node's version: --have $h==VERSION" >&2
    exit 2
  fi
done
if [[ -n $freeze ]]; then
  mapfile -t protected < <("$PY" "$REPO/scripts/wheelhouse_plan.py" --pins "$freeze")
else
  protected=()
  for h in "${have[@]}"; do [[ $h =~ ^(torch|triton)== ]] && protected+=("$h"); done
fi
mkdir -p "$out"
out=$(realpath "$out")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
target=(--python-version "$python" --implementation cp --only-binary=:all:)
for p in "${platforms[@]}"; do target+=(--platform "$p"); done

# 1. fsbench's own wheel
rm -f "$out"/fsbench-*.whl
"$PY" -m pip wheel -q --no-deps -w "$out" "$REPO"
wheel=$(ls "$out"/fsbench-*.whl)

# 2. empty stand-ins for the node's torch/triton, so pip never resolves their CUDA wheels
mkdir -p "$work/stand-ins"
: > "$work/constraints.txt"
for spec in "${protected[@]}"; do
  name=${spec%%==*} version=${spec#*==}
  "$PY" - "$work/stand-ins" "$name" "${version%%+*}+node" <<'EOF'
import sys, zipfile
folder, name, version = sys.argv[1:]
dist = f"{name.replace('-', '_')}-{version}"
with zipfile.ZipFile(f"{folder}/{dist}-py3-none-any.whl", "w") as whl:
    whl.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    whl.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    whl.writestr(f"{dist}.dist-info/RECORD", "")
EOF
  echo "$name==${version%%+*}+node" >> "$work/constraints.txt"
done
for h in "${have[@]}"; do [[ $h == *==* && ! $h =~ ^(torch|triton)== ]] && echo "$h" >> "$work/constraints.txt"; done
printf '%s\n' "${pins[@]}" >> "$work/constraints.txt"

# 3. resolve fsbench[extras] for the node, then plan what the node lacks
"$PY" -m pip install -q --dry-run --ignore-installed --target "$work/t" --report "$work/report.json" \
  "${target[@]}" --find-links "$work/stand-ins" -c "$work/constraints.txt" "$wheel${extras:+[$extras]}"
plan_args=(--python "$python" --extras "$extras")
[[ -n $freeze ]] && plan_args+=(--node-freeze "$freeze")
for h in "${have[@]}"; do plan_args+=(--have "$h"); done
for p in "${pins[@]}"; do plan_args+=(--bring "${p%%[<>=!~ ]*}"); done
"$PY" "$REPO/scripts/wheelhouse_plan.py" "$work/report.json" "${plan_args[@]}" > "$work/plan.txt" 2> "$work/left.txt"

# 4. download exactly those wheels
if [[ -s $work/plan.txt ]]; then
  "$PY" -m pip download -q --no-deps "${target[@]}" -d "$out" -r "$work/plan.txt"
fi
{ echo "# scripts/wheelhouse.sh for CPython $python (${platforms[*]}), fsbench[${extras}]"
  echo "# $(basename "$wheel")"; cat "$work/plan.txt"; echo "# $(cat "$work/left.txt")"; } > "$out/plan.txt"
cat "$out/plan.txt"
echo "$out: $(ls "$out"/*.whl | wc -l) wheels, $(du -sh "$out" | cut -f1); on the node: scripts/install_offline.sh $out"
