"""Progress, said once and shown where it fits: bars on a terminal, plain lines anywhere else (a file, a pipe, a
batch job's log), nothing on the console under --quiet; every line also goes to the log files (harness.run.logs).

- A bar's line per unit (video, prompt), at most one every EVERY_S on fast work (its last unit always has one):
  what it counts, n/N, that unit's seconds, the mean so far and the time left.
- A campaign's stages: a line as each starts and as it ends, with its duration. Its plan bar weighs every stage by
  its estimated seconds (`plan`, `stage`), eval and compare included, so 100% is the end of the last stage.
- A heartbeat: while a stage or a bar goes HEARTBEAT_S without a line (a long video, the page), a line says what
  is still running and for how long, so a log is never silent for long.

On a terminal, messages go above the bars, never over them: log records through tqdm's `logging_redirect_tqdm`,
this module's lines through `tqdm.write`, and what commands print on stdout through `_AboveBars`.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import click
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from fsbench.harness.run import logs

HEARTBEAT_S = 20.0  # the longest a stage or bar goes without a line
EVERY_S = 10.0  # the shortest gap between two lines of one bar (its last unit excepted)
_clock = time.monotonic


def shown() -> bool:
    """Whether bars are drawn: stderr is a terminal and the command was not asked for --quiet."""
    return not logs.quiet() and sys.stderr.isatty()


def duration(seconds: float) -> str:
    """`12.3 s`, `4 min 05 s`, `2 h 03 min`: short enough for a progress line."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


class _Talk:
    """Who is working (a stack of descriptions with their start), when the last line was said, and the heartbeat
    thread that runs while anything works."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.working: list[tuple[str, float]] = []
        self.last = _clock()
        self.beat: tuple[threading.Thread, threading.Event] | None = None

    def say(self, text: str, above_bars: bool = False) -> None:
        """One line: into the log files always; on the console where no bar shows it (`above_bars`: on a terminal
        too, above the bars), never under --quiet."""
        with self.lock:
            self.last = _clock()
        logs.LOGGER.info(text, extra={logs.PROGRESS: True})
        if logs.quiet():
            return
        if not sys.stderr.isatty():
            click.echo(text, err=True)
        elif above_bars:
            tqdm.write(text, file=sys.stderr)

    @contextlib.contextmanager
    def working_on(self, desc: str) -> Iterator[None]:
        with self.lock:
            self.working.append((desc, _clock()))
            if self.beat is None:
                stop = threading.Event()
                self.beat = (threading.Thread(target=self._beat, args=(stop,), daemon=True), stop)
                self.beat[0].start()
        try:
            yield
        finally:
            with self.lock:
                self.working.remove(next(w for w in reversed(self.working) if w[0] == desc))
                beat, self.beat = (self.beat, None) if not self.working else (None, self.beat)
            if beat is not None:  # not joined: it ends at its next wake-up, and a bar's end does not wait for it
                beat[1].set()

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(min(1.0, HEARTBEAT_S / 4)):
            with self.lock:
                if not self.working or _clock() - self.last < HEARTBEAT_S:
                    continue
                desc, since = self.working[-1]
            try:
                self.say(f"{desc}: still running, {duration(_clock() - since)} in")
            except (OSError, ValueError):  # stderr closed under it (a pipe's reader gone): the command says the rest
                return


_TALK = _Talk()


@dataclass
class _Line:
    """A bar's progress line: per unit, throttled to one every EVERY_S."""

    desc: str
    total: int | None
    unit: str
    start: float = field(default_factory=lambda: _clock())
    done: float = 0
    said: float = -float("inf")

    def __post_init__(self) -> None:
        self.previous = self.start

    def advance(self, n: float) -> None:
        now = _clock()
        self.done += n
        this, self.previous = (now - self.previous) / max(n, 1), now
        if self.total != self.done and now - self.said < EVERY_S:
            return
        self.said = now
        mean = (now - self.start) / self.done if self.done else 0.0
        of = f"/{self.total}" if self.total else ""
        left = f", {duration(mean * (self.total - self.done))} left" if self.total else ""
        _TALK.say(f"{self.desc}: {self.unit} {self.done:g}{of} in {this:.2f} s, mean {mean:.2f} s{left}")


class _Bar(tqdm):
    """A tqdm bar that also says its progress as lines (`_Line`) and advances the campaign's plan bar."""

    counts: str = ""  # the unit, kept here too: a disabled tqdm keeps none of its arguments
    line: _Line | None = None

    def update(self, n: float | None = 1) -> bool | None:
        shown_now = super().update(n)
        step = 1 if n is None else n
        if self.line is not None:
            self.line.advance(step)
        if _PLAN:
            _PLAN[0].advance(self.counts, step)
        return shown_now


