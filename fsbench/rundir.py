"""The run folder: its layout, the benchmark's name and the manifest's schema, in one place for the harness (which
writes runs) and eval (which reads them).

Layout of a run (what `fsbench eval RUN` and `fsbench compare RUN...` take)::

    RUN/manifest.json
    RUN/latent.pt                                       the fixed initial latent (float32)
    RUN/fsbench.log                                     every command that wrote the run: its line, warnings, timings
    RUN/<system>/wan-2.2-t2v-a14b/<Scenario>/performance/run_1/mlperf_log_{summary.txt,detail.txt,accuracy.json}
    RUN/<system>/wan-2.2-t2v-a14b/<Scenario>/accuracy/mlperf_log_{summary.txt,detail.txt,accuracy.json}
    RUN/<system>/wan-2.2-t2v-a14b/<Scenario>/TEST04/performance/run_1/mlperf_log_*   with --audit TEST04
    RUN/videos/<prompt>-0.mp4                           fps from the settings (16)
    RUN/made_with/<prompt>-0.mp4.json                   the settings digest and sha256 of each video
    RUN/frames/<prompt>-0.mp4                           the compared frames kept losslessly (libx264rgb, crf 0):
                                                        every KEPT_FRAME_STEP-th frame, or every frame on request
    RUN/capture/<Scenario>-<mode>/{calls.jsonl,summary.json,qkv/*.pt}   with --capture
    RUN/eval/                                           scores written by `fsbench eval`
    RUN/.lock                                           the PID of the job writing the folder (flock)
    RUN/.fsbench/{kind,staging/}                        what kind of folder this is; temporaries of live writes

The manifest's schema is the `Manifest` TypedDict below (version `SCHEMA`, recorded as its `schema` key): the harness
writes it, eval and the packager read it through `load_manifest`.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, TypedDict

from fsbench.errors import FsbenchError

BENCHMARK = "wan-2.2-t2v-a14b"
MANIFEST = "manifest.json"
LATENT = "latent.pt"
LOG = "fsbench.log"
VIDEOS = "videos"
MADE_WITH = "made_with"
EVAL = "eval"
VIDEO_SUFFIX = "-0.mp4"
FRAMES = "frames"
KEPT_FRAME_STEP = 4  # the frames fidelity compares (the paper's every fourth frame); a run keeps these losslessly
LOCK = ".lock"  # held by the one job writing the folder (fsbench.harness.run.lock)
CAMPAIGN_LOG = "campaign.log"  # in a campaign's folder: every line of the campaign, its runs' included
CAMPAIGN_SUBMISSION = "submission"  # in a campaign's folder: <schedule>/ (a submission root) and <schedule>.json
PIXEL_KEYS = ("compile", "gemm", "vae")  # of a summary's speed: the options that shape a video's pixels
SPEED_KEYS = (*PIXEL_KEYS, "offload")  # ... and those that make a configuration (its latency)
EVAL_METRICS = ("psnr", "ssim", "lpips", "vbench")  # what `fsbench eval` writes into RUN/eval/

SCHEMA = 2  # the manifest's version; 1: the manifests written before the version was recorded (read as they are)


class Device(TypedDict):
    type: str  # cuda | cpu
    name: str
    count: int
    dtype: str


class Latent(TypedDict, total=False):
    file: str  # "latent.pt", relative to RUN
    source: str  # "seed 42", or the file read (--latent, or the data folder's fixed_latent.pt)
    shape: list[int]
    file_sha256: str | None  # of the file read; None when seeded
    git_blob: str | None
    official: bool  # MLPerf's fixed_latent.pt


class ScheduleRecord(TypedDict):
    name: str
    spec: str  # the canonical rule string
    by_step: list[str]  # the format label of every step


class PromptsRecord(TypedDict, total=False):
    file: str  # the file read, or "builtin:tiny"
    sha256: str  # of the prompts, each followed by a newline
    count: int
    texts: list[str]  # the prompts themselves, which eval and compare use (each names its video)


class Summary(TypedDict, total=False):
    """One scenario and mode's result. Performance: validity ... wall_s, from LoadGen's detail log; accuracy: samples
    and the video counts. Both: the command that wrote it, the run's configuration (speed) and where its logs are."""

    validity: str  # VALID | INVALID
    valid: bool
    invalid_reasons: list[str]
    latency_min_ns: int
    latency_mean_ns: int
    latency_p50_ns: int
    latency_p90_ns: int
    latency_p99_ns: int
    latency_max_ns: int
    early_stopping_latency_ns: int  # SingleStream
    samples_per_second: float
    query_count: int
    query_latencies_ns: list[int]  # SingleStream performance: each query's, as the SUT timed it (the intervals)
    samples: int
    wall_s: float
    overrides: dict[str, float | int]  # the LoadGen overrides given: count, time_s, target_latency_ms, target_qps
    log_dir: str  # relative to RUN
    capture: dict[str, Any]  # {dir (relative to RUN), calls} with --capture
    attention_kernels: dict[str, str]  # format -> sdpa | emulate | triton | gluon, what ran
    attention_kernel_fallbacks: dict[str, str]  # format -> why "auto" passed over a faster kernel
    peak_gpu_memory_bytes: int  # the largest of one video; absent on CPU
    videos_generated: int
    videos_reused: int
    reuse: bool  # whether the accuracy pass might keep finished videos: `fsbench run --reuse`, every sweep
    made_with: str  # the digest each video's made_with sidecar must carry
    accuracy_log: str  # relative to RUN
    parallel: dict[str, Any]  # processes, device, cfg, ulysses, replicas, backend, ... with --gpus N
    speed: dict[str, Any]  # compile, gemm, vae, offload as given, with what they did: the configuration
    profile: dict[str, Any]  # with --profile
    warm_up: dict[str, Any]  # with --warm-up
    command: str  # the `fsbench ...` command line that wrote it


