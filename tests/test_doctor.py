"""`fsbench doctor` probes this machine for real (imports, torch.cuda, files on disk) and exits 0 only when
everything the asked mode needs is present; each missing piece comes with the command that fixes it."""
from __future__ import annotations

import sys

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


def plain_doctor(*args, **env):
    """doctor with `env` exactly as given for the variables named (None unsets one)."""
    return CliRunner().invoke(main, ["doctor", "--plain", *map(str, args)],
                              env={k: None if v is None else str(v) for k, v in env.items()})


def fsbench_error(*args) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    return result.stderr.strip().removeprefix("fsbench: error: ")


def test_a_bare_doctor_checks_what_a_bare_run_uses(shared_data):
    result = plain_doctor(FSBENCH_DATA=shared_data)
    assert result.exit_code == 0, result.output
    assert line(result.output, "model").startswith("ok") and "tiny (built in" in line(result.output, "model")
    assert "builtin:tiny" in line(result.output, "prompts")
    assert result.output.rstrip().endswith("run: ready")


def test_a_folder_that_run_refuses_is_never_ok_for_doctor(tmp_path, shared_data):
    from fsbench.harness.model.pipeline import CHECKPOINT_PARTS

    garbage = tmp_path / "GARBAGE_DIR"
    (garbage / "model_index.json").parent.mkdir()
    (garbage / "model_index.json").write_text('{"_class_name": "WanPipeline"}')
    for part in CHECKPOINT_PARTS:  # every file the folder check looks for, none of them a real checkpoint's
        (garbage / part).mkdir()
        (garbage / part / ("scheduler_config.json" if part == "scheduler" else "config.json")).write_text('{"x": 1}')
        (garbage / part / "model.safetensors").write_bytes(b"not weights")
    refused = fsbench_error("run", "--model", garbage, "--out", tmp_path / "run")
    assert not (tmp_path / "run").exists()
    result = plain_doctor("--model", garbage, FSBENCH_DATA=shared_data)
    assert result.exit_code == 1
    assert line(result.output, "model") == f"MISSING  model               {refused}"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert line(plain_doctor("--model", empty, FSBENCH_DATA=shared_data).output, "model").startswith("MISSING")


def test_every_unreadable_input_is_a_line_naming_its_file(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "vbench_prompts.txt").write_bytes(b"\xff\xfe\x00 not UTF-8 \xc3\x28\n")
    (data / "VBench_full_info.json").write_text("{not json")
    (data / "fixed_latent.pt").mkdir()  # a folder where a file belongs
    (tmp_path / "latent.pt").write_bytes(b"garbage")
    for prompts in (data / "vbench_prompts.txt", tmp_path / "absent.txt"):
        result = plain_doctor("--mode", "all", "--prompts", prompts, "--latent", tmp_path / "latent.pt",
                              FSBENCH_DATA=data)
        assert result.exit_code == 1 and result.exception is None or isinstance(result.exception, SystemExit)
        assert "Traceback" not in result.output
        assert str(prompts) in line(result.output, "prompts") and line(result.output, "prompts").startswith("MISSING")
        assert line(result.output, "prompts") == "MISSING  prompts             " + fsbench_error(
            "run", "--prompts", prompts, "--out", tmp_path / "run")
        assert str(tmp_path / "latent.pt") in line(result.output, "latent")
        assert str(data / "vbench_prompts.txt") in line(result.output, "MLPerf prompts")
        assert str(data / "VBench_full_info.json") in result.output.split("VBench data", 1)[1].split("\n")[1]
        assert str(data / "fixed_latent.pt") in line(result.output, "fixed latent")


def test_vbench_data_is_found_in_the_data_folder_never_beside_the_repository(tmp_path, shared_data):
    result = plain_doctor("--mode", "eval", FSBENCH_DATA=None, XDG_CACHE_HOME=tmp_path)
    assert line(result.output, "VBench data").startswith("MISSING")
    assert str(tmp_path / "fsbench" / "VBench_full_info.json") in result.output
    assert str(shared_data) not in result.output


def test_an_installed_wheel_points_to_fsbench_vbench_python_not_into_site_packages(monkeypatch, shared_data):
    from fsbench.eval import vbench_adapter

    monkeypatch.setattr(vbench_adapter, "CHECKOUT", False)  # what paths.CHECKOUT is under site-packages
    result = plain_doctor("--mode", "eval", FSBENCH_DATA=shared_data, FSBENCH_VBENCH_PYTHON=None)
    hint = result.output.split("VBench environment", 1)[1].split("\n")[1]
    assert "FSBENCH_VBENCH_PYTHON" in hint and ".venv-vbench" not in hint


def _python(tmp_path, body: str):
    """A stand-in interpreter: a script run as python would be, printing or failing as a real one would."""
    python = tmp_path / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\n{body}\n")
    python.chmod(0o755)
    return python


def test_a_vbench_environment_that_cannot_import_vbench_fails_the_eval_mode(tmp_path, shared_data):
    """A real interpreter without vbench (this environment's: vbench lives in its own), as a half-built one is."""
    python = sys.executable
    result = doctor("--mode", "eval", "--model", "tiny", FSBENCH_DATA=shared_data, FSBENCH_VBENCH_PYTHON=python)
    assert result.exit_code == 1
    found = line(result.output, "VBench environment")
    assert found.startswith("MISSING") and "not usable" in found
    assert "`import vbench` fails in" in result.output and "No module named 'vbench'" in result.output
    assert "scripts/setup_vbench_env.sh" in result.output


def test_a_vbench_other_than_mlperfs_pin_fails_and_the_pinned_one_passes(tmp_path, shared_data):
    other = _python(tmp_path / "other", "echo 0.1.4")
    result = doctor("--mode", "eval", "--model", "tiny", FSBENCH_DATA=shared_data, FSBENCH_VBENCH_PYTHON=other)
    assert line(result.output, "VBench environment").startswith("MISSING")
    assert "imports vbench 0.1.4, not the 0.1.5 MLPerf's reference pins" in result.output
    pinned = _python(tmp_path / "pinned", "echo 0.1.5")
    result = doctor("--mode", "eval", "--model", "tiny", FSBENCH_DATA=shared_data, FSBENCH_VBENCH_PYTHON=pinned)
    assert line(result.output, "VBench environment").startswith("ok")
    assert "vbench 0.1.5, as MLPerf pins" in result.output
