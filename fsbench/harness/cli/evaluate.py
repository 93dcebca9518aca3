"""`fsbench eval` (fidelity against BF16 and VBench, written into RUN/eval/) and `fsbench compare` (tables, plots)."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

import click

from fsbench.errors import FsbenchError
from fsbench.harness.cli import params
from fsbench.harness.run import lock as runlock, logs, progress
from fsbench.rundir import EVAL_METRICS

ALL_METRICS = EVAL_METRICS
RUN_DIR = click.Path(exists=True, file_okay=False, path_type=Path)
MAX_LISTED = 10


def _parse_metrics(text: str) -> list[str]:
    metrics = [m.strip().lower() for m in text.split(",") if m.strip()]
    unknown = sorted(set(metrics) - set(ALL_METRICS))
    if unknown or not metrics:
        raise FsbenchError(f"unknown metric(s) {', '.join(unknown) or '(none)'}: choose from {','.join(ALL_METRICS)}")
    return metrics


def _default_workers() -> int:
    """Every core, capped: each worker holds its own LPIPS model (and CUDA context on a GPU machine)."""
    return max(1, min(os.cpu_count() or 1, 32))


def _warn(text: str) -> None:
    click.echo(f"fsbench: warning: {text}", err=True)


@click.command("eval")
@click.argument("run", type=RUN_DIR)
@click.option("--reference", type=RUN_DIR, help="The BF16 run of the same prompts and settings (for PSNR/SSIM/LPIPS).")
@click.option("--metrics", default=",".join(ALL_METRICS), show_default=True, help="Comma-separated subset.")
@click.option("--workers", type=params.PROCESSES, default=None,
              help="Processes for PSNR/SSIM/LPIPS [default: all cores, at most 32].")
@click.option("--gpus", type=params.PROCESSES,
              help="Score PSNR/SSIM/LPIPS on N processes, one per GPU, each a share of the prompts, and deal "
                   "VBench's dimensions over the N GPUs [default: 1, or torchrun's WORLD_SIZE].")
def eval_cmd(run: Path, reference: Path | None, metrics: str, workers: int | None, gpus: int | None) -> None:
    """Score RUN's videos against the BF16 run and with VBench; results go to RUN/eval/ (reruns resume)."""
    from fsbench.eval import weights
    from fsbench.eval.runs import Run
    from fsbench.harness.parallel import scoring

    chosen = _parse_metrics(metrics)
    ranks = scoring.processes(gpus)
    fidelity_metrics = [m for m in chosen if m != "vbench"]
    run_folder = Run.open(run)
    incomplete: list[str] = []
    if fidelity_metrics and reference is None:
        raise FsbenchError("PSNR, SSIM and LPIPS need --reference BF16_RUN (or pass --metrics vbench)")
    if fidelity_metrics and reference is not None and reference.resolve() == run_folder.path.resolve():
        raise FsbenchError(f"--reference {reference} is RUN itself: its videos match themselves, which says nothing; "
                           "pass the BF16 run")
    # RUN/eval/ has one writer job, never while a run writes the videos: rank 0 holds the lock for every rank
    with runlock.hold(run_folder.path) if scoring.leads() else contextlib.nullcontext():
        if reference is not None and fidelity_metrics and ranks > 1:
            scoring.score_fidelity(run, reference, fidelity_metrics, ranks)
        if not scoring.leads():
            return  # a torchrun rank other than 0: its share is in RUN/eval/, rank 0 summarizes and runs VBench
        if reference is not None and fidelity_metrics:
            incomplete += _fidelity(run_folder, Run.open(reference), fidelity_metrics, workers or _default_workers())
        if "vbench" in chosen:
            incomplete += _vbench(run_folder, scoring.local_processes(ranks))
    click.echo(f"results: {run_folder.eval_dir}")
    if any("weights missing" in item for item in incomplete):
        _warn(weights.FETCH_HINT)
    if incomplete:
        raise FsbenchError(f"evaluation incomplete ({'; '.join(incomplete)}; details above): fix and rerun, "
                           "finished prompts are kept")


def _fidelity(run, reference, metrics: list[str], workers: int) -> list[str]:
    """PSNR / SSIM / LPIPS with a progress bar; returns what kept the result from being complete."""
    from fsbench.eval import fidelity

    with progress.bar(len(run.prompts()), f"fidelity [{run.path.name}]", "prompt") as bar:
        result = fidelity.evaluate(run, reference, metrics, workers, on_prompt=lambda _: bar.update())
    for problem in result.problems[:MAX_LISTED]:
        _warn(f"not compared: {problem['prompt']!r}: {problem['problem']}")
    if len(result.problems) > MAX_LISTED:
        _warn(f"... and {len(result.problems) - MAX_LISTED} more prompts not compared (RUN/eval/summary.json)")
    for message in result.not_computed.values():
        _warn(message)
    means = result.summary["metrics"]
    shown = "  ".join(fidelity.describe_mean(m, means[m]) for m in metrics if m in means)
    source = result.summary["source"]
    read = "" if source["kind"] == "frames" else f", {source['mp4']} scored on the lossy mp4s (no kept frames)"
    click.echo(f"fidelity vs {reference.path} (every {fidelity.FRAME_STEP}th frame, "
               f"{result.summary['prompts_compared']} of {result.summary['prompts_expected']} prompts{read}): {shown}")
    incomplete = [f"{len(result.problems)} prompt(s) not compared"] if result.problems else []
    return incomplete + [f"{m} not computed (weights missing)" for m in result.not_computed]


