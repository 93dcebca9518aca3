"""`fsbench tune`: search for the fastest precision schedule whose videos keep a fidelity budget."""
from __future__ import annotations

from pathlib import Path

import click
import torch

from fsbench.errors import FsbenchError
from fsbench.harness.cli import params
from fsbench.harness.model import pipeline
from fsbench.harness.tune import budget, search
from fsbench.kernels import registry


@click.command()
@click.option("--model", default="tiny", show_default=True,
              help="tiny | a14b-synthetic | a Wan2.2-T2V-A14B-Diffusers folder or cached HF repo id.")
@click.option("--prompts", "prompts_file", type=click.Path(path_type=Path),
              help="One prompt per line: the first --calibration ones calibrate, the next --validation ones "
                   "validate [default: tiny's own prompts, else $FSBENCH_DATA/vbench_prompts.txt].")
@click.option("--calibration", type=params.int_range(1, 1000), default=2, show_default=True,
              help="Calibration prompts (one BF16 pass captures their self-attention calls).")
@click.option("--validation", type=params.int_range(1, 1000), default=2, show_default=True,
              help="Held-out validation prompts every candidate is generated and scored on.")
@click.option("--budget", "budgets", multiple=True, required=True,
              help="METRIC>=X or METRIC<=X against the BF16 videos (psnr, ssim, lpips); repeatable, all must hold.")
@click.option("--formats", default="mxfp8,mxfp6,mxfp4", show_default=True,
              help="Candidate formats besides BF16, comma-separated.")
@click.option("--granularity", default="step", show_default=True,
              help="What shares one format: step, layer or step,layer.")
@click.option("--candidates", type=params.int_range(1, 64), default=4, show_default=True,
              help="Schedules of the front to validate (spread along it), besides every single-format one.")
@click.option("--costs", "costs_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Per-call latency of each format from `fsbench kernels bench --json` at this model's shape "
                   "[default: a quick bench here].")
@click.option("--profile", "profile_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="RUN/profile.json of `fsbench run --profile` on this model and shape: the rest of a query (all but "
                   "self-attention) added to every predicted latency [default: predictions cover self-attention "
                   "only, which orders schedules alike].")
@click.option("--out", type=params.OutPath(kind="tune", file_okay=False), required=True,
              help="Tune folder: tune.json, report.md, front.png, chosen.toml and one run per candidate; a second "
                   "tune into it resumes.")
@params.preset_option
@click.option("--height", type=params.int_range(16, params.MAX_SIDE), help="Override the preset's height.")
@click.option("--width", type=params.int_range(16, params.MAX_SIDE), help="Override the preset's width.")
@click.option("--frames", "num_frames", type=params.int_range(1, params.MAX_FRAMES),
              help="Override the preset's frame count (4k+1).")
@click.option("--steps", type=params.int_range(1, params.MAX_STEPS), help="Override the preset's denoising steps.")
@click.option("--impl", type=click.Choice(registry.RUN_CHOICES), default=registry.AUTO, show_default=True,
              help="Kernel for the MX formats, in calibration and validation alike.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True)
def tune(model: str, prompts_file: Path | None, calibration: int, validation: int, budgets: tuple[str, ...],
         formats: str, granularity: str, candidates: int, costs_file: Path | None, profile_file: Path | None,
         out: Path, preset: str,
         height: int | None, width: int | None, num_frames: int | None, steps: int | None, impl: str,
         device: str) -> None:
    """Find the fastest precision schedule whose videos keep every --budget against BF16, and write it as
    OUT/chosen.toml for `fsbench run --schedule`."""
    from fsbench.harness.tune import tuner  # scores with eval (scikit-image): loaded when a tune runs, as eval is

    where = pipeline.default_device() if device == "auto" else torch.device(device)
    if where.type == "cuda" and not torch.cuda.is_available():
        raise FsbenchError("--device cuda: no CUDA device is available here")
    req = tuner.Request(model=model, preset=preset, prompts_file=prompts_file, calibration=calibration,
                        validation=validation, budgets=budget.parse(budgets), formats=tuner.parse_formats(formats),
                        granularity=search.parse_granularity(granularity), candidates=candidates, out=out,
                        costs_file=costs_file, profile_file=profile_file, impl=impl, device=where,
                        overrides={"height": height, "width": width, "num_frames": num_frames, "steps": steps})
    manifest = tuner.run(req, click.echo)
    click.echo((out / "report.md").read_text(encoding="utf-8"))
    click.echo(f"results: {out}")
    if manifest["chosen"] is None:
        raise FsbenchError(manifest["verdict"])