@contextlib.contextmanager
def bar(total: int | None, desc: str, unit: str, **kwargs: Any) -> Iterator[tqdm]:
    """A bar that draws only where `shown()`, says its progress as lines (`_Line`), and advances the campaign's
    plan bar."""
    made = _Bar(total=total, desc=desc, unit=unit, disable=not shown(), dynamic_ncols=True, **kwargs)
    made.counts = unit
    made.line = _Line(desc, total, unit)
    with _TALK.working_on(desc), made:
        yield made


@dataclass
class _Plan:
    """The plan bar and the stage it is in: `weight` estimated seconds over `units` of `unit` (the inner bars')."""

    bar: tqdm
    head: str = ""
    start: float = 0.0
    boundary: float = 0.0  # the plan bar's count where this stage started
    weight: float = 0.0
    units: int | None = None
    unit: str = ""
    context: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def advance(self, unit: str, n: float) -> None:
        if unit != self.unit or not self.units:
            return
        room = self.boundary + self.weight - self.bar.n
        self.bar.update(max(0.0, min(self.weight * n / self.units, room)))

    def end(self) -> None:
        """Close the stage: its line with its duration, the bar at its end."""
        if not self.head:
            return
        _TALK.say(f"{self.head}: done in {duration(_clock() - self.start)}", above_bars=True)
        self.bar.update(max(0.0, self.boundary + self.weight - self.bar.n))
        self.context.close()
        self.head = ""


_PLAN: list[_Plan] = []  # the running campaign's plan bar, if any


@contextlib.contextmanager
def plan(total: float) -> Iterator[tqdm]:
    """The one bar of a campaign: `total` estimated seconds over all its stages; `stage` names the one running.
    On a terminal, log records and stdout go above the bars for the block."""
    with contextlib.ExitStack() as stack:
        if shown():
            stack.enter_context(_above_bars())
        outer = stack.enter_context(tqdm(
            total=max(total, 1e-9), disable=not shown(), dynamic_ncols=True, position=0,
            bar_format="{desc} {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]"))
        state = _Plan(outer)
        _PLAN.append(state)
        try:
            yield outer
            state.end()
        finally:
            state.context.close()
            _PLAN.remove(state)


def stage(text: str, weight: float = 0.0, units: int | None = None, unit: str = "") -> None:
    """Start a stage (ending the one before): a line of its own, and its name on the plan bar on a terminal.
    `weight`: its estimated seconds on the plan bar, which its inner bars of `unit` advance in `units` steps."""
    if not _PLAN:
        _TALK.say(text, above_bars=True)
        return
    state = _PLAN[0]
    state.end()
    state.head, state.start, state.boundary = text, _clock(), state.bar.n
    state.weight, state.units, state.unit = weight, units, unit
    state.bar.set_description_str(text)
    _TALK.say(f"{text}: started")
    state.context.enter_context(_TALK.working_on(text))


def working(desc: str) -> contextlib.AbstractContextManager[None]:
    """A block with no bar of its own (loading a pipeline): the heartbeat says it is still running."""
    return _TALK.working_on(desc)


def note(text: str) -> None:
    """A line of its own, above the plan bar on a terminal (a stage skipped, say)."""
    _TALK.say(text, above_bars=True)


@contextlib.contextmanager
def _above_bars() -> Iterator[None]:
    """Log records through tqdm (its console handler keeps ours' level and filters) and stdout through
    `_AboveBars`, for as long as bars are drawn."""
    loggers = [logs.LOGGER, logging.getLogger("py.warnings")]
    before = {id(logger): list(logger.handlers) for logger in loggers}
    consoles = [h for logger in loggers for h in logger.handlers if type(h) is logging.StreamHandler]
    with logging_redirect_tqdm(loggers=loggers):
        for logger in loggers:
            for handler in logger.handlers:
                if handler not in before[id(logger)] and consoles:
                    handler.setLevel(consoles[0].level)
                    handler.filters = list(consoles[0].filters)
        stdout, sys.stdout = sys.stdout, _AboveBars(sys.stdout)
        try:
            yield
        finally:
            sys.stdout = stdout


class _AboveBars(io.TextIOBase):
    """stdout while bars are drawn on stderr: each write clears the bars and redraws them after it, as
    `tqdm.write` does for a line (tqdm's own DummyTqdmFile clears only bars drawn on the stream it wraps)."""

    def __init__(self, stream: Any):
        self.stream = stream

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.stream, "encoding", "utf-8"))

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with tqdm.external_write_mode(file=sys.stderr):
            written = self.stream.write(text)
            self.stream.flush()
        return written

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return bool(self.stream.isatty())

    def fileno(self) -> int:
        return int(self.stream.fileno())


def quiet_libraries() -> None:
    """diffusers' and transformers' own bars (loading weights, denoising) follow `shown()` too."""
    if shown():
        return
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    diffusers_logging.disable_progress_bar()
    transformers_logging.disable_progress_bar()
