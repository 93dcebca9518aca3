"""The `fsbench` command line: one click group; each subcommand family lives in its own module."""
from __future__ import annotations

import sys

import click

from harness.errors import FsbenchError


class _Fsbench(click.Group):
    """Turns user errors (FsbenchError, ValueError) into one line on stderr and exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (FsbenchError, ValueError) as exc:
            click.echo(f"fsbench: error: {exc}", err=True)
            sys.exit(2)


@click.group(cls=_Fsbench)
def main() -> None:
    """fsbench: MLPerf-style Wan2.2 text-to-video benchmark with Fused-Softmax attention."""


def _register() -> None:
    """Attach the subcommand families (each module adds its commands to `main`)."""
    from harness import cli_eval  # noqa: F401
    from harness import cli_kernels  # noqa: F401
    from harness import cli_run  # noqa: F401
    from harness import cli_submission  # noqa: F401


_register()
