"""The LoadGen driver with real LoadGen and a stand-in `generate` (the driver knows nothing of diffusers)."""
from __future__ import annotations

import json
import time

import pytest

from fsbench.errors import FsbenchError
from fsbench.harness.mlperf.loadgen import LoadgenOptions, build_test_settings, run_test


def _fake_generate(calls: list[int], seconds: float = 0.002):
    def generate(index: int) -> str:
        time.sleep(seconds)
        calls.append(index)
        return f"videos/prompt {index}-0.mp4"
    return generate


def test_single_stream_needs_64_queries_for_a_valid_result(tmp_path):
    calls: list[int] = []
    opts = LoadgenOptions("SingleStream", "performance", count=64, time_s=0, target_latency_ms=2)
    summary = run_test(_fake_generate(calls), 5, opts, tmp_path / "ss")
    assert summary["validity"] == "VALID" and summary["valid"] is True
    assert summary["query_count"] == 64 == len(calls) and set(calls) <= set(range(5))
    assert 2e6 <= summary["latency_p50_ns"] <= summary["latency_p90_ns"] <= summary["latency_max_ns"]
    assert "Result is : VALID" in (tmp_path / "ss" / "mlperf_log_summary.txt").read_text()

    short = run_test(_fake_generate([]), 5, LoadgenOptions("SingleStream", "performance", count=8, time_s=0,
                                                           target_latency_ms=2), tmp_path / "short")
    assert short["validity"] == "INVALID"
    assert any("early stopping" in reason and "64 queries" in reason for reason in short["invalid_reasons"])


def test_offline_issues_count_samples_in_one_query(tmp_path):
    calls: list[int] = []
    opts = LoadgenOptions("Offline", "performance", count=6, time_s=0, target_qps=1000)
    summary = run_test(_fake_generate(calls), 3, opts, tmp_path)
    assert summary["validity"] == "VALID" and summary["samples"] == 6 == len(calls)
    assert summary["samples_per_second"] > 0


def test_accuracy_mode_logs_every_sample_once_with_its_video_path(tmp_path):
    calls: list[int] = []
    run_test(_fake_generate(calls), 4, LoadgenOptions("Offline", "accuracy"), tmp_path)
    assert sorted(calls) == [0, 1, 2, 3]
    entries = json.loads((tmp_path / "mlperf_log_accuracy.json").read_text())
    paths = {e["qsl_idx"]: bytes.fromhex(e["data"]).decode() for e in entries}
    assert paths == {i: f"videos/prompt {i}-0.mp4" for i in range(4)}


def test_settings_come_from_mlperf_conf_and_user_conf_on_every_call(tmp_path):
    user = tmp_path / "user.conf"
    user.write_text("wan-2.2-t2v-a14b.Offline.target_qps = 0.05\n")
    for _ in range(2):  # LoadGen's default conf_type loads mlperf.conf only once per process
        ts = build_test_settings(LoadgenOptions("Offline", "performance", user_conf=user), 248)
        assert ts.min_query_count == 248 and ts.min_duration_ms == 600000 and ts.offline_expected_qps == 0.05
    ts = build_test_settings(LoadgenOptions("SingleStream", "performance", count=3, time_s=1.5,
                                            target_latency_ms=7), 9)
    assert (ts.min_query_count, ts.max_query_count, ts.min_duration_ms) == (3, 3, 1500)
    assert ts.single_stream_expected_latency_ns == 7_000_000 and ts.performance_sample_count_override == 9


def test_broken_user_conf_and_bad_count_are_user_errors(tmp_path):
    bad = tmp_path / "user.conf"
    bad.write_text("this is not a conf line\n")
    with pytest.raises(FsbenchError, match="could not read"):
        build_test_settings(LoadgenOptions("Offline", "performance", user_conf=bad), 4)
    with pytest.raises(FsbenchError, match="not found"):
        build_test_settings(LoadgenOptions("Offline", "performance", user_conf=tmp_path / "none.conf"), 4)
    with pytest.raises(FsbenchError, match="--count must be at least 1"):
        build_test_settings(LoadgenOptions("Offline", "performance", count=0), 4)


def test_an_error_in_generate_ends_the_test_and_is_raised(tmp_path):
    calls: list[int] = []

    def generate(index: int) -> str:
        calls.append(index)
        if len(calls) == 2:
            raise RuntimeError("out of memory")
        return "videos/x-0.mp4"

    with pytest.raises(RuntimeError, match="out of memory"):
        run_test(generate, 4, LoadgenOptions("Offline", "accuracy"), tmp_path)
    assert len(calls) == 2  # the remaining samples were answered empty, not generated


def test_a_failed_test_leaves_the_logs_of_an_earlier_finished_test_alone(tmp_path):
    log_dir = tmp_path / "Offline" / "accuracy"
    run_test(_fake_generate([]), 3, LoadgenOptions("Offline", "accuracy"), log_dir)
    before = {p.name: p.read_bytes() for p in log_dir.iterdir()}

    def broken(index: int) -> str:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        run_test(broken, 3, LoadgenOptions("Offline", "accuracy"), log_dir)
    assert {p.name: p.read_bytes() for p in log_dir.iterdir()} == before
    assert [p.name for p in log_dir.parent.iterdir()] == ["accuracy"]  # no staging folder left behind
