"""The `fsbench` command line: one click group; each subcommand family lives in its own module."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

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


def _check_kernels_package() -> None:
    """Hugging Face's `kernels` distribution (a requirement of transformers >= 5.25) installs a top-level package
    named like fsbench's kernels/ and can shadow it: say so before a run fails deep inside on a missing name."""
    ours = Path(__file__).resolve().parent.parent / "kernels"
    spec = importlib.util.find_spec("kernels")
    found = Path(spec.origin).resolve().parent if spec is not None and spec.origin else None
    if found != ours:
        raise FsbenchError(f"'import kernels' finds {found or 'nothing'}, not fsbench's {ours}: Hugging Face's "
                           "`kernels` package (required by transformers >= 5.25) shadows it; run "
                           "`pip uninstall kernels` and `pip install 'transformers<5.25'`")


@click.group(cls=_Fsbench)
def main() -> None:
    """fsbench: MLPerf-style Wan2.2 text-to-video benchmark with Fused-Softmax attention."""
    _check_kernels_package()


def _register() -> None:
    """Attach the subcommand families (each module adds its commands to `main`)."""
    from harness import cli_eval  # noqa: F401
    from harness import cli_kernels  # noqa: F401
    from harness import cli_run  # noqa: F401
    from harness import cli_submission  # noqa: F401


_register()
