"""`fsbench campaign PLAN.toml`: the performance runs, the accuracy sweep, eval and compare of a plan, resumable."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fsbench import rundir
from fsbench.errors import FsbenchError
from fsbench.folders import refuse_foreign
from fsbench.harness.cli import evaluate, params, submission as cli_submission
from fsbench.harness.run import lock, logs, plan as plans, preflight

if TYPE_CHECKING:
    from fsbench.harness.run.campaign import Compare, Evaluate, Package



@click.command(context_settings={"max_content_width": 120})
@click.argument("plan_file", metavar="PLAN.toml", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=params.OutPath(kind="campaign", file_okay=False),
              help="Folder for the plan's runs and comparison, instead of the plan's `out`.")
@click.option("--dry-run", is_flag=True, help="List the stages and which are already done, and whether the runs "
                                               "can be packaged as a submission; run nothing.")
def campaign(plan_file: Path, out: Path | None, dry_run: bool) -> None:
    """Run a plan (scenarios/campaigns/*.toml): the performance runs of every schedule, the accuracy sweep, eval
    against the reference schedule, compare with its page and, if asked, a submission tree per schedule. Rerun it
    after an interruption: every stage whose verified records exist is skipped, so nothing finished is made again.
    OUT/campaign.log holds every line; each run's fsbench.log its own. docs/campaigns.md explains every field.

    \b
    The plan's fields ([default]):
      description = "..."                  shown as the campaign starts
      model = "tiny"                       as `fsbench run --model` (required)
      preset = "mlperf"                    a preset name or a .toml file [mlperf]
      schedules = ["bf16", "mxfp8"]        names, .toml files or spec strings (required)
      reference = "bf16"                   the schedule the others are scored against [bf16]
      out = "results/runs/campaigns/NAME"  [results/runs/campaigns/<plan's stem>]
      impl = "auto"   device = "auto"      kernel choice; auto | cpu | cuda
      accuracy = true                      the accuracy sweep (Offline AccuracyOnly) of every schedule [true]
      metrics = ["psnr", "ssim"]           `fsbench eval` of every schedule; [] for none [psnr, ssim]
      html = true                          `fsbench compare --html` [true]
      [prompts]  file, count               [tiny: its own; else vbench_prompts.txt of $FSBENCH_DATA]
      [settings] height, width, frames, steps   override the preset
      [speed]    compile, gemm, vae, offload    as the `fsbench run` flags
      [performance.SingleStream] count, time, target_latency_ms   a performance run per schedule
      [performance.Offline]      count, time, target_qps          (no table: no run of that scenario)
      [submission] division, submitter, system, checker
                 package each schedule's run into OUT/submission/<schedule>/ (`fsbench submission`);
                 the accuracy sweep then runs in every scenario of [performance.*]
    """
    from fsbench.harness.run.campaign import Campaign

    plan = plans.load(plan_file)
    if out is not None:
        plan = dataclasses.replace(plan, out=out)
    refuse_foreign(plan.out, "campaign")  # the plan's own `out` as --out is checked, before a dry run says "to run"
    work = Campaign(plan)
    problems = work.packaging()
    if dry_run:
        steps = work.pending()
        for number, (stage, why) in enumerate(steps, start=1):
            click.echo(f"[{number}/{len(steps)}] {stage.title}: {'to run' if why is None else f'skipped, {why}'}")
        division = plan.submission.division if plan.submission is not None else "open"
        if not problems:
            click.echo(f"submission: the runs can be packaged for the {division} division"
                       + ("" if plan.submission is not None else " (add a [submission] table to package them)"))
        for problem in problems:
            click.echo(f"submission: cannot package for the {division} division: {problem}")
    preflight.refuse_unscorable(work.metrics_to_score(), f"campaign {plan_file}")  # before the first video
    if dry_run:
        return
    if plan.submission is not None and problems:
        raise FsbenchError(f"{plan_file}: submission: the runs could not be packaged ({'; '.join(problems)}); "
                           "`fsbench campaign --dry-run` lists every reason")
    with lock.hold(plan.out, kind="campaign"):  # new, empty or a campaign's; one campaign at a time per folder
        logs.attach(plan.out, rundir.CAMPAIGN_LOG, every_run=True)
        work.execute(*commands(click.get_current_context()))
    click.echo(f"results: {plan.out}")
    if plan.html:
        click.echo(f"page:    {work.compare_dir / 'html' / 'index.html'}")
    if plan.submission is not None:
        click.echo(f"submission: {plan.out / 'submission'}")


def commands(ctx: click.Context) -> tuple[Evaluate, Compare, Package]:
    """The stages that are commands of their own (eval, compare, submission), as a campaign calls them."""

    def run_eval(run: Path, reference: Path | None, metrics: tuple[str, ...]) -> None:
        ctx.invoke(evaluate.eval_cmd, run=run, reference=reference, metrics=",".join(metrics))

    def run_compare(runs: list[Path], out: Path, html: Path | None) -> None:
        ctx.invoke(evaluate.compare, runs=tuple(runs), out=out, html_dir=html)

    def run_submission(run: Path, root: Path, asked: plans.Submission, system: str) -> None:
        ctx.invoke(cli_submission.submission, runs=(run,), out=root, division=asked.division,
                   submitter=asked.submitter, system=system, checkout=asked.checker)

    return run_eval, run_compare, run_submission
