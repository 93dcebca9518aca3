"""VBench as the MLPerf reference runs it: six dimensions, standard mode, full-info JSON, overall = mean x 100.
A run with none of VBench's prompts is scored in VBench's custom-input mode on the four dimensions it supports,
with an overall over those four (said as such: it is not the benchmark's score).

vbench 0.1.5 pins transformers 4.33 and numpy<2, so it lives in its own environment (scripts/setup_vbench_env.sh)
and runs in a subprocess (eval/vbench_runner.py, JSON in and out). This side stages the run's `<prompt>-0.mp4`
videos, checks the weights before anything starts, aggregates, and for the mlperf preset writes the submission's
accuracy.txt and audit videos.
"""
from __future__ import annotations

import functools
import json
import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fsbench import files, paths
from fsbench.errors import FsbenchError
from fsbench.eval import store, video_io, weights
from fsbench.eval.runs import Run
from fsbench.gpus import child_gpus
from fsbench.paths import CHECKOUT, REPO
from fsbench.rundir import BENCHMARK, VIDEO_SUFFIX

DIMENSIONS = ("subject_consistency", "background_consistency", "motion_smoothness", "dynamic_degree",
              "appearance_style", "scene")
# Of the six, those VBench's custom-input mode scores (its `check_dimension_requires_extra_info` refuses the
# others: they need VBench's own per-prompt information). A run of other prompts is scored on these.
CUSTOM_DIMENSIONS = ("subject_consistency", "background_consistency", "motion_smoothness", "dynamic_degree")
STANDARD, CUSTOM = "vbench_standard", "custom_input"
MLPERF_REFERENCE_SCORE = 70.48
PASS_MARK = 69.7752  # 0.99 x 70.48, the checker's threshold
RUNNER = Path(__file__).resolve().with_name("vbench_runner.py")
# MLPerf's reference pins VBench as a submodule at Vchitect/VBench 07bc8a4b, whose setup.py says this version
PINNED_VERSION = "0.1.5"
PROBE_SECONDS = 300  # `import vbench` loads torch and its models' code: slow on a cold disk, never minutes more


