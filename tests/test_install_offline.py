"""The air-gapped install with the `gpu` extra, end to end: a "node" venv whose image holds only torch, triton and
the CUDA libraries torch brings, scripts/wheelhouse.sh building the wheelhouse from that image's freeze, and
scripts/install_offline.sh installing fsbench[gpu] from it with pip's index and config switched off, then running
`fsbench doctor` and a tiny query there.

The image's packages are stand-ins built here: small wheels with the names, versions and mutual requirements of
this environment's torch, triton and CUDA libraries (a second multi-GB torch would not fit a CI run), where the
torch stand-in carries a .pth file that imports this environment's real torch, triton and CUDA files. pip on the
node sees only those stand-ins, so everything else fsbench[gpu] needs (nvidia-ml-py, nvidia-cutlass-dsl, ...) must
come from the wheelhouse. Downloads go through pip's cache, so a second run fetches nothing.
"""
from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import re
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(cmd: list, cwd: Path, offline: bool = False, **env: str) -> subprocess.CompletedProcess:
    """A command with this environment, or on the node (`offline`) with no pip configuration at all."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if offline:
        clean = {k: v for k, v in clean.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env={**clean, **env}, capture_output=True, text=True,
                          timeout=1200)


def _image() -> dict[str, metadata.Distribution]:
    """torch, triton and every nvidia-*/cuda-* package torch requires (through extras too), as installed here."""
    found, queue = {}, [Requirement("torch"), Requirement("triton")]
    while queue:
        req = queue.pop()
        name = canonicalize_name(req.name)
        if name in found:
            continue
        try:
            found[name] = dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for text in dist.requires or []:
            dep = Requirement(text)
            if re.match(r"^(nvidia|cuda)-", canonicalize_name(dep.name)) and (
                    not dep.marker or any(dep.marker.evaluate({"extra": e}) for e in (req.extras or {""}))):
                queue.append(dep)
    return found


def _requirements(dist: metadata.Distribution, skip: set[str]) -> list[metadata.Distribution]:
    """What `dist` requires, all the way down, as installed here (but the names in `skip`)."""
    found, queue = {}, [dist]
    while queue:
        for req in map(Requirement, queue.pop().requires or []):
            name = canonicalize_name(req.name)
            if name not in skip and name not in found and (not req.marker or req.marker.evaluate({"extra": ""})):
                found[name] = metadata.distribution(name)
                queue.append(found[name])
    return list(found.values())


def _top_level(dist: metadata.Distribution) -> set[str]:
    """The importable names a distribution installed (folders and modules at the top of site-packages)."""
    tops = {Path(str(f)).parts[0] for f in dist.files or []}
    return {t for t in tops if t != ".." and not t.endswith((".dist-info", ".pth", ".data")) and t != "__pycache__"}


def _stand_in(folder: Path, dist: metadata.Distribution, members: set[str], pth: str | None = None) -> None:
    """A wheel with `dist`'s name, version and the requirements that name image members; no code."""
    name, version = dist.metadata["Name"], dist.version
    stem = f"{re.sub(r'[-.]+', '_', name)}-{version}"
    keep = [f"Requires-Dist: {r}" for r in dist.requires or [] if canonicalize_name(Requirement(r).name) in members]
    extras = [f"Provides-Extra: {e}" for e in dist.metadata.get_all("Provides-Extra") or []]
    with zipfile.ZipFile(folder / f"{stem}-py3-none-any.whl", "w") as whl:
        whl.writestr(f"{stem}.dist-info/METADATA", "\n".join(
            ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *extras, *keep]) + "\n")
        whl.writestr(f"{stem}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{stem}.dist-info/RECORD", "")
        if pth:
            whl.writestr("node-image.pth", pth + "\n")


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("node")
    image = _image()
    # the real files behind the stand-ins, and the pure-Python packages torch imports (hidden from pip: the node's
    # pip does not know them, so the wheelhouse brings whatever fsbench needs of them)
    files = root / "image-files"
    files.mkdir()
    purelib = Path(sysconfig.get_paths()["purelib"])
    for dist in [*image.values(), *_requirements(image["torch"], set(image))]:
        for top in _top_level(dist):
            if (purelib / top).exists() and not (files / top).exists():
                (files / top).symlink_to(purelib / top)
    wheels = root / "image-wheels"
    wheels.mkdir()
    for name, dist in image.items():
        _stand_in(wheels, dist, set(image), str(files) if name == "torch" else None)

    venv.create(root / "venv", with_pip=True)
    python = root / "venv" / "bin" / "python"
    pins = [f"{d.metadata['Name']}=={d.version}" for d in image.values()]
    made = _run([python, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheels, *pins], root, True)
    assert made.returncode == 0, made.stderr[-3000:]
    freeze = root / "node-freeze.txt"
    freeze.write_text(_run([python, "-m", "pip", "list", "--format=freeze"], root, True).stdout)

    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    built = _run(["bash", REPO / "scripts" / "wheelhouse.sh", "--python", version, "--node-freeze", freeze,
                  "--pin", "imageio-ffmpeg==0.6.0", "--out", root / "wheelhouse"], REPO, PYTHON=sys.executable)
    if built.returncode != 0:
        if "No matching distribution" in built.stderr or "Could not fetch" in built.stderr:
            pytest.skip(f"the package registry is not reachable: {built.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"wheelhouse.sh failed: {built.stdout[-2000:]}{built.stderr[-3000:]}")
    installed = _run(["bash", REPO / "scripts" / "install_offline.sh", root / "wheelhouse", "--model", "tiny",
                      "--plain"], root, True, PYTHON=str(python), FSBENCH_DATA=str(root))
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return {"root": root, "python": python, "files": files, "image": image, "freeze": freeze.read_text(),
            "built": built.stdout, "installed": installed.stdout}


def test_the_image_is_only_torch_triton_and_cuda_libraries(node):
    listed = {canonicalize_name(line.split("==")[0]) for line in node["freeze"].splitlines() if "==" in line}
    assert listed - {"pip", "setuptools"} == set(node["image"])
    assert {"torch", "triton"} < listed and not listed & {"nvidia-ml-py", "nvidia-cudnn-frontend", "numpy"}


def test_the_wheelhouse_brings_the_gpu_extra_and_none_of_the_image(node):
    wheels = {canonicalize_name(p.name.split("-")[0]) for p in (node["root"] / "wheelhouse").glob("*.whl")}
    assert {"fsbench", "diffusers", "mlcommons-loadgen", "nvidia-ml-py", "nvidia-cudnn-frontend",
            "nvidia-cutlass-dsl"} <= wheels
    assert not wheels & set(node["image"])
    left = re.search(r"left to the node: (.*)", node["built"]).group(1).split()
    assert set(left) <= set(node["image"]), left


def test_the_offline_install_keeps_the_images_torch_and_installs_the_gpu_extra(node):
    code = ("import json, importlib.metadata as m, fsbench, torch, triton, pynvml; print(json.dumps(["
            "fsbench.__file__, torch.__file__, m.version('torch'), m.version('triton'), m.version('nvidia-ml-py'), "
            "m.version('nvidia-cutlass-dsl')]))")
    shown = _run([node["python"], "-c", code], node["root"], True)
    assert shown.returncode == 0, shown.stderr
    ours, torch_file, torch_version, triton_version, nvml, cutlass = json.loads(shown.stdout)
    assert "site-packages" in ours and str(REPO) not in ours
    assert Path(torch_file).parent.parent == node["files"]
    assert torch_version == node["image"]["torch"].version and triton_version == node["image"]["triton"].version
    assert nvml and cutlass
    assert "kept as installed: " in node["installed"] and "torch==" in node["installed"]


def test_the_doctor_runs_after_the_install_and_finds_the_tiny_model_ready(node):
    assert re.search(r"^ok +LoadGen", node["installed"], re.M)
    assert re.search(r"^ok +Triton +" + re.escape(node["image"]["triton"].version), node["installed"], re.M)
    assert re.search(r"^ok +cuDNN frontend", node["installed"], re.M)
    assert node["installed"].rstrip().endswith("run: ready")


def test_the_installed_package_runs_a_tiny_query_outside_the_repository(node, tmp_path):
    fsbench = node["python"].parent / "fsbench"
    result = _run([fsbench, "-q", "run", "--model", "tiny", "--height", "16", "--width", "16", "--frames", "1",
                   "--steps", "1", "--count", "1", "--time", "0", "--out", tmp_path / "run"], tmp_path, True,
                  OMP_NUM_THREADS="1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("SingleStream PerformanceOnly:")
    assert (tmp_path / "run" / "fsbench.log").is_file()
