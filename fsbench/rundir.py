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

The manifest's keys (all JSON):

- `model`: tiny | a14b-synthetic | checkpoint path; `preset`: mlperf | paper; `system`; `device`
  ({type, name, dtype, count}); `git_commit`; `created` and `date` (first and latest write, ISO 8601 UTC)
- `settings`: height, width, num_frames, fps, steps, guidance_scale, guidance_scale_2, boundary_ratio,
  flow_shift, seed, negative_prompt, preset, latent_sha256 (of the float32 values)
- `latent`: {file ("latent.pt", relative to RUN), source ("seed 42" or the file read: --latent, or
  the data folder's fixed_latent.pt for the mlperf preset at 720x1280x81), shape, file_sha256 and git_blob (of the file
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
from pathlib import Path
from typing import Any

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


def video_name(prompt: str) -> str:
    """The file name of `prompt`'s video, as MLPerf's accuracy script and VBench expect it."""
    return f"{prompt}{VIDEO_SUFFIX}"


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
    return manifest


def file_sha256(path: Path | str) -> str:
    """The sha256 of a file's bytes, read in blocks (videos and logs run to gigabytes): what a video's record, a
    cached score and MLPerf's truncated accuracy log each key to."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
