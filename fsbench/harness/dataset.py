"""Prompts (the QSL: index = line) and the one fixed initial latent every prompt starts from."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from fsbench.errors import FsbenchError
from fsbench.harness.presets import Settings
from fsbench.harness.tiny import TINY_PROMPTS
from fsbench.rundir import video_name

PROMPTS_FILE = "vbench_prompts.txt"
MAX_NAME_BYTES = 240  # file systems cap names at 255 bytes; `-0.mp4` and a temp suffix need the rest


@dataclass(frozen=True)
class Prompts:
    """The prompts of one run; `source` is the file (or `builtin:tiny`) the manifest records."""

    texts: tuple[str, ...]
    source: str
    sha256: str

    def as_dict(self) -> dict:
        """The manifest's record, the texts included: eval scores these, never a file that may have changed."""
        return {"file": self.source, "sha256": self.sha256, "count": len(self.texts), "texts": list(self.texts)}


def load_prompts(path: Path | None, model: str, limit: int | None = None) -> Prompts:
    """`path`, else the tiny model's own prompts, else `$FSBENCH_DATA/vbench_prompts.txt`; first `limit` lines."""
    if path is None and model == "tiny":
        texts, source = list(TINY_PROMPTS), "builtin:tiny"
    else:
        if path is None:
            data = os.environ.get("FSBENCH_DATA")
            if not data:
                raise FsbenchError("no prompts: pass --prompts FILE or set FSBENCH_DATA to a folder holding "
                                   f"{PROMPTS_FILE} (scripts/fetch_dataset.py downloads it)")
            path = Path(data) / PROMPTS_FILE
        if not path.is_file():
            raise FsbenchError(f"prompts file {path} not found: pass --prompts FILE or run scripts/fetch_dataset.py")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise FsbenchError(f"cannot read prompts file {path}: {exc}; one UTF-8 prompt per line expected") from exc
        texts = [line.strip() for line in lines if line.strip()]
        source = str(path)
        if not texts:
            raise FsbenchError(f"prompts file {path} has no prompts (one prompt per line expected)")
    if limit is not None:
        if limit < 1:
            raise FsbenchError(f"--num-prompts must be at least 1, got {limit}")
        texts = texts[:limit]
    for i, text in enumerate(texts):
        if "/" in text or "\0" in text or text.startswith(".") or len(video_name(text).encode()) > MAX_NAME_BYTES:
            raise FsbenchError(f"prompt {i} cannot name a video file (contains '/', starts with '.' or is too long): "
                               f"{text[:60]!r}")
    digest = hashlib.sha256("".join(t + "\n" for t in texts).encode()).hexdigest()
    return Prompts(tuple(texts), source, digest)


def fixed_latent(settings: Settings, path: Path | None = None) -> torch.Tensor:
    """The MLPerf `fixed_latent.pt` from `path`, or float32 N(0,1) from `settings.seed` (CPU generator,
    so every machine gets the same tensor) in the shape (1, 16, F_lat, H/8, W/8)."""
    shape = settings.latent_shape
    if path is None:
        try:
            return torch.randn(shape, generator=torch.Generator("cpu").manual_seed(settings.seed),
                               dtype=torch.float32)
        except (RuntimeError, MemoryError) as exc:
            raise FsbenchError(f"a {settings.height}x{settings.width}x{settings.num_frames} video's latent "
                               f"{shape} does not fit in memory here: choose a smaller --height/--width/--frames"
                               ) from exc
    try:
        latent = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a garbage file fails in the unpickler in many ways
        raise FsbenchError(f"cannot read latent file {path} ({type(exc).__name__}): pass a torch.save'd "
                           "float tensor such as MLPerf's fixed_latent.pt") from exc
    if not isinstance(latent, torch.Tensor) or tuple(latent.shape) != shape:
        got = tuple(latent.shape) if isinstance(latent, torch.Tensor) else type(latent).__name__
        raise FsbenchError(f"latent file {path} holds {got}, but {settings.height}x{settings.width}x"
                           f"{settings.num_frames} needs a tensor of shape {shape}")
    return latent.to(torch.float32).contiguous()


def latent_sha256(latent: torch.Tensor) -> str:
    """Hash of the float32 values (not of a torch.save file, whose bytes depend on the torch version)."""
    return hashlib.sha256(latent.to(torch.float32).contiguous().numpy().tobytes()).hexdigest()
