"""The compare page's video files: a browser-playable copy of every run's video and a difference video of every
non-reference video against the reference's, named by what they are made of, made on every core.

The work is ffmpeg's (a decode and at most two encodes per video), one process per call. Each prompt is a job for a
pool of fresh interpreters: forking ffmpeg from the CLI's own process (torch loaded, hundreds of MB) costs more
than ffmpeg's work on a small video, and threads there would share that cost rather than spread it.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from fsbench import files
from fsbench.eval import report
from fsbench.eval.video_io import VideoError, read_video, write_video
from fsbench.folders import record, recorded

DIFF_GAIN = 8
VIDEO_DIR = "videos"


def page_videos(sources: dict[str, list[Path]], reference: int | None, out: Path, fps: int, link: bool,
                progress: bool) -> dict[str, list[dict]]:
    """For each prompt (`sources`: one video path per column, present or not), one cell per column: the page's
    video URL and its difference video's URL against column `reference` (or why none).

    Files are named by what they are made of (the source video's bytes, the reference's, the frame rate), so a
    second compare into the same folder makes nothing it already has, cells with identical videos share one file,
    and files no cell uses any longer are removed: only those the folder's record names (`folders.record`), each
    recorded before the workers may write it, so a file fsbench did not write is never taken for an old page video."""
    folder = files.guard(out / VIDEO_DIR)
    folder.mkdir(exist_ok=True)
    owned = recorded(out) | _names(sources, reference, fps)
    record(out, owned)
    columns = max((len(paths) for paths in sources.values()), default=0)
    workers = max(1, min(os.cpu_count() or 1, len(sources)))
    with tqdm(total=len(sources) * columns, desc="page videos", unit="video", disable=None if progress else True,
              leave=False) as bar:
        if workers == 1:  # one prompt or one core: a pool's fresh interpreter would cost more than it spreads
            grid = {}
            for prompt, paths in sources.items():
                grid[prompt] = prompt_cells(paths, reference, out, fps, link)
                bar.update(columns)
        else:
            grid = _in_pool(sources, reference, out, fps, link, workers, lambda: bar.update(columns))
    used = {Path(c).name for cells in grid.values() for cell in cells for c in (cell["video"], cell["diff"])
            if c and c.startswith(VIDEO_DIR)}
    for stale in sorted(folder.glob("*.mp4")):
        name = f"{VIDEO_DIR}/{stale.name}"
        if stale.name not in used and name in owned:
            files.remove(stale)
            owned.discard(name)
    record(out, owned)
    return grid


def _names(sources: dict[str, list[Path]], reference: int | None, fps: int) -> set[str]:
    """Every file `prompt_cells` may write for `sources`: each video's copy and its difference video against the
    reference (hashing only; the decodes and encodes are the workers')."""
    digests: dict[Path, str] = {}
    names = set()
    for paths in sources.values():
        keys = [_Video(p, fps, digests).key if p.is_file() else None for p in paths]
        ref = keys[reference] if reference is not None else None
        for column, key in enumerate(keys):
            if key is None:
                continue
            names.add(f"{VIDEO_DIR}/{key}.mp4")
            if ref is not None and column != reference:
                names.add(f"{VIDEO_DIR}/{key}-{ref}-x{DIFF_GAIN}-diff.mp4")
    return names


def _in_pool(sources: dict[str, list[Path]], reference: int | None, out: Path, fps: int, link: bool, workers: int,
             done: Callable[[], None]) -> dict[str, list[dict]]:
    """`prompt_cells` of every prompt on `workers` fresh interpreters, `done` called as each prompt ends."""
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_worker)
    try:
        jobs = {prompt: pool.submit(prompt_cells, paths, reference, out, fps, link)
                for prompt, paths in sources.items()}
        for finished in as_completed(jobs.values()):
            finished.result()
            done()
    finally:
        pool.shutdown(cancel_futures=True)  # after an error or Ctrl-C no prompt not yet begun starts
    return {prompt: job.result() for prompt, job in jobs.items()}


