"""`fsbench campaign PLAN.toml`: the performance runs, the accuracy sweep, eval and compare of a plan, resumable."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from fsbench.folders import refuse_foreign
from fsbench.harness.cli import evaluate, params
from fsbench.harness.run import lock, plan as plans, preflight


@click.command()
@click.argument("plan_file", metavar="PLAN.toml", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=params.OutPath(kind="campaign", file_okay=False),
              help="Folder for the plan's runs and comparison, instead of the plan's `out`.")
@click.option("--dry-run", is_flag=True, help="List the stages and which are already done; run nothing.")
def campaign(plan_file: Path, out: Path | None, dry_run: bool) -> None:
    """Run a plan (scenarios/campaigns/*.toml): the performance runs of every schedule, the accuracy sweep, eval
    against the reference schedule and compare with its page. Rerun it after an interruption: every stage whose
    verified records exist is skipped, so nothing finished is made again."""
    from fsbench.harness.run.campaign import Campaign

    plan = plans.load(plan_file)
    if out is not None:
        plan = dataclasses.replace(plan, out=out)
    refuse_foreign(plan.out, "campaign")  # the plan's own `out` as --out is checked, before a dry run says "to run"
    work = Campaign(plan)
    if dry_run:
        steps = work.pending()
        for number, (stage, why) in enumerate(steps, start=1):
            click.echo(f"[{number}/{len(steps)}] {stage.title}: {'to run' if why is None else f'skipped, {why}'}")
    preflight.refuse_unscorable(work.metrics_to_score(), f"campaign {plan_file}")  # before the first video
    if dry_run:
        return
    ctx = click.get_current_context()

    def run_eval(run: Path, reference: Path | None, metrics: tuple[str, ...]) -> None:
        ctx.invoke(evaluate.eval_cmd, run=run, reference=reference, metrics=",".join(metrics))

    def run_compare(runs: list[Path], out: Path, html: Path | None) -> None:
        ctx.invoke(evaluate.compare, runs=tuple(runs), out=out, html_dir=html)

    with lock.hold(plan.out, kind="campaign"):  # new, empty or a campaign's; one campaign at a time per folder
        work.execute(run_eval, run_compare)
    click.echo(f"results: {plan.out}")
    if plan.html:
        click.echo(f"page:    {work.compare_dir / 'html' / 'index.html'}")
