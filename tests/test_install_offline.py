"""The air-gapped install, end to end on this machine's Python: scripts/wheelhouse.sh builds a wheelhouse for a
"node" whose image has only torch, triton, numpy and torch's own requirements (this environment's copies, through a
.pth file: a second multi-GB torch would not fit a CI run), then scripts/install_offline.sh installs fsbench from it
with pip's index switched off. The node's torch stays the image's, `fsbench doctor` runs, and so does a tiny run
from outside the repository (the presets come from the wheel)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
IMAGE = ("torch", "torchgen", "functorch", "triton", "nvidia", "numpy", "sympy", "mpmath", "networkx", "jinja2",
         "markupsafe", "filelock", "fsspec", "typing_extensions", "setuptools")
pytestmark = pytest.mark.slow


def _run(cmd: list, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env={**clean, **env}, capture_output=True, text=True,
                          timeout=1200)


def _image_entry(name: str) -> bool:
    stem = name.split("-")[0].split(".")[0].lower()
    return stem in IMAGE or stem.startswith(("nvidia_", "cuda")) or name.startswith("typing_extensions")


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("node")
    image = root / "image"
    image.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if _image_entry(entry.name):
            (image / entry.name).symlink_to(entry)
    venv.create(root / "venv", with_pip=True)
    python = root / "venv" / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root).stdout.strip())
    (site / "node-image.pth").write_text(f"{image}\n")
    _run([python, "-m", "pip", "uninstall", "-q", "-y", "setuptools"], root)  # the venv's own would hide the image's
    freeze = root / "node-freeze.txt"
    freeze.write_text(_run([python, "-m", "pip", "list", "--format=freeze"], root).stdout)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    built = _run(["bash", REPO / "scripts" / "wheelhouse.sh", "--python", version, "--extras", "", "--node-freeze",
                  freeze, "--pin", "imageio-ffmpeg==0.6.0", "--out", root / "wheelhouse"], REPO, PYTHON=sys.executable)
    if built.returncode != 0:
        if "No matching distribution" in built.stderr or "Could not fetch" in built.stderr:
            pytest.skip(f"the package registry is not reachable: {built.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"wheelhouse.sh failed: {built.stdout[-2000:]}{built.stderr[-3000:]}")
    installed = _run(["bash", REPO / "scripts" / "install_offline.sh", root / "wheelhouse", "--extras", "",
                      "--model", "tiny", "--plain"], root, PYTHON=str(python), FSBENCH_DATA=str(root))
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return {"root": root, "python": python, "image": image, "freeze": freeze.read_text(), "built": built.stdout,
            "installed": installed.stdout}


def test_the_wheelhouse_holds_what_the_node_lacks_and_none_of_its_image(node):
    wheels = {p.name.split("-")[0].lower() for p in (node["root"] / "wheelhouse").glob("*.whl")}
    assert {"fsbench", "diffusers", "transformers", "mlcommons_loadgen", "imageio_ffmpeg"} <= wheels
    assert not wheels & {"torch", "triton", "numpy", "sympy", "networkx", "jinja2"}
    assert not any(w.startswith("nvidia") for w in wheels)
    assert "imageio_ffmpeg-0.6.0-" in " ".join(p.name for p in (node["root"] / "wheelhouse").glob("*.whl"))


def test_the_offline_install_keeps_the_nodes_torch_and_triton(node):
    code = ("import json, fsbench, torch, triton; print(json.dumps([fsbench.__file__, torch.__file__, "
            "torch.__version__, triton.__version__]))")
    shown = _run([node["python"], "-c", code], node["root"])
    assert shown.returncode == 0, shown.stderr
    ours, torch_file, torch_version, triton_version = json.loads(shown.stdout)
    assert "site-packages" in ours and str(node["image"]) not in ours and str(REPO) not in ours
    assert Path(torch_file).parent.parent == node["image"]
    assert f"torch=={torch_version.split('+')[0]}\n" in node["freeze"]
    assert f"triton=={triton_version}\n" in node["freeze"]
    assert "kept as installed: " in node["installed"] and "torch==" in node["installed"]


def test_the_doctor_runs_after_the_install_and_finds_the_tiny_model_ready(node):
    assert "ok       LoadGen" in node["installed"]
    assert node["installed"].rstrip().endswith("run: ready")


def test_the_installed_package_runs_a_tiny_query_outside_the_repository(node, tmp_path):
    fsbench = node["python"].parent / "fsbench"
    result = _run([fsbench, "-q", "run", "--model", "tiny", "--height", "16", "--width", "16", "--frames", "1",
                   "--steps", "1", "--count", "1", "--time", "0", "--out", tmp_path / "run"], tmp_path,
                  OMP_NUM_THREADS="1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("SingleStream PerformanceOnly:")
    assert (tmp_path / "run" / "fsbench.log").is_file()
