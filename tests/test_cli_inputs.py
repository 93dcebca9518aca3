"""Input files through the real CLI: a plan, schedule, preset, prompt, cost or profile file that never ends or is
absurdly large is one line naming it, exit code 2, before any work; a preset file `run` accepts, `doctor` and
`tune` accept too."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fsbench.harness.cli import main

SMALL = ["--height", "32", "--width", "32", "--frames", "5", "--steps", "2"]
HUGE = 1 << 30  # a sparse file: a gibibyte to read, nothing on disk


def _endless(folder: Path, name: str) -> Path:
    """A file that never ends, under a name each command takes."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).symlink_to("/dev/zero")
    return folder / name


def _huge(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "wb") as f:
        f.truncate(HUGE)
    return folder / name


def _input_cases(tmp: Path) -> list[tuple[list[str], Path]]:
    out = str(tmp / "out")
    endless, huge = tmp / "endless", tmp / "huge"
    tune = ["tune", "--budget", "psnr>=30", "--out", out, *SMALL]
    return [
        (["campaign", str(_endless(endless, "plan.toml")), "--dry-run"], endless / "plan.toml"),
        (["campaign", str(_huge(huge, "plan.toml")), "--dry-run"], huge / "plan.toml"),
        (["run", "--out", out, *SMALL, "--schedule", str(_huge(huge, "schedule.toml"))], huge / "schedule.toml"),
        (["schedules", str(huge / "schedule.toml")], huge / "schedule.toml"),
        (["run", "--out", out, "--preset", str(_huge(huge, "preset.toml"))], huge / "preset.toml"),
        (["run", "--out", out, *SMALL, "--prompts", str(_endless(endless, "prompts.txt"))], endless / "prompts.txt"),
        (["run", "--out", out, *SMALL, "--prompts", str(_huge(huge, "prompts.txt"))], huge / "prompts.txt"),
        ([*tune, "--costs", str(_endless(endless, "costs.json"))], endless / "costs.json"),
        ([*tune, "--costs", str(_huge(huge, "costs.json"))], huge / "costs.json"),
        ([*tune, "--profile", str(_endless(endless, "profile.json"))], endless / "profile.json"),
    ]


def test_an_input_file_that_never_ends_is_one_line_naming_it_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for args, culprit in _input_cases(tmp_path):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, (args, result.output, result.exception)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and str(culprit) in lines[0] and "MiB" in lines[0], (args, lines)
        assert not (tmp_path / "out").exists()


@pytest.fixture
def preset_file(tmp_path) -> Path:
    """A preset file that `run` accepts (`--preset FILE.toml`): the built-in settings under a name of the user's."""
    from fsbench.harness.run.presets import SCENARIO_DIR

    path = tmp_path / "mine.toml"
    path.write_text((SCENARIO_DIR / "mlperf.toml").read_text())
    return path


def test_doctor_and_tune_take_the_preset_file_that_run_takes(preset_file, tmp_path):
    doctor = CliRunner().invoke(main, ["doctor", "--plain", "--preset", str(preset_file)])
    settings = next(line for line in doctor.output.splitlines() if line.split()[1:2] == ["settings"])
    assert settings.startswith("ok") and f"preset {preset_file}" in settings, doctor.output
    tune = CliRunner().invoke(main, ["tune", "--budget", "psnr>=30", "--out", str(tmp_path / "tune"), *SMALL,
                                     "--preset", str(preset_file), "--costs", str(tmp_path / "none.json")])
    assert tune.exit_code == 2 and "none.json" in tune.stderr and "--preset" not in tune.stderr, tune.output
    for command in (["doctor"], ["tune", "--budget", "psnr>=30", "--out", str(tmp_path / "t2")]):
        refused = CliRunner().invoke(main, [*command, "--preset", str(tmp_path / "missing.toml")])
        assert refused.exit_code == 2 and "missing.toml" in refused.stderr, refused.output
