"""PSNR, SSIM and LPIPS of a run's frames against the reference (BF16) run, on every 4th frame.

Every schedule starts from the same initial latent, so each video can be compared frame by frame with the BF16
video of the same prompt (the paper's Tables 6 and 7: every fourth frame, against the BF16 video of the same prompt,
averaged over the prompts). The frames compared are the model's own: those a run keeps losslessly in RUN/frames/
(`rundir.kept_frames`); a prompt whose run or reference kept none is compared on the two mp4s instead and counted as
such (the mp4's codec error then sits in its scores). Where both kept frames, the reference's kept frames against
its own mp4 give the codec's floor: how far the mp4 alone is from the model's frames.

Method (the paper does not fix these; our choice): a prompt's PSNR is 10 log10(255^2 / MSE) with the MSE pooled
over all pixels and channels of its compared frames, so one byte-identical frame cannot make it infinite; a prompt
whose compared frames are all identical has no finite PSNR, is counted as identical and left out of the PSNR mean.
SSIM is scikit-image's on uint8 RGB (`data_range=255`, `channel_axis=-1`, its default 7x7 uniform window), LPIPS
the lpips package's AlexNet v0.1; both are the mean over the compared frames. Each summary is the mean over prompts
with a 95 % percentile-bootstrap interval over prompts (`eval.intervals`, seed recorded). Prompts whose videos are
missing or differ in frame count or size are listed as problems and left out of the means, never averaged in.
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

from fsbench import rundir
from fsbench.errors import FsbenchError
from fsbench.eval import intervals, store, weights
from fsbench.eval.runs import Run
from fsbench.eval.video_io import VideoError, read_frames

FRAME_STEP = rundir.KEPT_FRAME_STEP
METRICS = ("psnr", "ssim", "lpips")
CSV_COLUMNS = ["prompt", "status", "source", "frames", "frames_compared", "mse", "psnr", "ssim", "lpips"]
LPIPS_BATCH = 4
METHOD = 2  # per-prompt records of another method (per-frame PSNR means, before kept frames) are computed again
SOURCES = {"frames": "the kept lossless frames", "mp4": "the mp4 files (lossy: the codec's error included)"}


class Mismatch(Exception):
    """The two videos of a prompt cannot be compared frame by frame."""


def psnr(reference: np.ndarray, test: np.ndarray) -> float:
    """PSNR in dB of two uint8 frames; inf for identical frames."""
    with np.errstate(divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(peak_signal_noise_ratio(reference, test, data_range=255))


def mse(reference: np.ndarray, test: np.ndarray) -> float:
    """Mean squared error over every pixel and channel of two uint8 stacks (pooled over their frames)."""
    return float(np.mean((reference.astype(np.float64) - test.astype(np.float64)) ** 2))


def psnr_of_mse(value: float) -> float:
    """PSNR in dB of a pooled MSE of uint8 data; inf for zero (identical frames)."""
    return math.inf if value == 0 else 10 * math.log10(255**2 / value)


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


def compare_frames(reference: np.ndarray, test: np.ndarray, metrics: Iterable[str],
                   lpips_model: Lpips | None = None) -> dict:
    """The prompt's scores of two uint8 stacks (n, H, W, 3) of the same frames; Mismatch when their sizes differ."""
    if reference.shape[1:] != test.shape[1:]:
        raise Mismatch(f"frame size {_size(test)} vs {_size(reference)} in the reference")
    result: dict[str, Any] = {}
    if "psnr" in metrics:
        result["mse"] = mse(reference, test)
        result["psnr"] = psnr_of_mse(result["mse"])
    if "ssim" in metrics:
        result["ssim"] = float(np.mean([ssim(a, b) for a, b in zip(reference, test)]))
    if "lpips" in metrics:
        if lpips_model is None:
            raise ValueError("lpips requested without an Lpips model")
        result["lpips"] = float(np.mean(lpips_model(reference, test)))
    return result


def compare_videos(reference: Path, test: Path, metrics: Iterable[str], lpips_model: Lpips | None = None,
                   step: int = FRAME_STEP) -> dict:
    """Scores over every `step`-th frame of two mp4s; raises Mismatch when the videos differ in shape."""
    ref_frames, ref_total = read_frames(reference, step)
    test_frames, test_total = read_frames(test, step)
    if ref_total != test_total:
        raise Mismatch(f"frame count {test_total} vs {ref_total} in the reference")
    return {"frames": test_total, "frames_compared": len(test_frames),
            **compare_frames(ref_frames, test_frames, metrics, lpips_model)}


def read_kept(path: Path, num_frames: int, step: int = FRAME_STEP) -> np.ndarray:
    """The compared frames (every `step`-th of `num_frames`) from a kept-frames file, which holds either every
    frame or exactly those; Mismatch when it holds neither count."""
    frames, count = read_frames(path)
    compared = len(range(0, num_frames, step))
    if count == num_frames:
        return frames[::step]
    if count == compared:
        return frames
    raise Mismatch(f"{path} holds {count} frames, neither the video's {num_frames} nor its {compared} compared ones")


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


