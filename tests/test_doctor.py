"""`fsbench doctor` probes this machine for real (imports, torch.cuda, files on disk) and exits 0 only when
everything the asked mode needs is present; each missing piece comes with the command that fixes it."""
from __future__ import annotations

import torch
from click.testing import CliRunner

from fsbench.harness.cli import main


def doctor(*args, **env):
    return CliRunner().invoke(main, ["doctor", "--plain", *map(str, args)], env={k: str(v) for k, v in env.items()})


def line(output: str, name: str) -> str:
    return next(text for text in output.splitlines() if text[9:].startswith(name + " "))


def test_a_missing_checkpoint_fails_the_run_mode_with_the_fetch_command(tmp_path, shared_data):
    result = doctor("--mode", "run", "--model", tmp_path / "no-such-checkpoint", FSBENCH_DATA=shared_data)
    assert result.exit_code == 1, result.output
    assert line(result.output, "model").startswith("MISSING")
    assert "scripts/fetch_model.py" in result.output
    assert result.output.rstrip().endswith("run: not ready: fix the MISSING lines above")


def test_the_tiny_model_is_ready_to_run_on_this_machine(shared_data):
    result = doctor("--mode", "run", "--model", "tiny", FSBENCH_DATA=shared_data)
    assert result.exit_code == 0, result.output
    assert line(result.output, "model").startswith("ok") and "tiny (built in" in result.output
    assert line(result.output, "LoadGen").startswith("ok")
    gpu = line(result.output, "GPU")
    assert gpu.startswith("ok" if torch.cuda.is_available() else "-"), gpu  # not needed by tiny either way


def test_a_latent_that_is_not_mlperfs_fails_the_submission_mode(tmp_path, shared_data):
    (tmp_path / "vbench_prompts.txt").write_text((shared_data / "vbench_prompts.txt").read_text())
    torch.save(torch.zeros(1, 16, 21, 90, 160), tmp_path / "fixed_latent.pt")
    result = doctor("--mode", "submission", "--model", "tiny", FSBENCH_DATA=tmp_path)
    assert result.exit_code == 1
    latent = line(result.output, "fixed latent")
    assert latent.startswith("MISSING") and "not MLPerf's" in latent
    assert "scripts/fetch_dataset.py" in result.output


def test_the_eval_mode_names_the_vbench_environment_it_could_not_find(tmp_path, shared_data):
    result = doctor("--mode", "eval", "--model", "tiny", FSBENCH_DATA=shared_data,
                    FSBENCH_VBENCH_PYTHON=tmp_path / "python")
    assert result.exit_code == 1
    assert line(result.output, "VBench environment").startswith("MISSING")
    assert "scripts/setup_vbench_env.sh" in result.output
