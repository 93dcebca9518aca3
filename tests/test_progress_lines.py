"""Progress outside a terminal is plain lines: one per unit with its time, the mean and the time left (one every
EVERY_S on fast work), a stage's start and end with its duration, and a heartbeat while nothing else is said;
--quiet silences them on the console, never in the log files."""
from __future__ import annotations

import logging
import time

import pytest

from fsbench.harness.run import logs, progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(progress, "_clock", fake)
    monkeypatch.setattr(logs, "quiet", lambda: False)
    return fake


def _lines(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_a_slow_bar_says_each_video_with_its_time_the_mean_and_what_is_left(clock, capsys):
    with progress.bar(4, "SingleStream performance [bf16]", "video") as bar:
        for seconds in (30, 10, 20, 20):
            clock.now += seconds
            bar.update()
    assert _lines(capsys) == [
        "SingleStream performance [bf16]: video 1/4 in 30.00 s, mean 30.00 s, 1 min 30 s left",
        "SingleStream performance [bf16]: video 2/4 in 10.00 s, mean 20.00 s, 40.0 s left",
        "SingleStream performance [bf16]: video 3/4 in 20.00 s, mean 20.00 s, 20.0 s left",
        "SingleStream performance [bf16]: video 4/4 in 20.00 s, mean 20.00 s, 0.0 s left"]


def test_a_fast_bar_says_a_line_every_few_seconds_and_its_last(clock, capsys):
    with progress.bar(100, "fidelity [mxfp8]", "prompt") as bar:
        for _ in range(100):
            clock.now += 0.5
            bar.update()
    said = [line.split()[3] for line in _lines(capsys)]
    assert said == ["1/100", "21/100", "41/100", "61/100", "81/100", "100/100"]  # 10 s apart at 0.5 s a prompt


def test_a_stage_says_its_start_and_its_end_with_its_duration(clock, capsys):
    with progress.plan(100.0):
        progress.stage("[1/2] eval psnr [mxfp8]", 60.0, 2, "prompt")
        clock.now += 75
        progress.stage("[2/2] compare --html", 40.0)
        clock.now += 4
    assert _lines(capsys) == ["[1/2] eval psnr [mxfp8]: started", "[1/2] eval psnr [mxfp8]: done in 1 min 15 s",
                              "[2/2] compare --html: started", "[2/2] compare --html: done in 4.0 s"]


def test_a_silent_stage_gets_a_heartbeat_line_at_least_every_heartbeat(monkeypatch, capsys):
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.4)
    monkeypatch.setattr(logs, "quiet", lambda: False)
    arrivals = []
    monkeypatch.setattr(progress.click, "echo", lambda text, err: arrivals.append((time.monotonic(), text)))
    start = time.monotonic()
    with progress.plan(10.0):
        progress.stage("[1/1] compare --html", 10.0)
        time.sleep(2.2)  # the page: nothing else says anything
    end = time.monotonic()
    beats = [(t, text) for t, text in arrivals if "still running" in text]
    assert len(beats) >= 3 and all(text.startswith("[1/1] compare --html: still running, ") for _, text in beats)
    times = [start] + [t for t, _ in arrivals] + [end]
    assert max(b - a for a, b in zip(times, times[1:])) < 0.4 + 0.3  # the beat's period plus its wake-up


def test_quiet_silences_the_console_but_the_log_keeps_every_line(clock, monkeypatch, capsys, caplog):
    monkeypatch.setattr(logs, "quiet", lambda: True)
    with caplog.at_level(logging.INFO, logger="fsbench"), progress.bar(2, "Offline accuracy [bf16]", "video") as bar:
        for _ in range(2):
            clock.now += 1
            bar.update()
    assert capsys.readouterr().err == ""
    assert [r.getMessage().split(" in ")[0] for r in caplog.records] == ["Offline accuracy [bf16]: video 1/2",
                                                                        "Offline accuracy [bf16]: video 2/2"]
