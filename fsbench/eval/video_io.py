"""Reading (and atomically writing) mp4 frames with imageio-ffmpeg.

Frames are streamed: `imageio.get_reader` reports `len() == sys.maxsize` for ffmpeg streams, so
`list(reader)` raises MemoryError, and a 720p 81-frame video is 224 MB decoded; we keep only the frames asked for.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import imageio
import imageio.v3 as iio
import imageio_ffmpeg
import numpy as np

from fsbench import files

_TAG = re.compile(r"^\[[^\]]*@ 0x[0-9a-f]+\]\s*")
MAX_REASON = 160


class VideoError(ValueError):
    """A video file that does not decode (truncated, empty, not an mp4); the message names the file."""


def _frames(path: str | os.PathLike):
    """The decoded frames of `path`; a file ffmpeg cannot read raises VideoError naming it."""
    try:
        yield from iio.imiter(path, plugin="FFMPEG")
    except Exception as exc:  # noqa: BLE001 - ffmpeg reports a damaged file in many ways
        raise VideoError(f"{path} does not decode ({_reason(exc)}): regenerate it (a resumed run does)") from exc


def _reason(exc: Exception) -> str:
    """The line of a decoding failure that says why: ffmpeg's last line (its banner and build flags come first),
    without the `[in#0 @ 0x...]` tag of the component that wrote it."""
    lines = [_TAG.sub("", line).strip() for line in str(exc).splitlines()]
    last = next((line for line in reversed(lines) if line), "")
    return f"{type(exc).__name__}: {last[:MAX_REASON]}" if last else type(exc).__name__


def read_frames(path: str | os.PathLike, step: int = 1) -> tuple[np.ndarray, int]:
    """Every `step`-th frame (0, step, 2*step, ...) as uint8 (n, H, W, 3), and the total frame count."""
    kept = []
    total = 0
    for index, frame in enumerate(_frames(path)):
        if index % step == 0:
            kept.append(frame)
        total = index + 1
    if not kept:
        raise VideoError(f"{path} holds no video frames: regenerate it (a resumed run does)")
    return np.stack(kept), total


def read_video(path: str | os.PathLike) -> tuple[np.ndarray, dict[str, Any]]:
    """Every frame as uint8 (n, H, W, 3) and what ffmpeg says of the stream (codec, pix_fmt, size, fps), from one
    decode; VideoError names a file that does not decode or holds no frames."""
    try:
        reader = imageio_ffmpeg.read_frames(str(path))
        meta = next(reader)
        width, height = meta["size"]
        frames = [np.frombuffer(f, np.uint8).reshape(height, width, 3) for f in reader]
    except Exception as exc:  # noqa: BLE001 - ffmpeg reports a damaged file in many ways
        raise VideoError(f"{path} does not decode ({type(exc).__name__}: {' '.join(str(exc).split())[:120]}): "
                         "regenerate it (a resumed run does)") from exc
    if not frames:
        raise VideoError(f"{path} holds no video frames: regenerate it (a resumed run does)")
    return np.stack(frames), meta


def read_frame(path: str | os.PathLike, index: int) -> np.ndarray:
    """Frame `index` (0-based) as uint8 (H, W, 3); IndexError names the frame count when the video is shorter."""
    count = 0
    for count, frame in enumerate(_frames(path), start=1):
        if count - 1 == index:
            return frame
    raise IndexError(f"{path} has {count} frames; frame {index} does not exist")


def write_video(path: str | os.PathLike, frames: np.ndarray, fps: int = 16, lossless: bool = False) -> Path:
    """Write uint8 (n, H, W, 3) frames as h264 mp4, whole or not at all (`fsbench.files.atomic_write`).

    `lossless` uses libx264rgb at crf 0, which decodes back bit-exactly (plain yuv420p h264 does not).
    """
    options: dict[str, Any]
    if lossless:
        options = {"codec": "libx264rgb", "pixelformat": "bgr24", "output_params": ["-crf", "0"]}
    else:
        options = {"codec": "libx264", "quality": 8}
    return files.atomic_write(path, lambda tmp: imageio.mimwrite(
        tmp, np.asarray(frames, dtype=np.uint8), fps=fps, macro_block_size=1, ffmpeg_log_level="error", **options))