@dataclass(frozen=True)
class _Pair:
    """One prompt's comparison, as a worker process needs it (paths as strings: picklable)."""

    prompt: str
    reference: str
    test: str
    metrics: tuple[str, ...]
    reference_kept: str | None = None  # both kept frames: compare those, and the reference's codec floor
    test_kept: str | None = None
    num_frames: int = 0


def _compare_prompt(pair: _Pair, model: Lpips | None) -> tuple[str, dict]:
    try:
        if pair.reference_kept and pair.test_kept:
            reference = read_kept(Path(pair.reference_kept), pair.num_frames)
            test = read_kept(Path(pair.test_kept), pair.num_frames)
            result = {"source": "frames", "frames": pair.num_frames, "frames_compared": len(test),
                      **compare_frames(reference, test, pair.metrics, model)}
            result["codec_floor"] = _floor(reference, Path(pair.reference), pair.num_frames, pair.metrics, model)
        else:
            result = {"source": "mp4", **compare_videos(Path(pair.reference), Path(pair.test), pair.metrics, model)}
        return pair.prompt, {"status": "ok", **result}
    except (Mismatch, VideoError) as exc:
        return pair.prompt, {"status": str(exc)}


def _floor(kept: np.ndarray, video: Path, num_frames: int, metrics: tuple[str, ...], model: Lpips | None) -> dict:
    """The reference's kept frames against the same frames of its own mp4: the codec's share of any mp4 score."""
    frames, total = read_frames(video, FRAME_STEP)
    if total != num_frames:
        raise Mismatch(f"{video} has {total} frames, its settings {num_frames}")
    return compare_frames(kept, frames, metrics, model)


def _worker(pair: _Pair) -> tuple[str, dict]:
    return _compare_prompt(pair, _worker_lpips)


def evaluate(run: Run, reference: Run, metrics: Iterable[str] = METRICS, workers: int = 1,
             lpips: Callable[[], Lpips] | None = lpips_factory,
             on_prompt: Callable[[str], None] | None = None) -> FidelityResult:
    """Compare every prompt of `run` with `reference`; resumable: finished prompts are read back, not recomputed.

    Writes RUN/eval/fidelity/<prompt>.json per prompt, RUN/eval/fidelity.csv and the `fidelity` section of
    RUN/eval/summary.json, each prompt's record with the reference's codec floor (eval writes only RUN's folder, never
    the reference's). `lpips` builds the LPIPS model in each worker (tests pass a
    random-backbone one).
    """
    metrics, records, not_computed = score(run, reference, run.prompts(), metrics, workers, lpips, on_prompt)
    return _summarize(run, reference, metrics, records, not_computed)


def _num_frames(run: Run) -> int:
    value = run.settings.get("num_frames")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


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
    num_frames = _num_frames(run)
    records: dict[str, dict] = {}
    jobs: list[tuple[_Pair, dict, dict]] = []
    for prompt in prompts:
        test, ref = run.video(prompt), reference.video(prompt)
        if not test.is_file() or not ref.is_file():
            where = "run" if not test.is_file() else "reference"
            records[prompt] = {"status": f"video missing in the {where} ({test if where == 'run' else ref})"}
            continue
        kept = num_frames > 0 and run.kept_frames(prompt).is_file() and reference.kept_frames(prompt).is_file()
        key = {"method": METHOD, "reference": str(reference.path), "video": run.video_sha256(prompt),
               "reference_video": reference.video_sha256(prompt),
               "kept_frames": run.kept_frames_sha256(prompt) if kept else None,
               "reference_kept_frames": reference.kept_frames_sha256(prompt) if kept else None}
        cached = store.read_json(cache_dir / f"{prompt}.json") or {}
        if not all(cached.get(k) == v for k, v in key.items()):
            cached = {}
        todo = tuple(m for m in metrics if m not in cached)
        if cached and (cached.get("status") != "ok" or not todo):
            records[prompt] = cached
            if on_prompt:
                on_prompt(prompt)
            continue
        pair = _Pair(prompt, str(ref), str(test), todo,
                     str(reference.kept_frames(prompt)) if kept else None,
                     str(run.kept_frames(prompt)) if kept else None, num_frames)
        jobs.append((pair, key, cached))

    def finish(prompt: str, outcome: dict, key: dict, base: dict) -> None:
        floor = outcome.get("codec_floor")
        if floor is not None:
            outcome = {**outcome, "codec_floor": {**(base.get("codec_floor") or {}), **floor}}
        record = {**base, **outcome, **key, "prompt": prompt}
        store.write_json(cache_dir / f"{prompt}.json", record)
        records[prompt] = record
        if on_prompt:
            on_prompt(prompt)

    factory = lpips if any("lpips" in job[0].metrics for job in jobs) else None
    if workers <= 1 or len(jobs) <= 1:
        _use_device(device)
        model = factory() if factory else None
        for pair, key, base in jobs:
            finish(*_compare_prompt(pair, model), key, base)
    else:
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=get_context("spawn"),
                                 initializer=_init_worker, initargs=(factory, 1, device)) as pool:
            futures = {pool.submit(_worker, job[0]): job for job in jobs}
            try:
                for future in as_completed(futures):
                    job = futures[future]
                    finish(*future.result(), *job[1:])
            except BaseException:  # Ctrl-C or a failure: the prompts not started are dropped, not waited for
                pool.shutdown(cancel_futures=True)
                raise
    return metrics, records, not_computed