def _vbench(run, gpus: int) -> list[str]:
    """VBench with a progress bar over the dimensions that can run (dealt over `gpus` GPUs); returns what kept it
    from being complete."""
    from fsbench.eval import vbench_adapter

    runnable = len(vbench_adapter.DIMENSIONS) - len(vbench_adapter.missing_weights(vbench_adapter.DIMENSIONS))
    with progress.bar(runnable, f"vbench [{run.path.name}]", "dimension") as bar:
        summary = vbench_adapter.evaluate(run, on_dimension=lambda _: bar.update(), gpus=gpus)
    for message in summary["not_computed"].values():
        _warn(message)
    dims = "  ".join(f"{d} {100 * v['score']:.2f}" for d, v in summary["dimensions"].items() if v["score"] is not None)
    overall = summary["overall"]
    mode = ("" if summary.get("mode") != vbench_adapter.CUSTOM else
            f", custom prompts: custom-input mode, overall of {len(summary['dimensions_in_overall'])} dimensions")
    click.echo(f"VBench ({summary['prompts_scored']} of {summary['prompts_expected']} prompts{mode}): {dims}  "
               f"overall {'-' if overall is None else f'{overall:.2f}'}")
    accuracy = summary.get("accuracy")
    if accuracy and accuracy["vbench_score"] is not None:
        verdict = "PASS" if accuracy["passed"] else "FAIL"
        click.echo(f"accuracy.txt: 'vbench_score': {accuracy['vbench_score']} {verdict} "
                   f"(pass mark {accuracy['pass_mark']})")
    if accuracy and accuracy["audit_videos_missing"]:
        _warn(f"audit videos missing: {', '.join(accuracy['audit_videos_missing'])}")
    incomplete = ([f"{len(summary['missing_videos'])} VBench prompt(s) without a video"]
                  if summary["missing_videos"] else [])
    no_weights = [d for d, why in summary["not_computed"].items() if "weights missing" in why]
    if no_weights:
        incomplete.append(f"VBench {', '.join(no_weights)} not computed (weights missing)")
    scored = summary.get("dimensions_in_overall") or vbench_adapter.DIMENSIONS  # the others: not in this mode
    return incomplete + [f"VBench {d} not computed" for d in summary["not_computed"]
                         if d not in no_weights and d in scored]


def _refuse_repeats(runs: tuple[Path, ...]) -> None:
    """One run folder named twice (under any spelling) would be a column compared with itself."""
    seen: dict[Path, Path] = {}
    for run in runs:
        first = seen.setdefault(run.resolve(), run)
        if first is not run:
            also = "" if os.path.normpath(first) == os.path.normpath(run) else f" (as {first} and {run})"
            raise FsbenchError(f"run {first} is given twice{also}: a run compared with itself says nothing; name "
                               "each run once")


@click.command()
@click.argument("runs", nargs=-1, required=True, type=RUN_DIR)
@click.option("--out", type=params.OutPath(kind="compare", file_okay=False), default=Path("results/runs/compare"),
              show_default=True, help="Folder for compare.{md,csv,json}, speedup.png and frames.png.")
@click.option("--frame", type=params.NON_NEGATIVE_INT, default=None,
              help="Frame for the grid [default: 40, or the middle of shorter videos].")
@click.option("--prompts", multiple=True,
              help="A prompt for the frame grid (repeat for more) [default: the paper's two].")
@click.option("--html", "html_dir", type=params.OutPath(kind="page", file_okay=False),
              help="Also write a page to open from disk: HTML_DIR/index.html with the table, plots and all videos "
                   "side by side, playing in sync.")
@click.option("--link", is_flag=True,
              help="With --html: refer to the runs' own videos instead of copying them (the page then works only "
                   "beside the runs).")
def compare(runs: tuple[Path, ...], out: Path, frame: int | None, prompts: tuple[str, ...], html_dir: Path | None,
            link: bool) -> None:
    """One table (as the paper's Tables 6/7), a speedup plot and a frame grid for RUNS; with --html, a page."""
    from fsbench.eval import comparison

    if link and html_dir is None:
        raise FsbenchError("--link only applies to the page: pass --html DIR too")
    _refuse_repeats(runs)
    if html_dir is not None:  # checked before the table is written
        page, table = Path(os.path.abspath(html_dir)), Path(os.path.abspath(out))
        if page == table or page in table.parents:
            raise FsbenchError(f"--html {html_dir} {'is' if page == table else 'holds'} --out {out}: the page needs a "
                               f"folder of its own, such as {out / 'html'}")
    paths = comparison.compare(list(runs), out, frame=frame, prompts=list(prompts))
    click.echo(paths["md"].read_text())
    for kind in ("md", "csv", "json", "speedup"):
        click.echo(f"wrote {paths[kind]}")
    if paths["frames"] is None:
        click.echo("frames.png not drawn: no prompt has a video in every run", err=True)
    else:
        click.echo(f"wrote {paths['frames']}")
    if html_dir is not None:
        from fsbench.eval import compare_page

        click.echo(f"wrote {compare_page.write_page(list(runs), html_dir, link=link, progress=not logs.quiet())}")
