"""MLPerf LoadGen around one function, `generate(qsl_index) -> payload` (the video path): SUT, QSL,
settings, logs. Knows nothing of diffusers.

Settings come from LoadGen's built-in mlperf.conf plus `scenarios/user.conf` for `wan-2.2-t2v-a14b`, then
the quick-run overrides, loaded afresh for every test so several tests in one process agree. Each response
carries the payload bytes (a short path, never raw frames), and its buffer stays referenced until
`QuerySamplesComplete` has returned.
"""
from __future__ import annotations

import array
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsbench import files, mllog
from fsbench.errors import FsbenchError
from fsbench.harness.run import interrupts
from fsbench.paths import SCENARIO_DIR
from fsbench.rundir import BENCHMARK

SCENARIOS = ("SingleStream", "Offline")
MODES = ("performance", "accuracy")
USER_CONF = SCENARIO_DIR / "user.conf"
# Bounds of the quick-run overrides: beyond them LoadGen allocates per expected query and a typo exhausts memory.
MAX_COUNT = 1_000_000
MAX_TIME_S = 7 * 24 * 3600.0
MAX_TARGET_LATENCY_MS = 24 * 3600 * 1000.0
MAX_TARGET_QPS = 1000.0


@dataclass(frozen=True)
class LoadgenOptions:
    """Scenario, mode and the quick-run overrides (None keeps mlperf.conf + user.conf)."""

    scenario: str
    mode: str
    user_conf: Path = USER_CONF
    count: int | None = None            # queries (SingleStream) / samples (Offline): min = max = count
    time_s: float | None = None          # min_duration
    target_latency_ms: float | None = None
    target_qps: float | None = None
    audit: str | None = None             # "TEST04": LoadGen reads harness.mlperf.compliance.AUDIT_CONFIG

    def overrides(self) -> dict[str, Any]:
        return {k: v for k, v in (("count", self.count), ("time_s", self.time_s),
                                  ("target_latency_ms", self.target_latency_ms),
                                  ("target_qps", self.target_qps)) if v is not None}


def build_test_settings(opts: LoadgenOptions, total: int) -> Any:
    import mlperf_loadgen as lg

    if opts.scenario not in SCENARIOS or opts.mode not in MODES:
        raise FsbenchError(f"scenario must be one of {SCENARIOS} and mode one of {MODES}")
    if opts.audit not in (None, "TEST04"):
        raise FsbenchError(f"unknown compliance audit {opts.audit!r}; fsbench runs TEST04 only")
    if opts.audit and opts.mode != "performance":
        raise FsbenchError(f"--audit {opts.audit} runs in performance mode; drop --mode {opts.mode}")
    if not opts.user_conf.is_file():
        raise FsbenchError(f"LoadGen user.conf {opts.user_conf} not found")
    ts = lg.TestSettings()
    # conf_type 0 loads the built-in mlperf.conf, 2 a user.conf. The default (1) loads mlperf.conf only on the
    # first call in a process, so a second test (a sweep) would silently run without it.
    ts.FromConfig("", BENCHMARK, opts.scenario, 0)
    if ts.FromConfig(str(opts.user_conf), BENCHMARK, opts.scenario, 2) != 0:
        raise FsbenchError(f"LoadGen could not read {opts.user_conf}; check its `model.Scenario.key = value` lines")
    ts.scenario = getattr(lg.TestScenario, opts.scenario)
    ts.mode = lg.TestMode.PerformanceOnly if opts.mode == "performance" else lg.TestMode.AccuracyOnly
    ts.performance_sample_count_override = total
    if opts.count is not None:
        if opts.count < 1:
            raise FsbenchError(f"--count must be at least 1, got {opts.count}")
        ts.min_query_count = ts.max_query_count = opts.count
    if opts.time_s is not None:
        ts.min_duration_ms = int(opts.time_s * 1000)
    if opts.target_latency_ms is not None:
        ts.single_stream_expected_latency_ns = int(opts.target_latency_ms * 1e6)
    if opts.target_qps is not None:
        ts.offline_expected_qps = opts.target_qps
    return ts


