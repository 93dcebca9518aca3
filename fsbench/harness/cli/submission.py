"""`fsbench submission`: package runs as an MLPerf v6.1 submission tree, or pre-flight an existing tree."""
from __future__ import annotations

from pathlib import Path

import click

from fsbench.errors import FsbenchError
from fsbench.harness.cli import params
from fsbench.harness.mlperf.rules import Problem


def _print(problems: list[Problem]) -> int:
    """Print every problem, errors first; returns the number of errors."""
    ordered = sorted(problems, key=lambda p: (p.severity != "error", p.where))
    for problem in ordered:
        click.echo(str(problem), err=problem.severity == "error")
    return sum(p.severity == "error" for p in problems)


@click.command()
@click.option("--runs", "runs", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Run folder(s) written by `fsbench run` (repeat --runs, or list them after one --runs).")
@click.option("--out", type=params.OutPath(kind="submission", file_okay=False),
              help="Submission root (ROOT): a new or empty folder, or an earlier submission root.")
@click.option("--division", type=click.Choice(["open", "closed"]), default="open", show_default=True)
@click.option("--submitter", type=params.NAME, help="Organisation name (the folder under the division).")
@click.option("--system", type=params.NAME, help="System name (systems/<system>.json and results/<system>/).")
@click.option("--system-toml", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="TOML file whose `key = value` lines override the detected system description.")
@click.option("--check", "check_root", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Only run the pre-flight on an existing submission ROOT and print every problem.")
@click.option("--official-checker", "checkout", type=click.Path(path_type=Path),
              help="A checkout of mlcommons/inference: also run its tools/submission checker on the tree (v6.1) and "
                   "show its verdict beside fsbench's; a tree it refuses is not written.")
@click.argument("more_runs", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=Path))
def submission(runs: tuple[Path, ...], out: Path | None, division: str, submitter: str | None, system: str | None,
               system_toml: Path | None, check_root: Path | None, checkout: Path | None,
               more_runs: tuple[Path, ...]) -> None:
    """Assemble ROOT/<division>/<submitter>/ from RUN folders (refused, with every failing rule, when the
    tree could not pass the MLPerf checker), or with --check ROOT only report on an existing tree."""
    from fsbench.harness.mlperf import official, rules

    tools = official.tools_dir(checkout) if checkout is not None else None
    if check_root is not None:
        problems = rules.check(check_root)
        errors = _print(problems)
        verdict = official.check(tools, check_root) if tools is not None else None
        if verdict is not None:
            click.echo(str(verdict), err=not verdict.ok)
            if not verdict.ok:
                raise FsbenchError(f"the official checker refused {check_root} (fsbench's rules: {errors} error(s))")
        if errors:
            raise FsbenchError(f"{errors} error(s) in {check_root}: fix them (each line says how) and rerun "
                               "`fsbench submission --check`")
        click.echo(f"{check_root}: no errors ({len(problems)} warning(s))")
        return
    from fsbench.harness.mlperf import submission as builder

    all_runs = [*runs, *more_runs]
    if not all_runs or out is None or not submitter or not system:
        missing = [flag for flag, value in (("--runs", all_runs), ("--out", out), ("--submitter", submitter),
                                            ("--system", system)) if not value]
        raise FsbenchError(f"missing {', '.join(missing)}: e.g. fsbench submission --runs RUN --out ROOT "
                           "--division open --submitter ORG --system NAME")
    report = builder.assemble(all_runs, out, division, submitter, system, system_toml, tools)
    errors = _print(report.problems)
    if report.official is not None:
        click.echo(str(report.official), err=not report.official.ok)
    if not report.written:
        if errors:
            raise FsbenchError(f"submission not written: the {errors} error(s) above fail the {division} division; "
                               "fix the runs and package again")
        raise FsbenchError("submission not written: the official checker refused it (its first error above)")
    click.echo(f"submission: {report.path} ({len(report.problems)} warning(s))")
