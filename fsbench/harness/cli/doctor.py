"""`fsbench doctor`: one screen of what this machine can run, with the command that fixes each missing piece."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from fsbench.harness.cli import params
from fsbench.harness.run import inputs, preflight


def _status(check: preflight.Check, mode: str) -> str:
    if check.ok:
        return "ok"
    return "MISSING" if preflight.needed(check, mode) else "-"


def _plain(checks: list[preflight.Check], mode: str) -> None:
    width = max(len(c.name) for c in checks)
    for check in checks:
        click.echo(f"{_status(check, mode):8} {check.name:<{width}}  {check.found}")
        if not check.ok and check.fix:
            click.echo(f"{'':8} {'':<{width}}  fix: {check.fix}")


def _rich(checks: list[preflight.Check], mode: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for column in ("", "what", "found", "fix"):
        table.add_column(column, overflow="fold")
    style = {"ok": "green", "MISSING": "bold red", "-": "yellow"}
    for check in checks:
        status = _status(check, mode)
        table.add_row(f"[{style[status]}]{status}[/]", check.name, check.found, "" if check.ok else check.fix)
    Console(width=160 if not sys.stdout.isatty() else None).print(table)


@click.command("doctor")
@click.option("--mode", type=click.Choice([*preflight.MODES, "all"]), default="run", show_default=True,
              help="What to be ready for: a LoadGen run, the evaluation (VBench, LPIPS), a closed submission, or all.")
@click.option("--model", default=inputs.DEFAULT_MODEL, show_default=True,
              help="The model a run would use: tiny | a14b-synthetic | a checkpoint folder or cached HF repo id.")
@params.preset_option
@click.option("--prompts", "prompts_file", type=click.Path(path_type=Path),
              help="The prompts file a run would read [default: as `fsbench run`].")
@click.option("--latent", "latent_file", type=click.Path(path_type=Path),
              help="The latent file a run would read [default: as `fsbench run`].")
@click.option("--plain", is_flag=True, help="Plain text, without the rich table.")
def doctor_cmd(mode: str, model: str, preset: str, prompts_file: Path | None, latent_file: Path | None,
               plain: bool) -> None:
    """Say what this machine can run: GPU, kernels, LoadGen, the run's inputs as `fsbench run` with the same options
    reads them (model, settings, prompts, latent), MLPerf's data, VBench and eval weights. Exits 0 when everything
    MODE needs is present, 1 otherwise."""
    checks = preflight.diagnose(model, preset, prompts_file, latent_file)
    try:
        import rich  # noqa: F401  (optional: shown as a table where it is installed)
    except ImportError:
        plain = True
    (_plain if plain else _rich)(checks, mode)
    ok = preflight.ready(checks, mode)
    click.echo(f"{mode}: {'ready' if ok else 'not ready: fix the MISSING lines above'}")
    sys.exit(0 if ok else 1)
