"""How fsbench talks while it works: the `fsbench` logger's level from `--verbose` / `--quiet`, and a log file in every
run folder (RUN/fsbench.log: the command, its warnings, its timings), appended to by each command that writes the run.
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


class _RunLog(logging.FileHandler):
    """RUN/fsbench.log. A line that cannot be written (a full disk) is dropped without logging's traceback: the
    command itself reports the full disk in one line where it matters, at a result file."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


@contextlib.contextmanager
def _run_log(path: Path, early: logging.handlers.BufferingHandler | None) -> Iterator[None]:
    handler = _RunLog(path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter(_FILE))
    loggers = _LOGGERS
    start = time.perf_counter()
    argv = click.get_current_context().meta.get(ARGV, sys.argv[1:])
    handler.handle(LOGGER.makeRecord(LOGGER.name, logging.INFO, __file__, 0, "command: %s",
                                     (shlex.join(["fsbench", *argv]),), None))
    for record in early.buffer if early is not None else []:
        handler.handle(record)
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield
    finally:
        failed = sys.exc_info()[1]
        elapsed = time.perf_counter() - start
        if isinstance(failed, KeyboardInterrupt):  # this file only: the console gets the command's one line
            handler.handle(LOGGER.makeRecord(LOGGER.name, logging.WARNING, __file__, 0,
                                             "interrupted (Ctrl-C) after %.1f s", (elapsed,), None))
        elif failed is not None and not isinstance(failed, SystemExit):
            handler.handle(LOGGER.makeRecord(LOGGER.name, logging.ERROR, __file__, 0, "failed after %.1f s: %s: %s",
                                             (elapsed, type(failed).__name__, failed), None))
        else:
            LOGGER.info("finished in %.1f s", elapsed)
        for logger in loggers:
            logger.removeHandler(handler)
        handler.close()


def attach(run: Path) -> None:
    """Log to RUN/fsbench.log until the current command ends (on rank 0 only under torchrun). A folder that cannot
    be made is left to the run's own checks, which say what to do."""
    if int(os.environ.get("RANK", "0")) != 0:
        return
    try:
        run.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    ctx = click.get_current_context()
    ctx.with_resource(_run_log(files.guard_file(run / LOG), ctx.meta.get(EARLY)))