class _SUT:
    """Answers each sample as soon as it is generated, with up to `concurrency` samples in flight (replicas
    generating in parallel). After an error or Ctrl-C (`stop`), the remaining samples get empty responses at
    once so LoadGen can finish; the error is re-raised after the test."""

    def __init__(self, generate: Callable[[int], str], on_sample: Callable[[], None] | None, concurrency: int = 1):
        self.generate, self.on_sample, self.concurrency = generate, on_sample, concurrency
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.latencies_ns: list[int] = []  # each answered sample's, issue to response: the spread of the percentiles
        self._lock = threading.Lock()

    def issue_queries(self, samples: list) -> None:
        if self.concurrency == 1:
            for sample in samples:
                self._answer(sample)
            return
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="sut") as pool:
            list(pool.map(self._answer, samples))

    def _answer(self, sample: Any) -> None:
        import mlperf_loadgen as lg

        payload = b""
        start = time.perf_counter_ns()
        if not self.stop.is_set():
            try:
                payload = self.generate(sample.index).encode()
            except BaseException as exc:  # noqa: BLE001 - must not propagate into LoadGen's C++ thread
                with self._lock:
                    self.error = self.error or exc
                self.stop.set()
        buf = array.array("B", payload)
        ptr, size = buf.buffer_info()
        elapsed = time.perf_counter_ns() - start  # inside LoadGen's span of the query: issue to completion
        lg.QuerySamplesComplete([lg.QuerySampleResponse(sample.id, ptr, size)])
        del buf  # only now: LoadGen copied the bytes inside QuerySamplesComplete
        if payload:
            with self._lock:
                self.latencies_ns.append(elapsed)
                if self.on_sample:
                    self.on_sample()

    def flush_queries(self) -> None:
        """Nothing is batched, so there is nothing to flush."""


def run_test(generate: Callable[[int], str], total: int, opts: LoadgenOptions, log_dir: Path,
             on_sample: Callable[[], None] | None = None, concurrency: int = 1) -> dict[str, Any]:
    """Run one LoadGen test over QSL indices 0..total-1; returns the parsed summary. `generate` must be
    thread-safe when `concurrency` > 1 (it is then called from that many threads).

    LoadGen logs into a temporary folder in the run's staging place; only a completed test moves its logs into
    `log_dir`, so an error or Ctrl-C never replaces the logs of an earlier finished test.
    """
    import mlperf_loadgen as lg

    settings = build_test_settings(opts, total)
    with files.temp_folder(log_dir, prefix=f"{log_dir.name}-") as staging:
        logs = staging / "logs"
        logs.mkdir()
        audit_config = ""
        if opts.audit:  # outside the logs' folder, so audit.config never lands among them
            from fsbench.harness.mlperf.compliance import AUDIT_CONFIG

            audit_config = str(staging / "audit.config")
            Path(audit_config).write_text(AUDIT_CONFIG, encoding="utf-8")
        summary = _run(lg, generate, total, settings, logs, on_sample, audit_config, concurrency)
        files.guard(log_dir / "log").parent.mkdir(parents=True, exist_ok=True)
        for item in logs.iterdir():
            os.replace(item, files.guard(log_dir / item.name))
    return summary


