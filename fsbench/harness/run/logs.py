"""How fsbench talks while it works: the `fsbench` logger's level from `--verbose` / `--quiet`, and a log file in every
run folder (RUN/fsbench.log: the command, its warnings, its timings, its progress), appended to by each command that
writes the run.

A run's log holds that run's lines once: a folder is attached once per command, and while a command works on one of
several runs (a sweep's passes, a campaign's stages) `scope(run)` keeps the other runs' logs out of it. A campaign's
own log (`attach(out, every_run=True)`) takes every line.
"""
from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click

from fsbench import files
from fsbench.rundir import LOG

LOGGER = logging.getLogger("fsbench")
_CONSOLE = "fsbench: %(levelname)s: %(message)s"
_FILE = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_LOGGERS = (LOGGER, logging.getLogger("py.warnings"))
# click context meta (shared by a command and its group): the arguments as the group received them, the early
# log records, and --quiet
ARGV, EARLY, QUIET = "fsbench.argv", "fsbench.early_log", "fsbench.quiet"
QUIET_ENV = "FSBENCH_QUIET"  # --quiet for the processes a command starts (ranks, eval workers)
PROGRESS = "fsbench_progress"  # a record's attribute: a progress line, which the console gets from progress.py
_SCOPE: list[Path | None] = []  # the run being worked on (None: no run, a campaign's compare); empty: every run
_ATTACHED: dict[Path, _RunLog] = {}  # the log files of the running command, by folder


class _Early(logging.handlers.BufferingHandler):
    """Keeps what the command logged before its run folder was known, for the run's log file."""

    def shouldFlush(self, record: logging.LogRecord) -> bool:
        return False


def configure(verbose: int, quiet: bool) -> None:
    """Console level: warnings by default, info with -v, debug with -vv, errors only with -q (which also hides the
    progress bars: see `quiet`)."""
    level = logging.ERROR if quiet else {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(level)
    console.setFormatter(logging.Formatter(_CONSOLE))
    console.addFilter(lambda record: not getattr(record, PROGRESS, False))
    early = _Early(capacity=10_000)
    logging.captureWarnings(True)
    for logger in _LOGGERS:
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(console)
        logger.addHandler(early)
    ctx = click.get_current_context()
    ctx.meta.update({EARLY: early, QUIET: quiet})
    inherited = os.environ.get(QUIET_ENV)
    if quiet:
        os.environ[QUIET_ENV] = "1"

    def restore() -> None:
        for logger in _LOGGERS:
            logger.removeHandler(console)
            logger.removeHandler(early)
        if inherited is None:
            os.environ.pop(QUIET_ENV, None)
        else:
            os.environ[QUIET_ENV] = inherited
    ctx.call_on_close(restore)


def quiet() -> bool:
    """Whether the running command (or the one that started this process) was asked for --quiet: progress bars
    stay hidden."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(QUIET)) or os.environ.get(QUIET_ENV) == "1"


@contextlib.contextmanager
def scope(run: Path | None) -> Iterator[None]:
    """Lines logged in the block belong to `run` only (None: to no run folder, only to a campaign's own log)."""
    _SCOPE.append(None if run is None else run.resolve())
    try:
        yield
    finally:
        _SCOPE.pop()


class _RunLog(logging.FileHandler):
    """RUN/fsbench.log. A line that cannot be written (a full disk) is dropped without logging's traceback: the
    command itself reports the full disk in one line where it matters, at a result file."""

    def __init__(self, path: Path, run: Path | None):
        super().__init__(path, encoding="utf-8")
        self.run = run  # None: a campaign's log, which takes every line

    def filter(self, record: logging.LogRecord) -> bool:
        return (self.run is None or not _SCOPE or _SCOPE[-1] == self.run) and bool(super().filter(record))

    def own(self, record: logging.LogRecord) -> None:
        """Write a line that belongs to this file whatever the scope: its command, its early lines, its end."""
        self.acquire()
        try:
            self.emit(record)
        finally:
            self.release()

    def handleError(self, record: logging.LogRecord) -> None:
        pass


@contextlib.contextmanager
def _run_log(path: Path, early: logging.handlers.BufferingHandler | None, every_run: bool) -> Iterator[None]:
    folder = path.parent.resolve()
    handler = _RunLog(path, None if every_run else folder)
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter(_FILE))
    loggers = _LOGGERS
    start = time.perf_counter()
    argv = click.get_current_context().meta.get(ARGV, sys.argv[1:])
    handler.own(LOGGER.makeRecord(LOGGER.name, logging.INFO, __file__, 0, "command: %s",
                                  (shlex.join(["fsbench", *argv]),), None))
    for record in early.buffer if early is not None else []:
        handler.own(record)
    for logger in loggers:
        if early is not None:  # what follows is no longer early: a later run's log does not get it
            logger.removeHandler(early)
        logger.addHandler(handler)
    _ATTACHED[folder] = handler
    try:
        yield
    finally:
        failed = sys.exc_info()[1]
        elapsed = time.perf_counter() - start
        if isinstance(failed, KeyboardInterrupt):  # this file only: the console gets the command's one line
            handler.own(LOGGER.makeRecord(LOGGER.name, logging.WARNING, __file__, 0,
                                          "interrupted (Ctrl-C) after %.1f s", (elapsed,), None))
        elif failed is not None and not isinstance(failed, SystemExit):
            handler.own(LOGGER.makeRecord(LOGGER.name, logging.ERROR, __file__, 0, "failed after %.1f s: %s: %s",
                                          (elapsed, type(failed).__name__, failed), None))
        else:  # this file only: every other log says when its own command finished
            handler.own(LOGGER.makeRecord(LOGGER.name, logging.INFO, __file__, 0, "finished in %.1f s",
                                          (elapsed,), None))
        _ATTACHED.pop(folder, None)
        for logger in loggers:
            logger.removeHandler(handler)
        handler.close()


def attach(run: Path, name: str = LOG, every_run: bool = False) -> None:
    """Log to RUN/`name` until the current command ends (on rank 0 only under torchrun); a folder already attached
    is left as it is, so no line is written twice. `every_run`: the file takes the lines of every run (a campaign's
    log), not only those of `run`. A folder that cannot be made is left to the run's own checks, which say what to
    do."""
    if int(os.environ.get("RANK", "0")) != 0 or run.resolve() in _ATTACHED:
        return
    try:
        run.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    ctx = click.get_current_context()
    ctx.with_resource(_run_log(files.guard_file(run / name), ctx.meta.get(EARLY), every_run))