def _environment() -> dict[str, str]:
    """What the VBench process sees: offline, no user site, not this environment's PYTHONPATH."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)
    return env


def vbench_version(python: Path) -> str:
    """The vbench version `python` imports, as the runner would import it; FsbenchError naming the failure (and
    the command that rebuilds the environment) when `import vbench` fails there."""
    code = "import importlib.metadata as m, vbench; print(m.version('vbench'))"
    fix = "rebuild it with scripts/setup_vbench_env.sh, or point FSBENCH_VBENCH_PYTHON at a working one"
    try:
        done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=PROBE_SECONDS,
                              env=_environment(), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FsbenchError(f"{python} cannot run `import vbench` ({type(exc).__name__}): {fix}") from exc
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise FsbenchError(f"`import vbench` fails in {python} ({tail[:160]}): {fix}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "unknown"


def vbench_python() -> Path:
    """The vbench environment's interpreter: FSBENCH_VBENCH_PYTHON, else .venv-vbench of the source checkout fsbench
    runs from (an installed wheel has none); FsbenchError when absent."""
    setting = os.environ.get("FSBENCH_VBENCH_PYTHON")
    if not setting and not CHECKOUT:
        raise FsbenchError("no vbench environment: build one with scripts/setup_vbench_env.sh of the fsbench source "
                           "(about 3 min, 6.7 GB) and set FSBENCH_VBENCH_PYTHON to its bin/python")
    python = Path(setting or REPO / ".venv-vbench" / "bin" / "python")
    if not python.is_file():
        raise FsbenchError(f"vbench environment not found ({python}): run scripts/setup_vbench_env.sh "
                           "(about 3 min, 6.7 GB) or set FSBENCH_VBENCH_PYTHON")
    return python


def data_dir() -> Path:
    """Where VBench_full_info.json and samples_filename_ids.txt live: the data folder (`fsbench.paths.data_dir`)."""
    path = paths.data_dir()
    if not (path / "VBench_full_info.json").is_file():
        raise FsbenchError(f"{path / 'VBench_full_info.json'} not found: set {paths.DATA_ENV} to the dataset folder")
    return path


def dimension_prompts(full_info: list[dict], dimensions: Iterable[str] = DIMENSIONS) -> dict[str, list[str]]:
    """The prompts VBench scores for each dimension, duplicates kept (VBench counts a repeated entry twice)."""
    return {d: [e["prompt_en"] for e in full_info if d in e["dimension"]] for d in dimensions}


def stage_videos(run: Run, prompts: Iterable[str], staging: Path) -> list[str]:
    """Link the run's videos of `prompts` into `staging` under VBench's standard names; return the prompts staged.

    VBench's standard mode lists the folder and takes the first file's suffix for all, so the folder holds exactly
    the `<prompt>-0.mp4` links and nothing else (no temp files, no non-VBench prompts). Every video is decoded first:
    one that does not is refused in one line, before VBench starts.
    """
    present = [p for p in sorted(set(prompts)) if run.video(p).is_file()]
    damaged = []
    for prompt in present:  # VBench would stop on a damaged file halfway through a dimension
        try:
            video_io.read_frames(run.video(prompt), step=1 << 30)
        except video_io.VideoError as exc:
            damaged.append(str(exc))
    if damaged:
        raise FsbenchError(f"{len(damaged)} video(s) of {run.path} do not decode, first: {damaged[0]}")
    files.remove(staging)
    staging.mkdir(parents=True)
    for prompt in present:
        (staging / f"{prompt}{VIDEO_SUFFIX}").symlink_to(run.video(prompt).resolve())
    return present


def overall(scores: dict[str, float | None], dimensions: tuple[str, ...] = DIMENSIONS) -> float | None:
    """MLPerf's vbench_score: the plain mean of the six dimension averages, x 100; None unless all six exist.
    A custom prompt set's overall is the same mean over the dimensions custom-input mode scores."""
    values = [float(v) for d in dimensions if (v := scores.get(d)) is not None]
    if len(values) < len(dimensions):
        return None
    return 100.0 * sum(values) / len(values)


def accuracy_text(score: float) -> str:
    """accuracy.txt as the submission checker parses it (`.*'vbench_score':\\s([\\d.]+).*`, one line at a time).

    `float()` first: a numpy 2 scalar would print as `np.float64(...)` and not match. The `hash=` line is added by
    MLPerf's truncate_accuracy_log.py when the submission is assembled.
    """
    score = round(float(score), 4)
    verdict = "PASS" if score >= PASS_MARK else "FAIL"
    return (f"{{'vbench_score': {score}}}\n"
            f"{verdict}: threshold {PASS_MARK} (99% of the reference {MLPERF_REFERENCE_SCORE})\n")


def audit_videos(data: Path) -> list[tuple[str, str]]:
    """(prompt, idx) pairs from samples_filename_ids.txt: `<prompt>-0.mp4, <idx>.mp4` per line."""
    pairs = []
    for line in (data / "samples_filename_ids.txt").read_text().splitlines():
        if line.strip():
            name, target = line.rsplit(",", 1)
            pairs.append((name.strip()[: -len(VIDEO_SUFFIX)], target.strip().split(".")[0]))
    return pairs


def accuracy_dirs(run: Run) -> list[Path]:
    return sorted(run.path.glob(f"*/{BENCHMARK}/*/accuracy"))


def _copy(source: Path, target: Path) -> None:
    shutil.copyfile(source, target)


def write_submission_files(run: Run, score: float | None, data: Path) -> dict:
    """For the mlperf preset: accuracy.txt (when the score is complete) and accuracy/videos/<idx>.mp4 audit copies."""
    targets = [run.eval_dir / "vbench"] + accuracy_dirs(run)
    written, missing_videos = [], []
    if score is not None:
        for folder in targets:
            store.write_text(folder / "accuracy.txt", accuracy_text(score))
            written.append(str(folder / "accuracy.txt"))
    for folder in targets[1:]:
        for prompt, idx in audit_videos(data):
            source = run.video(prompt)
            if not source.is_file():
                missing_videos.append(str(source))
                continue
            target = folder / "videos" / f"{idx}.mp4"
            target.parent.mkdir(exist_ok=True)
            files.atomic_write(target, functools.partial(_copy, source))
            written.append(str(target))
    return {"written": written, "audit_videos_missing": sorted(set(missing_videos))}