def _run(lg: Any, generate: Callable[[int], str], total: int, settings: Any, log_dir: Path,
         on_sample: Callable[[], None] | None, audit_config: str, concurrency: int) -> dict[str, Any]:
    log = lg.LogSettings()
    log.log_output.outdir = str(log_dir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    sut_impl = _SUT(generate, on_sample, concurrency)
    sut = lg.ConstructSUT(sut_impl.issue_queries, sut_impl.flush_queries)
    qsl = lg.ConstructQSL(total, total, lambda _: None, lambda _: None)
    start = time.perf_counter()
    # LoadGen blocks in C++; running it in a thread keeps Ctrl-C deliverable to this (main) thread. An Event,
    # not Thread.join, signals the end: a join interrupted by KeyboardInterrupt can report a live thread dead.
    done = threading.Event()

    def start_test() -> None:
        try:
            lg.StartTestWithLogSettings(sut, qsl, settings, log, audit_config)
        finally:
            done.set()

    try:
        with _ctrl_c_stops(sut_impl.stop) as interrupted:
            threading.Thread(target=start_test, name="loadgen", daemon=True).start()
            while not done.wait(0.2) and not interrupted.is_set():
                pass
            if interrupted.is_set():
                print("fsbench: stopping after the current video (Ctrl-C again aborts it)",
                      file=sys.stderr, flush=True)
                done.wait()
                raise KeyboardInterrupt
    finally:
        if done.is_set():
            lg.DestroyQSL(qsl)
            lg.DestroySUT(sut)
    if sut_impl.error is not None:
        raise sut_impl.error
    summary = parse_detail(log_dir / "mlperf_log_detail.txt")
    summary["wall_s"] = round(time.perf_counter() - start, 3)
    if summary.get("scenario") == "SingleStream" and "validity" in summary:  # a performance result
        summary["query_latencies_ns"] = sut_impl.latencies_ns
    return summary


@contextmanager
def _ctrl_c_stops(stop: threading.Event) -> Iterator[threading.Event]:
    """While LoadGen runs, the first Ctrl-C only sets `stop` (and the event yielded); the second exits (130).

    A handler that raises at the first press could see its KeyboardInterrupt land in whatever the main thread
    runs at that instant, a finalizer included, where Python drops it; setting events cannot be lost."""
    interrupted = threading.Event()

    def on_sigint(signum: int, frame: Any) -> None:
        if interrupted.is_set():
            # LoadGen's thread is inside C++: unwinding the interpreter around it aborts the process (SIGABRT).
            # Leave at once instead: no file is half-written under its final name, and the next run cleans staging.
            interrupts.exit_now()
        interrupted.set()
        stop.set()

    if threading.current_thread() is not threading.main_thread():  # signal handlers belong to the main thread
        yield interrupted
        return
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield interrupted
    finally:
        if interrupted.is_set():
            interrupts.pressed()  # a second press from here on exits at once, as it did inside LoadGen
        else:
            signal.signal(signal.SIGINT, previous)


def parse_detail(path: Path) -> dict[str, Any]:
    """The result fields of `mlperf_log_detail.txt` (`:::MLLOG {json}` lines) as a flat summary."""
    values = mllog.read(path).values
    summary: dict[str, Any] = {"scenario": values.get("effective_scenario"), "mode": values.get("effective_test_mode")}
    if "result_validity" not in values:
        return summary
    reasons = [text for key, text in (("result_min_duration_met", "min duration not met"),
                                      ("result_min_queries_met", "min query count not met"),
                                      ("early_stopping_met", "early stopping not met")) if values.get(key) is False]
    if values.get("early_stopping_met") is False and values.get("early_stopping_result"):
        reasons[-1] += ":" + values["early_stopping_result"].replace("  ", " ").replace(" * ", " ")
    if values.get("result_invalid_reason"):
        reasons.append(values["result_invalid_reason"])
    latency = {f"latency_{name}_ns": values.get(f"result_{key}_latency_ns") for name, key in
               (("min", "min"), ("mean", "mean"), ("p50", "50.00_percentile"), ("p90", "90.00_percentile"),
                ("p99", "99.00_percentile"), ("max", "max"))}
    summary.update(
        validity=values["result_validity"],
        valid=values["result_validity"] == "VALID",
        invalid_reasons=reasons if values["result_validity"] != "VALID" else [],
        **latency,
        samples_per_second=values.get("result_samples_per_second",
                                      values.get("result_qps_with_loadgen_overhead")),
        query_count=values.get("result_query_count"),
        samples=values.get("generated_samples_per_query", 1) * values.get("generated_query_count", 0)
        if values.get("effective_scenario") == "Offline" else values.get("result_query_count"),
    )
    if "early_stopping_latency_ss" in values:
        summary["early_stopping_latency_ns"] = values["early_stopping_latency_ss"]
    return summary
