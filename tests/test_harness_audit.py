"""`fsbench run --audit TEST04`: LoadGen issues one sample for every query and the logs land where the
submission packager reads them."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from fsbench.harness.cli import main
from fsbench.harness.mlperf import submission
from fsbench.harness.model.synthetic import TINY_PROMPTS
from fsbench.rundir import load_manifest

SMALL = ["--height", "32", "--width", "32", "--frames", "5", "--steps", "2"]


def fsbench(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def detail(path: Path) -> dict:
    lines = path.read_text().splitlines()
    records = (json.loads(x[len(":::MLLOG "):]) for x in lines if x.startswith(":::MLLOG "))
    return {e["key"]: e["value"] for e in records}


def test_test04_run_repeats_sample_3_and_writes_the_audit_folder(tmp_path, one_thread):
    run = tmp_path / "run"
    result = fsbench("run", "--audit", "TEST04", "--count", 3, "--time", 0, "--out", run, *SMALL)
    assert result.exit_code == 0, result.output
    logs = submission.test04_dir(run, "cpu-tiny", "SingleStream")
    values = detail(logs / "mlperf_log_detail.txt")
    assert values["effective_performance_issue_same"] is True and values["effective_performance_issue_same_index"] == 3
    assert sorted(p.name for p in (run / "videos").iterdir()) == [f"{TINY_PROMPTS[3]}-0.mp4"]
    assert not list(run.rglob("*audit.config*"))
    assert set(load_manifest(run)["results"]["SingleStream"]) == {"TEST04"}


def test_test04_refuses_accuracy_mode(tmp_path):
    result = fsbench("run", "--audit", "TEST04", "--mode", "accuracy", "--out", tmp_path / "run", *SMALL)
    assert result.exit_code == 2 and "performance mode" in result.output
    assert not (tmp_path / "run").exists()