def missing_weights(dimensions: Iterable[str]) -> dict[str, list[weights.WeightFile]]:
    table = weights.vbench_weights()
    found = {d: weights.missing(table[d]) for d in dimensions}
    return {d: files for d, files in found.items() if files}


def _video_key(run: Run, prompts: list[str]) -> list:
    return [[p, run.video_sha256(p)] for p in prompts]


def evaluate(run: Run, dimensions: Iterable[str] = DIMENSIONS, device: str = "auto",
             on_dimension: Callable[[str], None] | None = None, gpus: int = 1) -> dict:
    """Score the run's videos; resumable per dimension. Returns (and stores) the `vbench` summary section.

    Dimensions whose weights are missing are skipped with the exact files listed; the others still run.
    `gpus` > 1 deals the dimensions over that many VBench processes at once, the i-th seeing only GPU i; each
    dimension still scores all its videos in one process, as VBench defines it.
    """
    dimensions = [d for d in DIMENSIONS if d in set(dimensions)]
    data = data_dir()
    full_info_path = data / "VBench_full_info.json"
    full_info = json.loads(full_info_path.read_text())
    known = {e["prompt_en"] for e in full_info}
    mode = STANDARD if any(p in known for p in run.prompts()) else CUSTOM  # VBench's prompts, or none of them
    unsupported = {}
    if mode == CUSTOM:  # prompts VBench does not know: each supported dimension scores every video
        unsupported = {d: f"VBench {d} not computed: the run's prompts are not VBench's, and VBench's custom-input "
                          "mode cannot score it (it needs VBench's own per-prompt information)"
                       for d in dimensions if d not in CUSTOM_DIMENSIONS}
        per_dim = {d: list(run.prompts()) for d in dimensions if d in CUSTOM_DIMENSIONS}
    else:
        per_dim = dimension_prompts(full_info, dimensions)
    expected = sorted({p for prompts in per_dim.values() for p in prompts})
    work = run.eval_dir / "vbench"
    staged = stage_videos(run, expected, work / "videos")
    key = _video_key(run, staged) + ([] if mode == STANDARD else [[CUSTOM]])
    not_computed = {d: weights.describe_missing(f"VBench {d}", files)
                    for d, files in missing_weights([d for d in dimensions if d not in unsupported]).items()}
    not_computed.update(unsupported)
    results: dict[str, dict] = {}
    todo = []
    for dim in dimensions:
        cached = store.read_json(work / f"{dim}.json")
        if dim in not_computed:
            continue
        if cached and cached.get("videos_key") == key:
            results[dim] = cached
            if on_dimension:
                on_dimension(dim)
        elif any(p in staged for p in per_dim[dim]):
            todo.append(dim)
        else:
            not_computed[dim] = f"VBench {dim} not computed: the run has none of its {len(set(per_dim[dim]))} prompts"
    if todo:
        for dim, result in _run_runners(work, full_info_path, todo, device, gpus, mode):
            result["videos_key"] = key
            store.write_json(work / f"{dim}.json", result)
            results[dim] = result
            if on_dimension:
                on_dimension(dim)
    summary = _summarize(run, dimensions, per_dim, staged, results, not_computed, expected, mode)
    store.update_json(run.eval_dir / "summary.json", "vbench", summary)
    return summary


