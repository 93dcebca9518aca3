"""Which of the wheels pip resolved for fsbench the GPU node lacks: the plan behind scripts/wheelhouse.sh.

pip resolves fsbench's requirements for the node's Python and platform (`pip install --dry-run --report`);
this script walks them from fsbench down, the way `pip install` on the node will (upgrade only if needed):
a requirement the node already satisfies is left to the node, and so are all of its own requirements. A
package the node has in an unknown version (`--have NAME` and all it requires) is trusted; `--bring NAME`
adds a candidate wheel anyway (pip on the node uses it only if the node's copy is too old).
The node's torch, triton and CUDA runtime libraries (PROTECTED) are never planned: install_offline.sh pins them.

Prints one `name==version` line per wheel to download; what is left to the node goes to stderr. With
`--pins FREEZE` it prints only the lines of a `pip list --format=freeze` that name those protected packages.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ImportError:  # any machine with pip has pip's copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name
    from pip._vendor.packaging.version import Version

# The CUDA runtime libraries torch's CUDA wheels bring (nvidia-cublas-cu12, nvidia-cudnn-cu13, nvidia-nccl-cu12,
# nvidia-cuda-runtime, ... and cuda-toolkit, which names them): gigabytes, built together with the node's torch.
# Every other nvidia-* or cuda-* package is an ordinary dependency that travels: nvidia-ml-py, the cuDNN frontend,
# nvidia-cutlass-dsl and its nvidia-cutlass-dsl-libs-cuXX (CUTLASS's own code, not CUDA's), cuda-bindings.
CUDA_LIBRARIES = ("cublas", "cuda-[a-z0-9-]+?", "cudnn", "cufft", "cufile", "curand", "cusolver", "cusparse",
                  "cusparselt", "nccl", "npp", "nvfatbin", "nvjitlink", "nvjpeg", "nvml-dev", "nvptxcompiler",
                  "nvshmem", "nvtx", "nvvm")
PROTECTED = re.compile(rf"^(torch|triton|pytorch-triton|cuda-toolkit|nvidia-({'|'.join(CUDA_LIBRARIES)})(-cu\d+)?)$")


def protected_pins(freeze: Path) -> list[str]:
    """The `name==version` lines of a freeze that name a protected package."""
    return [line.strip() for line in freeze.read_text().splitlines()
            if "==" in line and PROTECTED.match(canonicalize_name(line.split("==")[0]))]


def node_state(freeze: Path | None, have: list[str]) -> dict[str, str | None]:
    """name -> version the node has (None: present, version unknown)."""
    state: dict[str, str | None] = {}
    lines = freeze.read_text().splitlines() if freeze else []
    for line in [*lines, *have]:
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        name, _, version = line.partition("==")
        state[canonicalize_name(name.split(" @ ")[0])] = version.split("+")[0].strip() or None
    return state


def target_env(python: str) -> dict[str, str]:
    """Marker values of the node: CPython `python` on x86-64 Linux."""
    full = python if python.count(".") == 2 else python + ".0"
    return {"python_version": ".".join(python.split(".")[:2]), "python_full_version": full,
            "sys_platform": "linux", "platform_system": "Linux",
            "platform_machine": "x86_64", "os_name": "posix", "implementation_name": "cpython",
            "platform_python_implementation": "CPython"}


def requirements(metadata: dict, extras: set[str], env: dict[str, str]) -> list[Requirement]:
    """The requirements of one resolved distribution that apply to the target with these extras."""
    found = []
    for text in metadata.get("requires_dist", []):
        req = Requirement(text)
        if not req.marker or any(req.marker.evaluate({**env, "extra": e}) for e in (extras or {""})):
            found.append(req)
    return found


def with_dependencies(node: dict[str, str | None], have: list[str], resolved: dict[str, dict],
                      env: dict[str, str]) -> dict[str, str | None]:
    """A package named with --have is there with all it requires (versions unknown) since it imports on the node."""
    node = dict(node)
    queue = [canonicalize_name(h.partition("==")[0]) for h in have]
    while queue:
        name = queue.pop()
        for req in requirements(resolved[name], set(), env) if name in resolved else []:
            dep = canonicalize_name(req.name)
            if dep not in node:
                node[dep] = None
                queue.append(dep)
    return node


def plan(resolved: dict[str, dict], root: str, extras: set[str], node: dict[str, str | None],
         env: dict[str, str], bring: set[str] = frozenset()) -> tuple[list[str], list[str]]:
    """(wheels to download as name==version, names left to the node)."""
    wanted: dict[str, list[Requirement]] = {}
    download: dict[str, str] = {}
    left: set[str] = set()
    queue = [(root, extras)]
    while queue:
        name, with_extras = queue.pop()
        for req in requirements(resolved[name], with_extras, env):
            dep = canonicalize_name(req.name)
            wanted.setdefault(dep, []).append(req)
            if dep in download or dep not in resolved:
                continue
            have = node.get(dep, "absent")
            specifier = [r.specifier for r in wanted[dep]]
            if PROTECTED.match(dep):
                left.add(dep)
                continue
            too_old = have not in (None, "absent") and not all(s.contains(Version(have), prereleases=True)
                                                               for s in specifier)
            if have == "absent" or dep in bring or too_old:
                download[dep] = resolved[dep]["version"]
                left.discard(dep)
                queue.append((dep, set(req.extras)))
            else:
                left.add(dep)
    return [f"{n}=={v}" for n, v in sorted(download.items())], sorted(left)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, nargs="?", help="pip install --dry-run --report JSON")
    parser.add_argument("--pins", type=Path, help="only print the protected lines of this freeze")
    parser.add_argument("--root", default="fsbench")
    parser.add_argument("--extras", default="", help="comma-separated extras of the root")
    parser.add_argument("--python", default="3.12")
    parser.add_argument("--node-freeze", type=Path, help="`pip list --format=freeze` of the node's Python")
    parser.add_argument("--have", action="append", default=[], help="NAME or NAME==VERSION the node has")
    parser.add_argument("--bring", action="append", default=[], help="NAME to bring even if the node has it")
    args = parser.parse_args()
    if args.pins:
        print("\n".join(protected_pins(args.pins)))
        return
    report = json.loads(args.report.read_text())
    resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"] for i in report["install"]}
    env = target_env(args.python)
    node = with_dependencies(node_state(args.node_freeze, args.have), args.have, resolved, env)
    wheels, left = plan(resolved, canonicalize_name(args.root), {e for e in args.extras.split(",") if e}, node, env,
                        {canonicalize_name(b) for b in args.bring})
    print("\n".join(wheels))
    print(f"left to the node: {' '.join(left) or '(nothing)'}", file=sys.stderr)


if __name__ == "__main__":
    main()
