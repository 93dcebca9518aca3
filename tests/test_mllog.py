"""One `:::MLLOG` reader for every user: a real LoadGen detail log read whole, and the damage a killed run or a hand
edit leaves (a cut last line, a record that is not an object, text before the log) read as fewer keys, never as an
exception, by the run summary and the submission rules alike."""
from __future__ import annotations

import json

from test_submission_test04 import loadgen_run

from fsbench import mllog
from fsbench.harness.mlperf import loadgen, rules


def test_a_real_detail_log_reads_whole(tmp_path):
    loadgen_run(tmp_path, 0.0, count=64)
    log = mllog.read(tmp_path / "mlperf_log_detail.txt")
    assert log.marked and not log.errors
    assert log.values["effective_scenario"] == "SingleStream" and log.values["result_query_count"] == 64
    assert log.values["effective_performance_sample_count"] == 248
    summary = loadgen.parse_detail(tmp_path / "mlperf_log_detail.txt")
    assert (summary["scenario"], summary["query_count"], summary["samples"]) == ("SingleStream", 64, 64)


def test_a_killed_runs_cut_line_and_foreign_records_are_skipped(tmp_path):
    loadgen_run(tmp_path, 0.0, count=64)
    detail = tmp_path / "mlperf_log_detail.txt"
    text = detail.read_text()
    error = json.dumps({"key": "error_runtime", "value": "a sample was lost", "metadata": {"is_error": True}})
    detail.write_text(text + f"{mllog.MARKER} {error}\n{mllog.MARKER} [1, 2]\n{mllog.MARKER} {{\"key\": \"result_va")
    log = mllog.read(detail)
    assert log.errors == ["a sample was lost"] and log.values["result_query_count"] == 64
    assert loadgen.parse_detail(detail)["query_count"] == 64


def test_a_log_that_does_not_start_with_the_marker_is_named_by_the_rules(tmp_path):
    loadgen_run(tmp_path, 0.0, count=64)
    detail = tmp_path / "mlperf_log_detail.txt"
    detail.write_bytes(b"\xff\xfe not a log\n" + detail.read_bytes())
    log = mllog.read(detail)
    assert not log.marked and log.values["result_query_count"] == 64
    checker = rules._Checker(tmp_path)
    assert checker._detail(tmp_path) is None
    assert checker.problems == [rules.Problem("mlperf_log_detail.txt",
                                              "does not start with ':::MLLOG': not a LoadGen detail log")]
