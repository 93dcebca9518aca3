"""fsbench installed beside the newest transformers and Hugging Face's `kernels` package (which transformers
requires): both import as themselves, from the repository's root and from elsewhere, and the CLI and the tiny
pipeline work. The fresh venv reuses this environment's torch through a .pth file (a second multi-GB torch would
not fit a CI run); everything pip resolves for fsbench, transformers and kernels is installed into it."""
from __future__ import annotations

import os
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("venv-hf-kernels")
    venv.create(root, with_pip=True)
    python = root / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root)
                .stdout.strip())
    (site / "outer-torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = _run([str(python), "-m", "pip", "install", "-q", "--upgrade", "transformers", "kernels",
                    "-e", str(REPO)], root)
    if install.returncode != 0:
        tail = install.stderr.strip().splitlines()[-1:] or ["no output"]
        if "No matching distribution" in install.stderr or "Could not fetch" in install.stderr:
            pytest.skip(f"the package registry is not reachable: {tail[0]}")
        pytest.fail(f"pip install failed: {install.stderr[-2000:]}")
    return python


def test_the_fresh_venv_holds_the_newest_transformers_and_hugging_faces_kernels(fresh_venv):
    shown = _run([str(fresh_venv), "-m", "pip", "show", "transformers", "kernels"], REPO)
    assert shown.returncode == 0, shown.stderr
    names = [line.split(": ", 1)[1] for line in shown.stdout.splitlines() if line.startswith("Name: ")]
    assert sorted(names) == ["kernels", "transformers"]


@pytest.mark.parametrize("where", ["repo", "elsewhere"])
def test_fsbench_kernels_and_hugging_faces_kernels_are_two_packages(fresh_venv, tmp_path, where):
    cwd = REPO if where == "repo" else tmp_path
    code = ("import fsbench.kernels, kernels; print(fsbench.kernels.__file__); print(kernels.__file__); "
            "print(callable(getattr(kernels, 'get_kernel', None)), callable(getattr(fsbench.kernels, 'attention')))")
    run = _run([str(fresh_venv), "-c", code], cwd)
    assert run.returncode == 0, run.stderr
    ours, theirs, apis = run.stdout.splitlines()
    assert Path(ours).resolve() == REPO / "fsbench" / "kernels" / "__init__.py"
    assert Path(theirs).parts[-3:] == ("site-packages", "kernels", "__init__.py")
    assert apis == "True True", "each name reaches its own package's API"


def test_the_cli_runs_in_the_fresh_venv(fresh_venv, tmp_path):
    run = _run([str(fresh_venv.parent / "fsbench"), "schedules", "--steps", "4", "--layers", "2"], tmp_path)
    assert run.returncode == 0, run.stderr
    assert "hybrid" in run.stdout and "mxfp8" in run.stdout


def test_the_tiny_pipeline_tests_pass_in_the_fresh_venv(fresh_venv):
    run = _run([str(fresh_venv), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_harness_pipeline.py"],
               REPO, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1]

