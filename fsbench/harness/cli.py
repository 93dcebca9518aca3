"""The `fsbench` command line: one click group; each subcommand family lives in its own `cli_*` module, which
defines its commands and knows nothing of this group."""
from __future__ import annotations

import sys

import click

from fsbench import __version__
from fsbench.errors import FsbenchError
from fsbench.harness import cli_doctor, cli_eval, cli_kernels, cli_run, cli_submission


class _Fsbench(click.Group):
    """Turns user errors (FsbenchError, ValueError) into one line on stderr and exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (FsbenchError, ValueError) as exc:
            click.echo(f"fsbench: error: {exc}", err=True)
            sys.exit(2)


@click.group(cls=_Fsbench)
@click.version_option(__version__, prog_name="fsbench")
def main() -> None:
    """fsbench: MLPerf-style Wan2.2 text-to-video benchmark with Fused-Softmax attention."""


for _command in (cli_run.run, cli_run.sweep, cli_run.schedules, cli_eval.eval_cmd, cli_eval.compare,
                 cli_kernels.kernels, cli_submission.submission, cli_doctor.doctor_cmd):
    main.add_command(_command)
