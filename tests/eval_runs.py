"""Test helper (not collected): build run folders as the harness writes them, with real mp4 files."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fsbench.eval.video_io import write_video

SETTINGS = {"height": 32, "width": 48, "num_frames": 9, "fps": 16, "steps": 2, "guidance_scale": 4.0,
            "guidance_scale_2": 3.0, "boundary_ratio": 0.875, "flow_shift": 12.0, "negative_prompt": "bad"}


def constant_video(values, height: int = 32, width: int = 48) -> np.ndarray:
    """One uniform grey frame per value."""
    return np.stack([np.full((height, width, 3), v, dtype=np.uint8) for v in values])


def make_run(root: Path, schedule: str, videos: dict[str, np.ndarray], settings: dict | None = None,
             results: dict | None = None, preset: str = "paper", prompts_file: Path | None = None) -> Path:
    """A run folder: manifest.json plus lossless `<prompt>-0.mp4` videos."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "videos").mkdir(exist_ok=True)
    for prompt, frames in videos.items():
        write_video(root / "videos" / f"{prompt}-0.mp4", frames, fps=16, lossless=True)
    manifest = {
        "settings": settings or SETTINGS,
        "preset": preset,
        "schedule": {"name": schedule, "spec": schedule},
        "model": "tiny",
        "system": "test_system",
        "results": results or {},
    }
    if prompts_file is not None:
        count = len([line for line in prompts_file.read_text().splitlines() if line.strip()])
        manifest["prompts"] = {"file": str(prompts_file), "sha256": "", "count": count}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root
