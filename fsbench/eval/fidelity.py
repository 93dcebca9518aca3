"""PSNR, SSIM and LPIPS of a run's videos against the reference (BF16) run, on every 4th frame.

Every schedule starts from the same initial latent, so each video can be compared frame by frame with the BF16
video of the same prompt (the paper's Tables 6 and 7). Per frame: PSNR and SSIM from scikit-image on uint8 RGB
(`data_range=255`, `channel_axis=-1`, default 7x7 window), LPIPS from the lpips package (AlexNet, v0.1). A prompt's
value is the mean over its compared frames, the summary the mean over prompts. Prompts whose videos are missing or
differ in frame count or size are listed as problems and left out of the means, never averaged in.
"""
from __future__ import annotations

import math
import signal
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from fsbench.errors import FsbenchError
from fsbench.eval import store, weights
from fsbench.eval.runs import Run
from fsbench.eval.video_io import VideoError, read_frames

FRAME_STEP = 4
METRICS = ("psnr", "ssim", "lpips")
CSV_COLUMNS = ["prompt", "status", "frames", "frames_compared", "psnr", "ssim", "lpips"]
LPIPS_BATCH = 4


class Mismatch(Exception):
    """The two videos of a prompt cannot be compared frame by frame."""


def psnr(reference: np.ndarray, test: np.ndarray) -> float:
    """PSNR in dB of two uint8 frames; inf for identical frames."""
    with np.errstate(divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(peak_signal_noise_ratio(reference, test, data_range=255))


def ssim(reference: np.ndarray, test: np.ndarray) -> float:
    """Mean SSIM of two uint8 RGB frames (H, W, 3)."""
    return float(structural_similarity(reference, test, data_range=255, channel_axis=-1))


class Lpips:
    """LPIPS distance per frame pair; wraps an `lpips.LPIPS` module (AlexNet by default)."""

    def __init__(self, module=None, device: str | None = None):
        import torch

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if module is None:
            import lpips

            module = lpips.LPIPS(net="alex", version="0.1", verbose=False)
        self.module = module.to(self.device).eval()

    def __call__(self, reference: np.ndarray, test: np.ndarray) -> np.ndarray:
        """Distances for uint8 frame stacks (n, H, W, 3), one per frame."""
        import torch

        out = []
        with torch.no_grad():
            for start in range(0, len(reference), LPIPS_BATCH):
                a = _to_tensor(reference[start:start + LPIPS_BATCH], self.device)
                b = _to_tensor(test[start:start + LPIPS_BATCH], self.device)
                out.append(self.module(a, b).flatten().double().cpu().numpy())
        return np.concatenate(out)


def _to_tensor(frames: np.ndarray, device: str):
    import torch

    return (torch.from_numpy(np.ascontiguousarray(frames)).to(device).permute(0, 3, 1, 2).float() / 127.5 - 1.0)


def compare_videos(reference: Path, test: Path, metrics: Iterable[str], lpips_model: Lpips | None = None,
                   step: int = FRAME_STEP) -> dict:
    """Mean PSNR / SSIM / LPIPS over every `step`-th frame; raises Mismatch when the videos differ in shape."""
    ref_frames, ref_total = read_frames(reference, step)
    test_frames, test_total = read_frames(test, step)
    if ref_total != test_total:
        raise Mismatch(f"frame count {test_total} vs {ref_total} in the reference")
    if ref_frames.shape[1:] != test_frames.shape[1:]:
        raise Mismatch(f"frame size {_size(test_frames)} vs {_size(ref_frames)} in the reference")
    result: dict[str, Any] = {"frames": test_total, "frames_compared": len(test_frames)}
    pairs = list(zip(ref_frames, test_frames))
    if "psnr" in metrics:
        result["psnr"] = float(np.mean([psnr(a, b) for a, b in pairs]))
    if "ssim" in metrics:
        result["ssim"] = float(np.mean([ssim(a, b) for a, b in pairs]))
    if "lpips" in metrics:
        if lpips_model is None:
            raise ValueError("lpips requested without an Lpips model")
        result["lpips"] = float(np.mean(lpips_model(ref_frames, test_frames)))
    return result


def _size(frames: np.ndarray) -> str:
    return f"{frames.shape[2]}x{frames.shape[1]}"


def setting_differences(run: Run, other: Run) -> list[str]:
    """The settings (model included) that shape the frames and differ between two runs, as `key a vs b`."""
    a, b = run.settings, other.settings
    diffs = [f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(set(a) | set(b))
             if _comparable(a.get(k)) != _comparable(b.get(k))]
    if run.manifest.get("model") != other.manifest.get("model"):
        diffs.insert(0, f"model {run.manifest.get('model')!r} vs {other.manifest.get('model')!r}")
    return diffs


def check_same_settings(run: Run, reference: Run) -> None:
    """Refuse a reference generated with other settings: its frames would differ for reasons besides attention."""
    diffs = setting_differences(run, reference)
    if diffs:
        raise FsbenchError(f"reference {reference.path} was generated with other settings ({'; '.join(diffs)}): "
                           "pass a BF16 run made with the same preset, model and settings")


def _comparable(value):
    """A setting as it shapes the frames: the fixed latent by its content hash, not by where it was loaded from."""
    if isinstance(value, dict) and "sha256" in value:
        return value["sha256"]
    return value


@dataclass
class FidelityResult:
    """What `evaluate` found: per-prompt rows, means, and everything that kept a value out of the means."""

    rows: list[dict]
    summary: dict
    problems: list[dict] = field(default_factory=list)
    not_computed: dict = field(default_factory=dict)


def lpips_factory() -> Lpips:
    """The product LPIPS: AlexNet with ImageNet weights from the torch hub cache (never downloaded here)."""
    return Lpips()


_worker_lpips: Lpips | None = None


def _init_worker(factory: Callable[[], Lpips] | None, threads: int, device: str | None = None) -> None:
    """Pool initializer: one thread per process (the pool already uses every core) and one LPIPS model each. Ctrl-C
    reaches the whole process group: the leader handles it and stops the pool, a worker ignores it."""
    global _worker_lpips
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if factory is not None:
        import torch

        torch.set_num_threads(threads)
        _use_device(device)
        _worker_lpips = factory()


def _use_device(device: str | None) -> None:
    """Make `device` (e.g. cuda:1, one GPU's share of `fsbench eval --gpus N`) the one LPIPS's "cuda" means."""
    if device is not None and device.startswith("cuda"):
        import torch

        torch.cuda.set_device(device)


def _compare_prompt(prompt: str, reference: str, test: str, metrics: tuple[str, ...],
                    model: Lpips | None) -> tuple[str, dict]:
    try:
        return prompt, {"status": "ok", **compare_videos(Path(reference), Path(test), metrics, model)}
    except (Mismatch, VideoError) as exc:
        return prompt, {"status": str(exc)}


def _worker(prompt: str, reference: str, test: str, metrics: tuple[str, ...]) -> tuple[str, dict]:
    return _compare_prompt(prompt, reference, test, metrics, _worker_lpips)


def evaluate(run: Run, reference: Run, metrics: Iterable[str] = METRICS, workers: int = 1,
             lpips: Callable[[], Lpips] | None = lpips_factory,
             on_prompt: Callable[[str], None] | None = None) -> FidelityResult:
    """Compare every prompt of `run` with `reference`; resumable: finished prompts are read back, not recomputed.

    Writes RUN/eval/fidelity/<prompt>.json per prompt, RUN/eval/fidelity.csv and the `fidelity` section of
    RUN/eval/summary.json. `lpips` builds the LPIPS model in each worker (tests pass a random-backbone one).
    """
    metrics, records, not_computed = score(run, reference, run.prompts(), metrics, workers, lpips, on_prompt)
    return _summarize(run, reference, metrics, records, not_computed)


def score(run: Run, reference: Run, prompts: Iterable[str], metrics: Iterable[str] = METRICS, workers: int = 1,
          lpips: Callable[[], Lpips] | None = lpips_factory, on_prompt: Callable[[str], None] | None = None,
          device: str | None = None) -> tuple[tuple[str, ...], dict[str, dict], dict]:
    """Compare `prompts` of `run` with `reference` into the per-prompt store, without the summary: several
    processes may each score a share of a run (one per GPU, `device`), then `evaluate` reads every prompt back.

    Returns the metrics computed, the records by prompt and what was not computed (metric -> why)."""
    metrics = tuple(m for m in METRICS if m in set(metrics))
    check_same_settings(run, reference)
    not_computed = {}
    if "lpips" in metrics and lpips is lpips_factory:
        missing = weights.missing(weights.lpips_weights())
        if missing:
            not_computed["lpips"] = weights.describe_missing("LPIPS", missing)
            metrics = tuple(m for m in metrics if m != "lpips")
    cache_dir = run.eval_dir / "fidelity"
    records: dict[str, dict] = {}
    jobs = []
    for prompt in prompts:
        test, ref = run.video(prompt), reference.video(prompt)
        if not test.is_file() or not ref.is_file():
            where = "run" if not test.is_file() else "reference"
            records[prompt] = {"status": f"video missing in the {where} ({test if where == 'run' else ref})"}
            continue
        key = {"reference": str(reference.path), "video": run.video_sha256(prompt),
               "reference_video": reference.video_sha256(prompt)}
        cached = store.read_json(cache_dir / f"{prompt}.json") or {}
        if not all(cached.get(k) == v for k, v in key.items()):
            cached = {}
        todo = tuple(m for m in metrics if m not in cached)
        if cached and (cached.get("status") != "ok" or not todo):
            records[prompt] = cached
            if on_prompt:
                on_prompt(prompt)
            continue
        jobs.append((prompt, str(ref), str(test), todo, key, cached))

    def finish(prompt: str, outcome: dict, key: dict, base: dict) -> None:
        record = {**base, **outcome, **key, "prompt": prompt}
        store.write_json(cache_dir / f"{prompt}.json", record)
        records[prompt] = record
        if on_prompt:
            on_prompt(prompt)

    factory = lpips if any("lpips" in job[3] for job in jobs) else None
    if workers <= 1 or len(jobs) <= 1:
        _use_device(device)
        model = factory() if factory else None
        for prompt, ref_video, test_video, todo, key, base in jobs:
            finish(*_compare_prompt(prompt, ref_video, test_video, todo, model), key, base)
    else:
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=get_context("spawn"),
                                 initializer=_init_worker, initargs=(factory, 1, device)) as pool:
            futures = {pool.submit(_worker, *job[:4]): job for job in jobs}
            try:
                for future in as_completed(futures):
                    job = futures[future]
                    finish(*future.result(), job[4], job[5])
            except BaseException:  # Ctrl-C or a failure: the prompts not started are dropped, not waited for
                pool.shutdown(cancel_futures=True)
                raise
    return metrics, records, not_computed


