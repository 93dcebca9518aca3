"""The habits of a CLI people live with: --version, -v/-q, a log file in every run folder, and the peak GPU memory
of every video in the profile (null on a CPU, where torch.cuda has no memory to report)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fsbench import __version__
from fsbench.harness.cli import main
from fsbench.rundir import LOG, load_manifest

SMALL = ["--model", "tiny", "--height", "16", "--width", "16", "--frames", "1", "--steps", "1", "--count", "2",
         "--time", "0"]


def fsbench(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_version_names_the_package_version():
    result = fsbench("--version")
    assert result.exit_code == 0 and result.output.strip() == f"fsbench, version {__version__}"


@pytest.fixture(scope="module")
def quiet_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("habits") / "run"
    result = fsbench("-q", "run", *SMALL, "--profile", "--out", run)
    assert result.exit_code == 0, result.output + result.stderr
    return run, result


def test_quiet_prints_the_result_without_progress_bars_or_info_lines(quiet_run):
    run, result = quiet_run
    assert result.stderr == ""
    assert result.stdout.splitlines()[0].startswith("SingleStream PerformanceOnly: INVALID")
    assert result.stdout.splitlines()[-1] == f"results: {run}"


def test_the_run_folder_logs_the_command_the_result_and_the_time_taken(quiet_run):
    run, _ = quiet_run
    lines = (run / LOG).read_text().splitlines()
    assert lines[0].endswith(f"INFO fsbench: command: fsbench -q run {' '.join(SMALL)} --profile --out {run}")
    assert any("SingleStream PerformanceOnly: INVALID" in line for line in lines)
    assert "INFO fsbench: finished in " in lines[-1]


def test_verbose_shows_info_lines_and_a_second_command_appends_to_the_log(quiet_run):
    run, _ = quiet_run
    result = fsbench("-v", "run", *SMALL, "--out", run)
    assert result.exit_code == 0, result.stderr
    assert "fsbench: INFO: SingleStream PerformanceOnly: INVALID" in result.stderr
    commands = [line for line in (run / LOG).read_text().splitlines() if "command: fsbench" in line]
    assert [c.split("command: fsbench ")[1].split()[0] for c in commands] == ["-q", "-v"]


def test_the_profile_records_each_videos_peak_gpu_memory_null_on_a_cpu(quiet_run):
    run, _ = quiet_run
    profile = json.loads((run / "profile.json").read_text())
    assert [video["peak_gpu_memory_bytes"] for video in profile["videos"]] == [None, None]
    assert profile["summary"]["peak_gpu_memory_bytes"] is None
    assert "peak_gpu_memory_bytes" not in load_manifest(run)["results"]["SingleStream"]["performance"]