def _summarize(run: Run, dimensions: list[str], per_dim: dict, staged: list[str], results: dict,
               not_computed: dict, expected: list[str], mode: str = STANDARD) -> dict:
    staged_set = set(staged)
    dims = {}
    for dim in DIMENSIONS:
        entry: dict[str, Any] = {"prompts_expected": len(set(per_dim.get(dim, []))),
                 "prompts_scored": len(set(per_dim.get(dim, [])) & staged_set)}
        if dim in results:
            entry["score"] = results[dim]["score"]
        else:
            entry["score"] = None
            entry["not_computed"] = not_computed.get(dim, f"VBench {dim} not requested")
        dims[dim] = entry
    in_overall = DIMENSIONS if mode == STANDARD else CUSTOM_DIMENSIONS
    score = overall({d: dims[d]["score"] for d in DIMENSIONS}, in_overall)
    summary = {
        "mode": mode,
        "dimensions": dims,
        "dimensions_in_overall": list(in_overall),
        "overall": score,
        "prompts_expected": len(expected),
        "prompts_scored": len(staged),
        "missing_videos": sorted(set(expected) - staged_set),
        "not_computed": {d: dims[d]["not_computed"] for d in dimensions if "not_computed" in dims[d]},
        "weights": {d: [str(w.path) for w in weights.vbench_weights()[d]] for d in dimensions},
        "videos_sha256": run.videos_digest(run.prompts()),  # compare shows these scores only for these videos
    }
    if run.preset == "mlperf" and mode == STANDARD:  # a custom prompt set's overall is not the benchmark's score
        final = score if not summary["missing_videos"] else None  # a score of every video, or none
        files = write_submission_files(run, final, data_dir())
        summary["accuracy"] = {"vbench_score": None if final is None else round(final, 4),
                               "pass_mark": PASS_MARK, "passed": final is not None and final >= PASS_MARK, **files}
    return summary


def _run_runners(work: Path, full_info: Path, dimensions: list[str], device: str, gpus: int, mode: str = STANDARD):
    """One runner for all dimensions, or with `gpus` > 1 the dimensions dealt over that many runners at once (the
    i-th seeing only GPU i, checked before any starts); yield (dimension, result) as each one finishes, in this
    thread."""
    if gpus <= 1 or len(dimensions) <= 1:
        yield from _run_runner(work, full_info, dimensions, device, mode=mode)
        return
    finished: queue.Queue = queue.Queue()

    def run_share(gpu: int, share: list[str]) -> None:
        try:
            for item in _run_runner(work, full_info, share, device, gpu=(gpu, visible[gpu]), mode=mode):
                finished.put(item)
            finished.put(None)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            finished.put(exc)

    shares = [dimensions[i::gpus] for i in range(min(gpus, len(dimensions)))]
    visible = child_gpus(len(shares))
    threads = [threading.Thread(target=run_share, args=(gpu, share), daemon=True) for gpu, share in enumerate(shares)]
    for thread in threads:
        thread.start()
    running, error = len(threads), None
    while running:
        item = finished.get()
        if item is None or isinstance(item, BaseException):
            running -= 1
            error = error or item
        else:
            yield item
    if error is not None:
        raise error


def _run_runner(work: Path, full_info: Path, dimensions: list[str], device: str,
                gpu: tuple[int, str] | None = None, mode: str = STANDARD):
    """Run eval/vbench_runner.py in the vbench environment; yield (dimension, result) as each one finishes.
    With `gpu` (its index and its CUDA_VISIBLE_DEVICES value), the runner sees only that GPU and keeps its own job
    file and log."""
    python = vbench_python()
    tag = "" if gpu is None else f"-gpu{gpu[0]}"
    job = {"videos_path": str(work / "videos"), "full_info": str(full_info), "output_path": str(work / "raw"),
           "dimensions": dimensions, "device": device, "results_dir": str(work / "raw"), "mode": mode}
    store.write_json(work / f"job{tag}.json", job)
    log_path = work / f"vbench{tag}.log"
    env = _environment()
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu[1]
    with open(files.guard_file(log_path), "w") as log:
        process = subprocess.Popen([str(python), str(RUNNER), str(work / f"job{tag}.json")], stdout=subprocess.PIPE,
                                   stderr=log, text=True, env=env, cwd=work)
        for line in process.stdout or ():
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "dimension" in message and "result" in message:
                result = store.read_json(Path(message["result"]))
                yield message["dimension"], result
        code = process.wait()
    if code != 0:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise FsbenchError(f"VBench failed (exit {code}): {tail[0][:300]} -- full log: {log_path}")

