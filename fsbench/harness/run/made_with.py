"""What each video of a run folder was made with, so a resumed run reuses only what it would make itself.

For every video `RUN/videos/<prompt>-0.mp4` a sidecar `RUN/made_with/<prompt>-0.mp4.json` records the digest of
every setting that shapes its pixels (model, generation settings and latent, schedule, kernel choice, GEMM and VAE
precision), the sha256 of the file and the kernels that ran. A video is reused only when its sidecar's digest is
the run's and the file still has that sha256 (it decoded to the expected frames and size when it was written);
anything else (a truncated file, another --vae, no sidecar) is generated again.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fsbench import files, rundir
from fsbench.kernels.registry import AUTO


def made_with(model: str, settings: Mapping[str, Any], latent_sha256: str, schedule_spec: str, impl: str,
              speed: Mapping[str, Any] | None) -> str:
    """The digest of the settings that shape a video's pixels; a bf16 kernel other than SDPA (`--bf16-impl`) joins
    them only where chosen, so the digests of runs made before the option existed stay as they were."""
    chosen = speed or {}
    pixels = {k: chosen.get(k) for k in rundir.PIXEL_KEYS}
    if chosen.get("bf16_impl", AUTO) != AUTO:
        pixels["bf16_impl"] = chosen["bf16_impl"]
    record = {"model": model, "settings": dict(settings), "latent": latent_sha256, "schedule": schedule_spec,
              "impl": impl, "speed": pixels}
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def sidecar(video: Path) -> Path:
    """Outside videos/, which keeps MLPerf's layout (one mp4 per prompt) for the tools that list it."""
    return rundir.made_with_dir(video.parent.parent) / f"{video.name}.json"


def probe(video: Path) -> tuple[int, int, int]:
    """(frames, height, width) of `video` as decoded; ValueError naming the file when it does not decode."""
    import imageio.v3 as iio

    frames, shape = 0, (0, 0)
    try:
        for frame in iio.imiter(video, plugin="FFMPEG"):
            frames, shape = frames + 1, frame.shape[:2]
    except Exception as exc:  # noqa: BLE001 - ffmpeg reports a damaged file in many ways
        raise ValueError(f"{video} does not decode ({type(exc).__name__}: {str(exc)[:120]})") from exc
    if not frames:
        raise ValueError(f"{video} holds no video frames")
    return frames, int(shape[0]), int(shape[1])


def encode(frames: Any, path: Path, fps: int, expected: tuple[int, int, int]) -> None:
    """Encode (F, H, W, 3) frames in [0, 1] as diffusers' `export_to_video` does (the same bytes), with ffmpeg's
    own messages off, and check the file decodes to `expected` (frames, height, width): an encoder that failed
    (a full disk) leaves a file that does not, and it never gets the final name."""
    import imageio
    import numpy as np

    with imageio.get_writer(path, format="FFMPEG", mode="I", fps=fps, quality=5.0, bitrate=None,
                            macro_block_size=16, ffmpeg_log_level="quiet") as out:
        for frame in frames:
            out.append_data((frame * 255).astype(np.uint8))
    found = probe(path)
    if found != expected:
        raise RuntimeError(f"{path} decodes to {found} (frames, height, width), not {expected}")


def keep(frames: Any, path: Path, fps: int) -> None:
    """Keep (F, H, W, 3) frames in [0, 1] losslessly, quantized as the mp4's are (`encode`): the model's own
    frames, which fidelity compares where the mp4 would add the codec's error."""
    import numpy as np

    from fsbench.eval.video_io import write_video

    write_video(path, (np.asarray(frames) * 255).astype(np.uint8), fps=fps, lossless=True)


def record(video: Path, digest: str, found: tuple[int, int, int], kernels: Mapping[str, str]) -> None:
    """Write the sidecar of a video just written and checked (`encode`): `found` is its (frames, height, width)."""
    files.atomic_write_text(sidecar(video), json.dumps(
        {"made_with": digest, "sha256": rundir.file_sha256(video), "frames": found[0], "height": found[1],
         "width": found[2], "attention_kernels": dict(sorted(kernels.items()))}, indent=1) + "\n")


def reusable(video: Path, digest: str) -> bool:
    """Whether `video` exists, was made with the settings `digest` and is byte for byte what was then written."""
    return damaged(video, digest) is None


def damaged(video: Path, digest: str | None = None) -> str | None:
    """Why `video` is not the file its sidecar records (missing, no sidecar, made with settings other than `digest`,
    other bytes than the sha256 written with it), or None when it is intact."""
    if not video.is_file():
        return "missing"
    info = _read(video)
    if not info:
        return f"no readable record in {rundir.MADE_WITH}/"
    if digest is not None and info.get("made_with") != digest:
        return "made with other settings than the run recorded"
    if info.get("sha256") != rundir.file_sha256(video):
        return "its bytes differ from the sha256 recorded when it was written"
    return None


def kernels_of(videos: Iterable[Path]) -> dict[str, str]:
    """Format -> kernel over the sidecars of `videos` (what made them, reused ones included)."""
    found: dict[str, str] = {}
    for video in videos:
        kernels = (_read(video) or {}).get("attention_kernels")
        if isinstance(kernels, dict):
            found.update({str(k): str(v) for k, v in kernels.items()})
    return dict(sorted(found.items()))


def _read(video: Path) -> dict[str, Any] | None:
    try:
        info = json.loads(sidecar(video).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None