def _worker() -> None:
    """Ctrl-C reaches the whole process group: the parent stops the pool, so a worker ends without a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def prompt_cells(paths: list[Path], reference: int | None, out: Path, fps: int, link: bool) -> list[dict]:
    """One prompt's cells, with its page copies and difference videos written. The reference gets no difference
    video: against itself it is black by definition, and the page shows the reference there instead."""
    digests: dict[Path, str] = {}
    ref_path = paths[reference] if reference is not None else None
    ref = _Video(ref_path, fps, digests) if ref_path and ref_path.is_file() else None
    cells = []
    for column, source in enumerate(paths):
        video = ref if column == reference else _Video(source, fps, digests) if source.is_file() else None
        copy = f"{VIDEO_DIR}/{video.key}.mp4" if video else ""
        if video is None or not video.decodes(out / copy):
            why = "the video does not decode: regenerate it" if source.is_file() else "no video in this run"
            cells.append({"video": None, "diff": None, "missing": why})
            continue
        cell: dict[str, str | None]
        if link:
            cell = {"video": report.relative_to(source, out), "diff": None}
        else:
            cell = {"video": copy, "diff": None}
            if not (out / copy).is_file():
                video.write_copy(out / copy)
        name = f"{VIDEO_DIR}/{video.key}-{ref.key}-x{DIFF_GAIN}-diff.mp4" if ref else ""
        if column == reference:
            cell["no_diff"] = "the reference itself"
        elif ref is None or not ref.decodes(out / f"{VIDEO_DIR}/{ref.key}.mp4"):
            cell["no_diff"] = "no reference video for this prompt"
        elif not (out / name).is_file() and ref.decoded().shape[1:] != video.decoded().shape[1:]:
            height, width = video.decoded().shape[1:3]
            cell["no_diff"] = f"frame size differs from the reference ({width}x{height})"
        else:
            cell["diff"] = name
            if not (out / name).is_file():
                frames, ref_frames = video.decoded(), ref.decoded()
                n = min(len(frames), len(ref_frames))
                diff = np.abs(frames[:n].astype(np.int16) - ref_frames[:n].astype(np.int16))
                write_video(out / name, _even(np.clip(diff * DIFF_GAIN, 0, 255).astype(np.uint8)), fps=fps)
        cells.append(cell)
    return cells


class _Video:
    """A run's video as the page uses it: a key from its bytes and the page's frame rate, frames read once."""

    def __init__(self, path: Path, fps: int, digests: dict[Path, str]):
        self.path = path
        self.fps = fps
        if path not in digests:
            digest = hashlib.sha256(f"fps={fps};".encode())
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            digests[path] = digest.hexdigest()[:20]
        self.key = digests[path]
        self._frames: np.ndarray | None = None
        self._meta: dict[str, Any] = {}
        self._undecodable = False

    def decodes(self, copy: Path) -> bool:
        """Whether the video decodes; a page copy made from these bytes before says so without decoding again."""
        if self._frames is None and not self._undecodable and not copy.is_file():
            try:
                self._frames, self._meta = read_video(self.path)
            except VideoError:
                self._undecodable = True
        return not self._undecodable

    def decoded(self) -> np.ndarray:
        """Every frame (read once); call after `decodes` said yes."""
        if self._frames is None:
            self._frames, self._meta = read_video(self.path)
        return self._frames

    def write_copy(self, path: Path) -> None:
        """The page's copy: the file's own bytes where a browser plays them as they are (H.264 yuv420p, even sides,
        the page's frame rate, as the harness writes), else a re-encode that is."""
        frames = self.decoded()
        playable = (self._meta.get("codec") == "h264" and str(self._meta.get("pix_fmt")).split("(")[0] == "yuv420p"
                    and frames.shape[1] % 2 == 0 and frames.shape[2] % 2 == 0 and self._meta.get("fps") == self.fps)
        if playable:
            files.atomic_write(path, lambda tmp: shutil.copyfile(self.path, tmp))
        else:
            write_video(path, _even(frames), fps=self.fps)


def _even(frames: np.ndarray) -> np.ndarray:
    """Pad to even height and width (yuv420p halves both) by repeating the last row / column."""
    pad_h, pad_w = frames.shape[1] % 2, frames.shape[2] % 2
    return np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge") if pad_h or pad_w else frames
