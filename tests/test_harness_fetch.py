"""scripts/fetch_dataset.py keeps only verified data (the download itself is stubbed: no network here)."""
from __future__ import annotations

import importlib.util
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
    latent = tmp_path / "latent-src.pt"
    torch.save(torch.zeros(1, 16, 21, 90, 160), latent)
    files = {"vbench_prompts.txt": good, "fixed_latent.pt": latent.read_bytes()}
    monkeypatch.setattr(script, "fetch", lambda name: files[name])
    result = CliRunner().invoke(script.main, ["--out", str(tmp_path / "data")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "data" / "vbench_prompts.txt").read_bytes() == good
    assert torch.load(tmp_path / "data" / "fixed_latent.pt").shape == (1, 16, 21, 90, 160)

    files["vbench_prompts.txt"] = good + b"one more prompt\n"
    result = CliRunner().invoke(script.main, ["--out", str(tmp_path / "other"), "--skip-latent"])
    assert result.exit_code == 1 and "expected f45433f7" in result.output
    assert not (tmp_path / "other" / "vbench_prompts.txt").exists()


def test_a_latent_of_the_wrong_shape_is_not_kept(shared_data, tmp_path, monkeypatch):
    script = _load_script()
    wrong = tmp_path / "wrong.pt"
    torch.save(torch.zeros(1, 16, 3, 8, 8), wrong)
    files = {"vbench_prompts.txt": (shared_data / "vbench_prompts.txt").read_bytes(),
             "fixed_latent.pt": wrong.read_bytes()}
    monkeypatch.setattr(script, "fetch", lambda name: files[name])
    result = CliRunner().invoke(script.main, ["--out", str(tmp_path / "data")])
    assert result.exit_code == 1 and "(1, 16, 21, 90, 160)" in result.output
    assert not (tmp_path / "data" / "fixed_latent.pt").exists()
