"""Another cuDNN for the bench's cuDNN rows: `fsbench kernels bench --cudnn-site DIR`.

PyTorch loads the cuDNN of the `nvidia-cudnn-cu13` package it was installed with, and one process holds one cuDNN.
To time the same rows under a newer cuDNN in the same bench, the bench runs them again in a child process whose
environment puts an unpacked cuDNN wheel first: DIR is the folder the wheel was unpacked into (`unzip
nvidia_cudnn_cu13-*.whl -d DIR`, or `pip install --no-deps --target DIR`), holding nvidia/cudnn/lib/libcudnn.so.9.
PyTorch preloads its CUDA libraries from the first `nvidia/<name>/lib` on sys.path (PYTHONPATH) and cuDNN opens
its sub-libraries through the loader's path (LD_LIBRARY_PATH); both point into DIR. The child's own report of the
cuDNN it ran is checked against the wheel's version, so a row is never labelled with a cuDNN it did not run.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

LIB = Path("nvidia", "cudnn", "lib")
ROWS = ("sdpa-cudnn-bf16", "cudnn-bf16", "cudnn-fp8")  # the bench rows that run cuDNN


def lib_dir(site: Path) -> Path:
    """DIR/nvidia/cudnn/lib; ValueError where DIR holds no unpacked cuDNN wheel."""
    lib = Path(site) / LIB
    if not (lib / "libcudnn.so.9").is_file():
        raise ValueError(f"{site} holds no unpacked cuDNN 9 wheel (no {LIB / 'libcudnn.so.9'}); unpack one with "
                         "`unzip nvidia_cudnn_cu13-*.whl -d DIR`")
    return lib


def wheel_version(site: Path) -> str | None:
    """The version of the cuDNN wheel unpacked in DIR (its dist-info folder's name), None where it has none."""
    found = sorted(Path(site).glob("nvidia_cudnn_cu*-*.dist-info"))
    match = re.match(r"nvidia_cudnn_cu\d+-(\d+\.\d+\.\d+)", found[-1].name) if found else None
    return match.group(1) if match else None


def environment(site: Path, base: dict[str, str]) -> dict[str, str]:
    """`base` with DIR first on PYTHONPATH and its cuDNN library folder first on LD_LIBRARY_PATH."""
    site, lib = Path(site).resolve(), lib_dir(site).resolve()
    env = dict(base)
    for name, first in (("PYTHONPATH", site), ("LD_LIBRARY_PATH", lib)):
        env[name] = os.pathsep.join([str(first)] + ([base[name]] if base.get(name) else []))
    return env


def dotted(version: int | None) -> str | None:
    """cuDNN's integer version as major.minor.patch: 91901 -> "9.19.1", 92700 -> "9.27.0"."""
    if version is None:
        return None
    major, rest = divmod(version, 10000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"