class Manifest(TypedDict, total=False):
    schema: int  # SCHEMA; absent in version 1
    model: str  # tiny | a14b-synthetic | a checkpoint path
    preset: str  # mlperf | paper
    system: str  # a folder name of the LoadGen logs
    device: Device
    settings: dict[str, Any]  # height ... negative_prompt, preset, latent_sha256 (of the float32 values)
    latent: Latent
    schedule: ScheduleRecord
    prompts: PromptsRecord
    versions: dict[str, str | None]  # python, torch, diffusers, transformers, mlcommons-loadgen, fsbench
    videos: str  # "videos", relative to RUN
    git_commit: str | None
    created: str  # first write, ISO 8601 UTC
    date: str  # latest write
    results: dict[str, dict[str, Summary]]  # scenario -> performance | accuracy | TEST04 -> summary


MAX_NAME_BYTES = 240  # file systems cap names at 255 bytes; the sidecar's `.json` needs some of the rest


def video_name(prompt: str) -> str:
    """The file name of `prompt`'s video, as MLPerf's accuracy script and VBench expect it."""
    return f"{prompt}{VIDEO_SUFFIX}"


def name_problem(text: str) -> str | None:
    """Why `text` cannot be one file or folder name inside a folder (None when it can): a record or a prompt that
    holds a path could make a reader or writer leave its folder."""
    if not text:
        return "it is empty"
    if "/" in text:
        return "it holds a '/'"
    if any(c in text for c in "\0\n\r"):
        return "it holds a NUL or line break"
    if text.startswith("."):
        return "it starts with '.'"
    if len(video_name(text).encode()) > MAX_NAME_BYTES:
        return f"it is longer than {MAX_NAME_BYTES} bytes as a file name"
    return None


def inside(folder: Path, relative: str, field: str) -> Path:
    """`folder / relative`, refused in one line naming the record's `field` unless it stays inside `folder`."""
    if not isinstance(relative, str) or not relative or any(c in relative for c in "\0\n\r") or \
            len(relative) > 1024:
        _refuse(folder, field, relative, "is not a path inside the run folder")
    target = Path(os.path.realpath(folder / relative))
    if not target.is_relative_to(os.path.realpath(folder)):
        _refuse(folder, field, relative, f"points outside {folder}; a record never names a file elsewhere")
    return target


def loadgen_dir(run: Path, system: str, scenario: str, mode: str, audit: str | None = None) -> Path:
    """Where LoadGen writes its logs for `scenario` (SingleStream|Offline) and `mode` (performance|accuracy);
    a compliance audit (TEST04) run keeps them under <Scenario>/<audit>/performance/run_1."""
    base = run / system / BENCHMARK / scenario
    if audit:
        base = base / audit
    return base / "performance" / "run_1" if mode == "performance" else base / "accuracy"


