"""Requests that would say nothing are refused in one line, exit code 2, before any work or write: one run compared
with itself, one schedule under two names in a sweep or a plan, a rule past the run's last step or layer, a cost file
whose shape is not whole numbers or whose cost would overflow the search."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsbench.harness.cli import main

from eval_runs import constant_video, make_run

SMALL = ["--height", "32", "--width", "32", "--frames", "5", "--steps", "2"]
COSTS = Path(__file__).parent / "data" / "tiny_costs.json"


def _one_line(args: list[str]) -> str:
    result = CliRunner().invoke(main, args)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("fsbench: error: "), \
        (args, result.output, result.exception)
    return lines[0]


def test_compare_refuses_one_run_given_twice_under_any_spelling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = make_run(tmp_path / "bf16", "bf16", {"p": constant_video(range(100, 105))})
    other = make_run(tmp_path / "mxfp8", "mxfp8", {"p": constant_video(range(110, 115))})
    for same in (str(run), "bf16/", "./bf16", str(tmp_path / "mxfp8" / ".." / "bf16")):
        line = _one_line(["compare", str(run), str(other), same, "--out", str(tmp_path / "cmp")])
        assert "twice" in line and "bf16" in line, line
    assert not (tmp_path / "cmp").exists()


def test_one_schedule_under_two_names_is_refused_in_a_sweep_and_a_plan(tmp_path):
    line = _one_line(["sweep", "--schedule", "mxfp4", "--schedule", "mxfp4:*", "--out", str(tmp_path / "sweep"),
                      *SMALL])
    assert "'mxfp4'" in line and "'mxfp4:*'" in line, line
    line = _one_line(["sweep", "--schedule", "mxfp6:0;mxfp4:*", "--schedule", "mxfp4:*;mxfp6:0", "--out",
                      str(tmp_path / "sweep"), *SMALL])  # the same rules in another order
    assert "mxfp6:0;mxfp4:*" in line, line
    plan = tmp_path / "plan.toml"
    plan.write_text(f'model = "tiny"\nschedules = ["bf16", "mxfp8", "bf16:*"]\nout = "{tmp_path / "c"}"\n')
    line = _one_line(["campaign", str(plan), "--dry-run"])
    assert "plan.toml: schedules" in line and "'bf16:*'" in line, line
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "c").exists()


@pytest.mark.parametrize("spec, term", [("mxfp6:first3;mxfp4:*", "first3"), ("mxfp6:last5;mxfp4:*", "last5"),
                                        ("mxfp6:first0;mxfp4:*", "first0"), ("mxfp6:first150%;mxfp4:*", "150%"),
                                        ("mxfp6@first3:*;mxfp4:*", "first3")])
def test_a_first_or_last_term_past_the_run_is_refused_naming_it(spec, term, tmp_path):
    line = _one_line(["schedules", "--steps", "2", "--layers", "2", spec])
    assert term in line and "2" in line, line
    _one_line(["run", "--out", str(tmp_path / "run"), *SMALL, "--schedule", spec])
    assert not (tmp_path / "run").exists()


def test_first_and_last_terms_within_the_run_still_resolve():
    result = CliRunner().invoke(main, ["schedules", "--steps", "4", "--layers", "2", "mxfp6:first4;mxfp4:*",
                                       "mxfp6:last1,first100%;mxfp4:*"])
    assert result.exit_code == 0, result.output


def _tune_with(tmp_path: Path, edit) -> str:
    doc = json.loads(COSTS.read_text())
    edit(doc["rows"])
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(doc))
    line = _one_line(["tune", "--model", "tiny", "--formats", "mxfp8", "--device", "cpu", "--budget", "psnr>=30",
                      "--costs", str(costs), "--out", str(tmp_path / "tune")])
    assert str(costs) in line and not (tmp_path / "tune").exists(), line
    return line


def test_a_cost_file_whose_shape_is_not_whole_numbers_is_refused(tmp_path):
    def fractional(rows):
        for row in rows:
            row["shape"] = [1, 2, 48.7, 32]  # read as an integer, 48 would match the tiny model's calls

    assert "48.7" in _tune_with(tmp_path, fractional)


def test_a_cost_that_would_overflow_the_search_is_refused(tmp_path):
    def huge(rows):
        next(row for row in rows if "mxfp8" in row["row"])["median_ms"] = 1e308

    assert "median_ms 1e+308" in _tune_with(tmp_path, huge)
