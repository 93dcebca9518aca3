"""The `fsbench` command line: one click group; each subcommand family lives in its own module of this package,
which defines its commands and knows nothing of this group.

Exit codes: 0 done, 1 a check that failed (doctor, submission --check), 2 bad input (one line), 130 Ctrl-C (one line),
141 the output's reader went away (`fsbench doctor | head -1`: quietly, as a shell tool stopped by SIGPIPE)."""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from fsbench import __version__
from fsbench.errors import FsbenchError
from fsbench.harness.cli import (
    campaign as cli_campaign,
    doctor,
    evaluate,
    kernels as cli_kernels,
    run as cli_run,
    submission as cli_submission,
    tune as cli_tune,
)
from fsbench.harness.run import interrupts, logs


class _Fsbench(click.Group):
    """Turns user errors (FsbenchError, ValueError, a file that cannot be read or written, and click's own usage
    errors) into one line on stderr and exit code 2, and keeps the arguments for the run's log file."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        argv = list(args)
        try:
            ctx = super().make_context(info_name, args, parent, **extra)  # --help is written here
        except BrokenPipeError:
            raise _PipeClosed from None
        ctx.meta[logs.ARGV] = argv
        return ctx

    def invoke(self, ctx: click.Context):
        try:
            result = super().invoke(ctx)
        except KeyboardInterrupt:
            raise _Interrupted(interrupts.message()) from None
        except BrokenPipeError:  # before click's own handling, which exits 1
            raise _PipeClosed from None
        except Exception as exc:  # a press that a child (ffmpeg, a worker) met first surfaces as its failure
            if interrupts.was_pressed():
                raise _Interrupted(interrupts.message()) from None
            _fail_on_user_error(exc)
            raise
        if interrupts.was_pressed():  # a press that something swallowed: the command still ends as interrupted
            raise _Interrupted(interrupts.message())
        return result

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        interrupts.install()
        try:
            self._main(args, prog_name, complete_var, **extra)
        except (_PipeClosed, BrokenPipeError):
            _silence_output()
            sys.exit(PIPE_CLOSED)

    def _main(self, args: Sequence[str] | None, prog_name: str | None, complete_var: str | None,
              **extra: Any) -> None:
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _Interrupted as exc:
            click.echo(f"fsbench: {exc.message}", err=True)
            sys.exit(interrupts.INTERRUPTED)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except _NoArgsIsHelp as exc:  # `fsbench` or a group alone: the help, as click shows it
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        finally:
            sys.stdout.flush()  # what is still buffered meets a closed pipe here, not in the interpreter's teardown
        sys.exit(code if isinstance(code, int) else 0)


_NoArgsIsHelp = getattr(click.exceptions, "NoArgsIsHelpError", ())
PIPE_CLOSED = 141  # 128 + SIGPIPE


class _PipeClosed(Exception):
    """The reader of the output went away; not an OSError, which click would turn into exit code 1."""


def _silence_output() -> None:
    """Point stdout and stderr at /dev/null: what is still buffered would meet the closed pipe again at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # a stream without a file descriptor (a test's capture)
            pass
    os.close(devnull)


class _Interrupted(click.ClickException):
    """A first Ctrl-C, with the line that says what is kept."""

    exit_code = interrupts.INTERRUPTED


def _fail_on_user_error(exc: Exception) -> None:
    """A user error (FsbenchError, ValueError, a file that cannot be read or written) becomes one line and exit 2."""
    if isinstance(exc, (FsbenchError, ValueError)):
        _fail(str(exc))
    if isinstance(exc, OSError) and exc.filename is not None:
        _fail(f"{exc.filename}: {exc.strerror or exc}")


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"fsbench: error: {' '.join(message.split())}", err=True)
    sys.exit(code)


@click.group(cls=_Fsbench)
@click.version_option(__version__, prog_name="fsbench")
@click.option("-v", "--verbose", count=True, help="Say more: -v info lines, -vv debug.")
@click.option("-q", "--quiet", is_flag=True, help="Only errors and results: no progress bars, no warnings.")
def main(verbose: int, quiet: bool) -> None:
    """fsbench: MLPerf-style Wan2.2 text-to-video benchmark with Fused-Softmax attention."""
    logs.configure(verbose, quiet)


for _command in (cli_run.run, cli_run.sweep, cli_campaign.campaign, cli_run.schedules, evaluate.eval_cmd,
                 evaluate.compare, cli_kernels.kernels, cli_submission.submission, doctor.doctor_cmd, cli_tune.tune):
    main.add_command(_command)
