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
    RUN/capture/<Scenario>-<mode>/{calls.jsonl,summary.json,qkv/*.pt}   with --capture
    RUN/eval/                                           scores written by `fsbench eval`
    RUN/.lock                                           the PID of the job writing the folder (flock)
    RUN/.fsbench/{kind,staging/}                        what kind of folder this is; temporaries of live writes

The manifest's keys (all JSON):

- `model`: tiny | a14b-synthetic | checkpoint path; `preset`: mlperf | paper; `system`; `device`
  ({type, name, dtype, count}); `git_commit`; `created` and `date` (first and latest write, ISO 8601 UTC)
- `settings`: height, width, num_frames, fps, steps, guidance_scale, guidance_scale_2, boundary_ratio,
  flow_shift, seed, negative_prompt, preset, latent_sha256 (of the float32 values)
- `latent`: {file ("latent.pt", relative to RUN), source ("seed 42" or the file read: --latent, or
  $FSBENCH_DATA/fixed_latent.pt for the mlperf preset at 720x1280x81), shape, file_sha256 and git_blob (of the file
  read; null when seeded), official (true for MLPerf's fixed_latent.pt, git blob 7c88cf35...)}
- `schedule`: {name, spec (canonical rule string), by_step (format label of every step)}
- `prompts`: {file (path or "builtin:tiny"), sha256 (of the prompts joined with newlines), count, texts (the
  prompts themselves, which eval and compare use)}
- `versions`: {python, torch, diffusers, transformers, mlcommons-loadgen, fsbench}
- `videos`: "videos" (folder relative to RUN; one `<prompt>-0.mp4` per prompt)
- `results`: {<Scenario>: {<mode>: summary}} with <mode> performance | accuracy. A performance summary
  has validity ("VALID"|"INVALID"), valid (bool), invalid_reasons (list of str), latency_{min,mean,p50,
  p90,p99,max}_ns, early_stopping_latency_ns (SingleStream), samples_per_second, query_count, samples,
  wall_s, overrides ({count, time_s, target_latency_ms, target_qps} given), log_dir (relative to RUN),
  capture {dir, calls} with --capture, attention_kernels ({format: sdpa|emulate|triton|gluon}, what ran) and
  attention_kernel_fallbacks ({format: why "auto" passed over a faster kernel, e.g. Gluon on an old Triton}, when any),
  peak_gpu_memory_bytes (the largest torch.cuda.max_memory_allocated of one video; absent on CPU). An accuracy
  summary has samples, videos_generated, videos_reused, accuracy_log and log_dir (relative to RUN), wall_s.
  Either summary of a run on several processes (`fsbench run --gpus N`) has parallel {processes, device, cfg,
  ulysses, replicas, backend, device_name, launcher, samples_per_replica (Offline)}. Every summary has command
  (the `fsbench ...` command line that wrote it) and speed ({compile, gemm, vae} as given to `fsbench run`, with
  what they did: the run's configuration)
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from fsbench import files
from fsbench.errors import FsbenchError

BENCHMARK = "wan-2.2-t2v-a14b"
MANIFEST = "manifest.json"
LATENT = "latent.pt"
LOG = "fsbench.log"
VIDEOS = "videos"
MADE_WITH = "made_with"
EVAL = "eval"
VIDEO_SUFFIX = "-0.mp4"
LOCK = ".lock"  # held by the one job writing the folder (fsbench.harness.run.lock)
PIXEL_KEYS = ("compile", "gemm", "vae")  # of a summary's speed: the options that shape a video's pixels
SPEED_KEYS = (*PIXEL_KEYS, "offload")  # ... and those that make a configuration (its latency)


MAX_NAME_BYTES = 240  # file systems cap names at 255 bytes; the sidecar's `.json` needs some of the rest
# The folders fsbench writes, each claimed for one kind (`claim`); a run folder's kind is also known by its manifest.
KINDS = {"run": "a run folder", "sweep": "a sweep folder", "compare": "a comparison folder",
         "page": "a comparison page's folder", "submission": "a submission root"}


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


def made_with_dir(run: Path) -> Path:
    return run / MADE_WITH


def eval_dir(run: Path) -> Path:
    return run / EVAL


def capture_dir(run: Path, scenario: str, mode: str) -> Path:
    return run / "capture" / f"{scenario}-{mode}"


def kind_of(folder: Path) -> str | None:
    """What fsbench folder `folder` is: a key of KINDS; None where it is new or empty; "" where it is not
    fsbench's. Folders written before the kind was recorded are known by what they hold."""
    folder = Path(folder)
    if not folder.exists():
        return None
    if not folder.is_dir():
        return ""
    marker = folder / files.OWNED / files.KIND
    if marker.is_file():
        kind = marker.read_text(encoding="utf-8", errors="replace").strip()
        return kind if kind in KINDS else ""
    entries = [e for e in folder.iterdir() if e.name not in (LOCK, files.OWNED)]
    shown = [e for e in entries if not e.name.startswith(".")]
    if not entries:
        return None
    if (folder / MANIFEST).is_file():
        return "run"
    if (folder / "compare.json").is_file() and (folder / "compare.md").is_file():
        return "compare"
    if shown and all((e / MANIFEST).is_file() for e in shown) and len(shown) == len(entries):
        return "sweep"
    if all(e.name in ("open", "closed") or e.name.startswith(".fsbench-staging-") for e in entries) and shown:
        return "submission"
    return ""


def claim(folder: Path, kind: str) -> Path:
    """The rule of every command that writes a folder: `folder` is new, empty, or fsbench's own folder of `kind`,
    and lies inside no run folder (whose files are a run's own). Anything else is refused in one line naming it,
    before any byte is written; a claimed folder records its kind and gets its staging place."""
    folder = Path(folder)
    refuse_foreign(folder, kind)
    staging = files.staging_of(folder)
    try:
        staging.mkdir(parents=True, exist_ok=True)
        if not (folder / files.OWNED / files.KIND).is_file():
            files.atomic_write_text(folder / files.OWNED / files.KIND, f"{kind}\n")
    except IsADirectoryError as exc:
        raise FsbenchError(f"{exc.filename} is a folder where fsbench keeps a file: remove it") from exc
    except OSError as exc:
        raise FsbenchError(f"cannot write to output directory {folder}: {exc.strerror}; pass --out DIR") from exc
    return folder


def refuse_foreign(folder: Path, kind: str) -> None:
    """`claim`'s check alone (nothing written): a one-line FsbenchError unless `folder` may become or be `kind`."""
    found = kind_of(folder)
    if found == "" and folder.exists() and not folder.is_dir():
        raise FsbenchError(f"{folder} is a file, not a folder: pass --out DIR naming a new or empty folder")
    if found == "":
        raise FsbenchError(f"{folder} is a folder fsbench did not write and not empty: fsbench writes only a new "
                           f"folder, an empty one or {KINDS[kind]} of its own; pass --out DIR")
    if found is not None and found != kind:
        raise FsbenchError(f"{folder} is {KINDS[found]}, not {KINDS[kind]}: pass --out DIR naming a new folder")
    for parent in Path(os.path.abspath(folder)).parents:
        if kind_of_parent(parent) == "run":
            raise FsbenchError(f"{folder} lies inside the run folder {parent}, whose files are the run's own: "
                               "pass --out DIR outside it")


def kind_of_parent(folder: Path) -> str | None:
    """The kind of an ancestor folder, read cheaply (its marker or manifest): what `claim` must not write inside."""
    marker = folder / files.OWNED / files.KIND
    try:
        if marker.is_file():
            return marker.read_text(encoding="utf-8", errors="replace").strip()
        return "run" if (folder / MANIFEST).is_file() else None
    except OSError:
        return None


def load_manifest(run: Path | str) -> dict[str, Any]:
    """The run's manifest (keys above); a missing or unreadable one is a one-line error naming the file."""
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
    check_paths(Path(run), manifest)
    return manifest


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