def videos_dir(run: Path) -> Path:
    return run / VIDEOS


def frames_dir(run: Path) -> Path:
    """Outside videos/, which keeps MLPerf's layout (one mp4 per prompt) for VBench and the accuracy log."""
    return run / FRAMES


def kept_frames(run: Path, prompt: str) -> Path:
    return frames_dir(run) / video_name(prompt)


def made_with_dir(run: Path) -> Path:
    return run / MADE_WITH


def eval_dir(run: Path) -> Path:
    return run / EVAL


def capture_dir(run: Path, scenario: str, mode: str) -> Path:
    return run / "capture" / f"{scenario}-{mode}"


def load_manifest(run: Path | str) -> Manifest:
    """The run's manifest; a missing, unreadable or unsafe one (`check_paths`), or one of a newer schema than this
    fsbench reads, is a one-line error naming the file. A manifest from before the schema was versioned (no
    `schema` key) has the same keys and is read as it is."""
    path = Path(run) / MANIFEST
    if not path.is_file():
        raise FsbenchError(f"{run} is not a run folder (no {MANIFEST}): pass a folder written by `fsbench run` or "
                           "`fsbench sweep`")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FsbenchError(f"{path} is not valid JSON ({exc}): rerun the run or fix the file") from exc
    if not isinstance(manifest, dict):
        raise FsbenchError(f"{path} is not a manifest (a JSON object): rerun the run or fix the file")
    version = manifest.get("schema", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise FsbenchError(f"{path}: schema {str(version)[:20]!r} is not a manifest version (a whole number from 1): "
                           "rerun the run or fix the file")
    if version > SCHEMA:
        raise FsbenchError(f"{path} has manifest schema {version}, written by a newer fsbench; this one reads up to "
                           f"{SCHEMA}: upgrade fsbench to read it")
    check_paths(Path(run), manifest)
    typed: Manifest = manifest  # type: ignore[assignment]  # its keys checked above where a reader relies on them
    return typed


def check_paths(run: Path, manifest: dict[str, Any]) -> None:
    """Refuse, in one line naming the field, a manifest whose records would name a file outside `run`: the prompts
    (each names its video), the system (a folder of the LoadGen logs) and every relative path it records. Run
    folders travel between people; what one holds must never make a reader or writer leave it."""
    prompts = manifest.get("prompts")
    texts = prompts.get("texts") if isinstance(prompts, dict) else None
    for i, text in enumerate(texts if isinstance(texts, list) else []):
        problem = name_problem(text) if isinstance(text, str) else "it is not a string"
        if problem:
            _refuse(run, f"prompts.texts[{i}]", text, f"cannot name a video inside the run ({problem})")
    system = manifest.get("system")
    if system is not None:
        problem = name_problem(system) if isinstance(system, str) else "it is not a string"
        if problem:
            _refuse(run, "system", system, f"cannot name a folder inside the run ({problem})")
    fields: list[tuple[str, Any]] = [("videos", manifest.get("videos"))]
    latent = manifest.get("latent")
    if isinstance(latent, dict):
        fields.append(("latent.file", latent.get("file")))
    results = manifest.get("results")
    for scenario, modes in (results.items() if isinstance(results, dict) else ()):
        for mode, summary in (modes.items() if isinstance(modes, dict) else ()):
            if isinstance(summary, dict):
                capture = summary.get("capture")
                fields += [(f"results.{scenario}.{mode}.log_dir", summary.get("log_dir")),
                           (f"results.{scenario}.{mode}.accuracy_log", summary.get("accuracy_log")),
                           (f"results.{scenario}.{mode}.capture.dir",
                            capture.get("dir") if isinstance(capture, dict) else None)]
    for field, value in fields:
        if value is not None:
            inside(run, value, field)


def _refuse(run: Path, field: str, value: Any, why: str) -> None:
    raise FsbenchError(f"{run / MANIFEST}: {field} {str(value)[:60]!r} {why}: regenerate the run or restore the "
                       "file")


def file_sha256(path: Path | str) -> str:
    """The sha256 of a file's bytes, read in blocks (videos and logs run to gigabytes): what a video's record, a
    cached score and MLPerf's truncated accuracy log each key to."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