def _summarize(run: Run, reference: Run, metrics: tuple[str, ...], records: dict[str, dict],
               not_computed: dict) -> FidelityResult:
    rows = []
    prompts = run.prompts()
    for prompt in prompts:
        record = records[prompt]
        rows.append({"prompt": prompt, "status": record.get("status"), "frames": record.get("frames"),
                     "frames_compared": record.get("frames_compared"),
                     **{m: store.number(record.get(m)) for m in METRICS}})
    problems = [{"prompt": r["prompt"], "problem": r["status"]} for r in rows if r["status"] != "ok"]
    ok = [r for r in rows if r["status"] == "ok"]
    means = {}
    for metric in metrics:
        values = [r[metric] for r in ok if r[metric] is not None]
        means[metric] = {"mean": float(np.mean(values)) if values else None, "prompts": len(values)}
    summary = {
        "reference": str(reference.path),
        "reference_schedule": reference.schedule,
        "frame_step": FRAME_STEP,
        "prompts_expected": len(rows),
        "prompts_compared": len(ok),
        "metrics": means,
        "problems": problems,
        "not_computed": not_computed,
        "videos_sha256": run.videos_digest(prompts),  # compare shows these scores only for these videos
    }
    store.write_csv(run.eval_dir / "fidelity.csv", rows, CSV_COLUMNS)
    store.update_json(run.eval_dir / "summary.json", "fidelity", summary)
    return FidelityResult(rows, summary, problems, not_computed)


def format_metric(value: float | None, digits: int) -> str:
    """A metric for humans: 'inf' for identical videos, '' when absent."""
    if value is None:
        return ""
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}f}"
