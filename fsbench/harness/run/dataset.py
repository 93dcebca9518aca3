"""Prompts (the QSL: index = line) and the one fixed initial latent every prompt starts from."""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fsbench import userfiles
from fsbench.errors import FsbenchError
from fsbench.harness.model.synthetic import TINY_PROMPTS
from fsbench.harness.run.presets import Settings
from fsbench.paths import DATA_ENV, data_dir
from fsbench.rundir import name_problem

PROMPTS_FILE = "vbench_prompts.txt"
# MLPerf's initial latent: text_to_video/wan-2.2-t2v-a14b/data/fixed_latent.pt of mlcommons/inference at
# b66003e10e2db4b8c36a448b0545ec90fcc6e9e9, known by its git blob id. The `mlperf` preset starts every video from it.
LATENT_FILE = "fixed_latent.pt"
LATENT_GIT_BLOB = "7c88cf35aa26a98e81a432a8cea22ba5f6b8ef04"
LATENT_SHAPE = (1, 16, 21, 90, 160)
LATENT_PRESET = "mlperf"


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
    """`path`, else the tiny model's own prompts, else vbench_prompts.txt of the data folder (`paths.data_dir`);
    first `limit` lines."""
    if path is None and model == "tiny":
        texts, source = list(TINY_PROMPTS), "builtin:tiny"
    else:
        path = path or data_dir() / PROMPTS_FILE
        if path.is_dir():
            raise FsbenchError(f"prompts file {path} is a folder: pass a file of one prompt per line")
        if not path.exists():
            raise FsbenchError(f"prompts file {path} not found: pass --prompts FILE, or run scripts/fetch_dataset.py "
                               f"(or set {DATA_ENV} to a folder holding {PROMPTS_FILE})")
        try:
            lines = userfiles.read_text(path, "prompts file").splitlines()
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
    first: dict[str, int] = {}
    for i, text in enumerate(texts):
        if text in first:
            raise FsbenchError(f"prompt {i} repeats prompt {first[text]} ({text[:60]!r}): each prompt names one "
                               "video, so a prompts file lists each once")
        first[text] = i
        problem = name_problem(text)
        if problem:
            raise FsbenchError(f"prompt {i} cannot name a video file ({problem}): {text[:60]!r}")
    digest = hashlib.sha256("".join(t + "\n" for t in texts).encode()).hexdigest()
    return Prompts(tuple(texts), source, digest)


def git_blob_id(data: bytes) -> str:
    """The id git gives a file of these bytes (how the MLPerf repository names its fixed_latent.pt)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class Latent:
    """The initial latent of a run and where it came from: a file (with its sha256 and git blob id) or a seed."""

    tensor: torch.Tensor
    source: str
    file_sha256: str | None = None
    git_blob: str | None = None

    @property
    def official(self) -> bool:
        """True for MLPerf's own fixed_latent.pt, the only latent a closed-division result may use."""
        return self.git_blob == LATENT_GIT_BLOB

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "shape": list(self.tensor.shape), "file_sha256": self.file_sha256,
                "git_blob": self.git_blob, "official": self.official}


def default_latent_file(settings: Settings) -> Path | None:
    """fixed_latent.pt of the data folder (`paths.data_dir`) for the `mlperf` preset at MLPerf's video size, else
    None (seeded)."""
    if settings.preset != LATENT_PRESET or settings.latent_shape != LATENT_SHAPE:
        return None
    return data_dir() / LATENT_FILE


def load_latent(settings: Settings, path: Path | None = None) -> Latent:
    """The latent from `path`, else MLPerf's file where the preset asks for it, else N(0,1) from the seed. A
    missing MLPerf file is said in one warning line and the seeded latent is recorded as such."""
    if path is None:
        official = default_latent_file(settings)
        if official is not None and official.is_file():
            path = official
        elif official is not None:
            logging.getLogger("fsbench").warning(
                "no MLPerf %s at %s: starting from N(0,1) of seed %d instead (a closed submission refuses this run); "
                "fetch it with scripts/fetch_dataset.py", LATENT_FILE, official, settings.seed)
    if path is None:
        return Latent(fixed_latent(settings), f"seed {settings.seed}")
    data = Path(path).read_bytes() if Path(path).is_file() else b""
    return Latent(fixed_latent(settings, path), str(path), hashlib.sha256(data).hexdigest(), git_blob_id(data))


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