def summary_of(values: list[float]) -> dict:
    """Mean over prompts with its 95 % bootstrap interval (None for fewer than two prompts)."""
    return {"mean": float(np.mean(values)) if values else None, "ci95": intervals.interval(values),
            "prompts": len(values)}


def _means(records: list[dict], metrics: tuple[str, ...]) -> dict:
    """Each metric's mean and interval over `records`; PSNR over the prompts that differ, identical ones counted."""
    means = {}
    for metric in metrics:
        values = [v for r in records if (v := store.number(r.get(metric))) is not None]
        if metric == "psnr":
            finite = [v for v in values if math.isfinite(v)]
            means[metric] = {**summary_of(finite), "identical": len(values) - len(finite)}
        else:
            means[metric] = summary_of(values)
    return means


def _source(rows: list[dict]) -> dict:
    """Where the compared prompts' frames came from: counts per source, and one word for a table cell."""
    counts = {name: sum(r.get("source") == name for r in rows) for name in SOURCES}
    word = "frames" if not counts["mp4"] else "mp4" if not counts["frames"] else "mixed"
    return {"kind": word, **counts}


def _summarize(run: Run, reference: Run, metrics: tuple[str, ...], records: dict[str, dict],
               not_computed: dict) -> FidelityResult:
    rows = []
    prompts = run.prompts()
    for prompt in prompts:
        record = records[prompt]
        rows.append({"prompt": prompt, "status": record.get("status"), "source": record.get("source"),
                     "frames": record.get("frames"), "frames_compared": record.get("frames_compared"),
                     "mse": store.number(record.get("mse")),
                     **{m: store.number(record.get(m)) for m in METRICS}})
    problems = [{"prompt": r["prompt"], "problem": r["status"]} for r in rows if r["status"] != "ok"]
    ok = [r for r in rows if r["status"] == "ok"]
    floors = [floor for p in prompts if records[p].get("status") == "ok"
              and isinstance(floor := records[p].get("codec_floor"), dict)]
    summary = {
        "reference": str(reference.path),
        "reference_schedule": reference.schedule,
        "frame_step": FRAME_STEP,
        "method": METHOD_TEXT,
        "method_version": METHOD,
        "interval": intervals.METHOD,
        "source": _source(ok),
        "prompts_expected": len(rows),
        "prompts_compared": len(ok),
        "metrics": _means(ok, metrics),
        "codec_floor": _means(floors, metrics) if floors else None,
        "problems": problems,
        "not_computed": not_computed,
        "videos_sha256": run.videos_digest(prompts),  # compare shows these scores only for these videos
    }
    store.write_csv(run.eval_dir / "fidelity.csv", rows, CSV_COLUMNS)
    store.update_json(run.eval_dir / "summary.json", "fidelity", summary)
    return FidelityResult(rows, summary, problems, not_computed)


METHOD_TEXT = (f"every {FRAME_STEP}th frame against the same frame of the reference video of the same prompt (the "
               "paper's Tables 6 and 7), read from the frames each run kept losslessly (else from the mp4s, as "
               "counted in source); per prompt PSNR = 10 log10(255^2 / MSE) with the MSE pooled over its compared "
               "frames (prompts with identical frames are counted as identical and left out of the PSNR mean), "
               "SSIM from scikit-image with its 7x7 window on uint8 RGB and LPIPS with AlexNet v0.1, each the mean "
               "over the compared frames; means over prompts with a 95 % percentile-bootstrap interval over prompts")


def describe_mean(metric: str, summary: dict) -> str:
    """A metric's mean for a line of output: with its interval, and for PSNR the identical prompts counted."""
    digits = 2 if metric == "psnr" else 3
    text = f"{metric.upper()} {format_metric(summary.get('mean'), digits) or '-'}"
    if summary.get("ci95"):
        low, high = summary["ci95"]
        text += f" [{low:.{digits}f}, {high:.{digits}f}]"
    if summary.get("identical"):
        text += f" ({summary['identical']} identical)"
    return text


def format_metric(value: float | None, digits: int) -> str:
    """A metric for humans: 'inf' for identical videos, '' when absent."""
    if value is None:
        return ""
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}f}"
