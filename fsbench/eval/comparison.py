"""`fsbench compare`: check that the runs compare, then write the tables (`eval.report`) and the figures
(`eval.figures`) under one folder."""
from __future__ import annotations

from pathlib import Path

from fsbench.errors import FsbenchError
from fsbench.eval import fidelity
from fsbench.eval.figures import default_frame, default_prompts, frame_grid, grid_frames, plot_speedup
from fsbench.eval.report import build_rows, write_tables
from fsbench.eval.runs import Run
from fsbench.folders import claim


def compare(run_paths: list[Path], out: Path, frame: int | None = None, prompts: list[str] | None = None) -> dict:
    """Write compare.{md,csv,json}, speedup.png and frames.png under `out`; return their paths (frames None where
    no prompt has a video in every run and none was asked for: the records of queries kept without their videos
    still give the latency and energy columns). Everything is read and checked first, so a comparison that fails
    writes nothing."""
    runs = [Run.open(p) for p in run_paths]
    check_comparable(runs)
    rows = build_rows(runs)
    chosen_frame = default_frame(runs) if frame is None else frame
    recorded = all(isinstance((run.manifest.get("prompts") or {}).get("texts"), list) for run in runs)
    unknown = [p for p in prompts or [] if not any(p in run.prompts() for run in runs)] if recorded else []
    if unknown:  # runs that record their prompts know them all; older ones may lack a prompt's video only
        raise FsbenchError(f"--prompts {unknown[0][:60]!r} is not a prompt of any run compared: pass one of "
                           f"{', '.join(repr(p[:40]) for p in runs[0].prompts()[:3])}, ...")
    chosen_prompts = list(prompts) if prompts else default_prompts(runs)
    images = grid_frames(runs, chosen_prompts, chosen_frame) if chosen_prompts or prompts else None
    claim(out, "compare")
    paths: dict[str, Path | None] = {**write_tables(rows, out)}
    paths["speedup"] = plot_speedup(rows, out / "speedup.png")
    paths["frames"] = (None if images is None else
                       frame_grid(runs, chosen_prompts, chosen_frame, out / "frames.png", images))
    return paths


def check_comparable(runs: list[Run]) -> None:
    """Refuse runs generated with different settings: speedups and scores across them would compare the
    settings, not the attention schedules."""
    for run in runs[1:]:
        diffs = fidelity.setting_differences(runs[0], run)
        if diffs:
            raise FsbenchError(f"{run.path} and {runs[0].path} were generated with different settings "
                               f"({'; '.join(diffs[:3])}): compare runs of one model, preset and settings")
