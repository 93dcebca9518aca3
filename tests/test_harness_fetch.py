"""scripts/fetch_dataset.py keeps only verified data (the download itself is stubbed: no network here)."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import torch
from click.testing import CliRunner

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fetch_dataset.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("fetch_dataset", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prompts_are_kept_only_with_the_mlperf_sha256(shared_data, tmp_path, monkeypatch):
    script = _load_script()
    good = (shared_data / "vbench_prompts.txt").read_bytes()
    files = {"vbench_prompts.txt": good + b"one more prompt\n"}
    monkeypatch.setattr(script, "fetch", lambda name: files[name])
    result = CliRunner().invoke(script.main, ["--out", str(tmp_path / "other"), "--skip-latent"])
    assert result.exit_code == 1 and "expected f45433f7" in result.output
    assert not (tmp_path / "other" / "vbench_prompts.txt").exists()

    files["vbench_prompts.txt"] = good
    result = CliRunner().invoke(script.main, ["--out", str(tmp_path / "data"), "--skip-latent"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "data" / "vbench_prompts.txt").read_bytes() == good


def test_a_latent_that_is_not_mlperfs_file_is_not_kept(shared_data, tmp_path, monkeypatch):
    script = _load_script()
    other = tmp_path / "other.pt"
    torch.save(torch.zeros(1, 16, 21, 90, 160), other)
    files = {"vbench_prompts.txt": (shared_data / "vbench_prompts.txt").read_bytes(),
             "fixed_latent.pt": other.read_bytes()}
    monkeypatch.setattr(script, "fetch", lambda name: files[name])
    result = CliRunner().invoke(script.main, ["--out", str(tmp_path / "data")])
    assert result.exit_code == 1 and "expected 7c88cf35aa26a98e81a432a8cea22ba5f6b8ef04" in result.output
    assert not (tmp_path / "data" / "fixed_latent.pt").exists()


def test_the_latent_check_computes_the_id_git_gives_the_file(tmp_path):
    from fsbench.harness.run.dataset import git_blob_id

    data = bytes(range(256)) * 1000 + b"\0tail"
    (tmp_path / "f").write_bytes(data)
    git = subprocess.run(["git", "hash-object", str(tmp_path / "f")], capture_output=True, text=True, check=True)
    assert git_blob_id(data) == git.stdout.strip()
