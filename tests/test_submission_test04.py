"""TEST04: LoadGen applies our audit.config (one sample issued for every query), and verify_performance.txt
passes or fails as the reference compliance script decides. Real LoadGen logs from a trivial SUT that sleeps."""
from __future__ import annotations

import array
import time
from pathlib import Path

import pytest

from fsbench import mllog
from fsbench.harness.mlperf import compliance as test04, loadgen

TOTAL = 248


def loadgen_run(out: Path, delay_s: float, audit: bool = False, count: int = 64) -> list[int]:
    """A SingleStream performance run of a SUT that answers after `delay_s`; returns the issued sample indices."""
    import mlperf_loadgen as lg

    opts = loadgen.LoadgenOptions("SingleStream", "performance", count=count, time_s=0,
                                         target_latency_ms=max(delay_s * 1000, 1))
    settings = loadgen.build_test_settings(opts, TOTAL)
    out.mkdir(parents=True, exist_ok=True)
    audit_config = ""
    if audit:
        audit_config = str(out / "audit.config")
        Path(audit_config).write_text(test04.AUDIT_CONFIG)
    issued: list[int] = []

    def issue(samples):
        for sample in samples:
            issued.append(sample.index)
            time.sleep(delay_s)
            buf = array.array("B", b"videos/x-0.mp4")
            ptr, size = buf.buffer_info()
            lg.QuerySamplesComplete([lg.QuerySampleResponse(sample.id, ptr, size)])

    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(TOTAL, TOTAL, lambda _: None, lambda _: None)
    log = lg.LogSettings()
    log.log_output.outdir = str(out)
    log.log_output.copy_summary_to_stdout = False
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, log, audit_config)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    return issued


def test_audit_config_makes_loadgen_issue_one_sample_for_every_query(tmp_path):
    issued = loadgen_run(tmp_path / "test04", 0.0, audit=True)
    values = mllog.read(tmp_path / "test04" / "mlperf_log_detail.txt").values
    assert len(issued) == 64 and len(set(issued)) == 1
    assert values["effective_performance_issue_same"] and values["effective_performance_issue_same_index"] == 3
    assert values["effective_test_mode"] == "PerformanceOnly" and values["early_stopping_met"] is True


# SingleStream's early-stopping estimate over 64 queries is their slowest latency, so one stall of the faster run
# moves its score: the two runs are 10x apart, and a stall of 80 ms would be needed to turn either verdict.
def test_a_test04_run_no_faster_than_the_performance_run_passes(tmp_path):
    loadgen_run(tmp_path / "perf", 0.01)
    loadgen_run(tmp_path / "test04", 0.1, audit=True)
    verdict = test04.verify_performance(tmp_path / "perf" / "mlperf_log_summary.txt",
                                        tmp_path / "test04" / "mlperf_log_summary.txt")
    assert verdict.splitlines()[-1] == "TEST PASS"


def test_a_sut_that_caches_the_repeated_sample_fails(tmp_path):
    loadgen_run(tmp_path / "perf", 0.1)
    loadgen_run(tmp_path / "test04", 0.0, audit=True)
    verdict = test04.verify_performance(tmp_path / "perf" / "mlperf_log_summary.txt",
                                        tmp_path / "test04" / "mlperf_log_summary.txt")
    assert verdict.splitlines()[-1] == "TEST FAIL: Test score invalid"


@pytest.mark.parametrize("invalid", ["perf", "test04"])
def test_an_invalid_run_fails_the_check_whatever_the_scores(tmp_path, invalid):
    for name in ("perf", "test04"):
        # 10 queries can never meet SingleStream's early stopping: LoadGen marks the run INVALID
        loadgen_run(tmp_path / name, 0.0, audit=name == "test04", count=10 if name == invalid else 64)
    verdict = test04.verify_performance(tmp_path / "perf" / "mlperf_log_summary.txt",
                                        tmp_path / "test04" / "mlperf_log_summary.txt")
    which = "Reference" if invalid == "perf" else "Test"
    assert verdict.splitlines()[-1] == f"TEST FAIL: {which} results are invalid"
