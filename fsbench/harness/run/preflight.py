"""`fsbench doctor`: what this machine can run, found by probing the real things (imports, the GPU, files), and for
each missing piece the command that fixes it.

A check is needed by some modes: `run` (a LoadGen run of the model), `eval` (VBench and LPIPS scores), `submission`
(a closed-division package). A check needed by no mode (the Gluon kernel, cuDNN's FP8 attention) only informs.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fsbench import __version__
from fsbench.errors import FsbenchError
from fsbench.paths import data_dir

MODES = ("run", "eval", "submission")
FETCH_DATA = ("python scripts/fetch_dataset.py on a connected machine, then copy the folder it wrote to the one named "
              "here (or anywhere, and export FSBENCH_DATA=DIR)")


@dataclass(frozen=True)
class Check:
    """One probed piece: what was found, and where it is missing, the command that fixes it."""

    name: str
    ok: bool
    found: str
    fix: str = ""
    needed_by: tuple[str, ...] = ()


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpu(model: str) -> list[Check]:
    import torch

    needs = ("run",) if model != "tiny" else ()
    checks = [Check("torch", True, f"{torch.__version__} (CUDA {torch.version.cuda or 'none: a CPU build'})")]
    if not torch.cuda.is_available():
        return checks + [Check("GPU", False, "no CUDA device visible to torch",
                               "a CUDA build of torch on a node with an NVIDIA driver (nvidia-smi lists the GPUs); "
                               "on a CPU only --model tiny runs", needs)]
    count = torch.cuda.device_count()
    name = torch.cuda.get_device_name(0)
    major, minor = torch.cuda.get_device_capability(0)
    memory = torch.cuda.get_device_properties(0).total_memory / 2**30
    hopper = (major, minor) == (9, 0)
    checks.append(Check("GPU", True, f"{count} x {name}, sm_{major}{minor}, {memory:.0f} GiB", needed_by=needs))
    checks.append(Check("Hopper kernels", hopper, "sm_90: Triton/Gluon MX kernels" if hopper else
                        f"sm_{major}{minor}: MX formats run on the emulator (slow)",
                        "an H100/H200 (sm_90) for the Triton and Gluon kernels"))
    return checks


def _kernels() -> list[Check]:
    triton = _version("triton")
    if triton is None:
        return [Check("Triton", False, "not installed", "pip install -e '.[gpu]' (or the wheelhouse)")]
    from fsbench.kernels.hopper.launch import gluon_missing

    reason = gluon_missing()
    cudnn = _version("nvidia-cudnn-frontend")
    return [Check("Triton", True, triton),
            Check("Gluon kernel", reason is None, "triton.experimental.gluon for Hopper" if reason is None else
                  "impl=auto runs the Triton kernel", reason or ""),
            Check("cuDNN frontend", cudnn is not None, cudnn or "not installed (the bench's cudnn-fp8 row)",
                  "" if cudnn else "pip install nvidia-cudnn-frontend")]


def _packages() -> list[Check]:
    checks = []
    for name, distribution, module in (("LoadGen", "mlcommons-loadgen", "mlperf_loadgen"),
                                       ("diffusers", "diffusers", "diffusers")):
        version = _version(distribution)
        found = version is not None and importlib.util.find_spec(module) is not None
        checks.append(Check(name, found, version or "not installed",
                            "" if found else f"pip install {distribution} (or the wheelhouse)", ("run", "submission")))
    return checks


def _inputs(model: str, preset: str, prompts_file: Path | None, latent_file: Path | None) -> list[Check]:
    """The run's own inputs, read by the function `fsbench run` reads them with (harness.run.inputs): a line for
    each, and a failure is the run's own one-line refusal, naming the file."""
    from fsbench.harness.run import inputs

    quiet = logging.getLogger("fsbench")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # a seeded latent is the "fixed latent" line's to report, not a warning's
    try:
        found = inputs.read(model, preset, prompts_file, latent_file=latent_file)
    finally:
        quiet.setLevel(level)
    problems = found.problems
    settings, prompts, latent = found.settings, found.prompts, found.latent
    shown = {
        "settings": f"preset {preset}: {settings.height}x{settings.width}x{settings.num_frames}, "
                    f"{settings.steps} steps" if settings else "",
        "model": f"{model} (built in, random weights)" if found.model_dir is None else str(found.model_dir),
        "prompts": f"{prompts.source} ({len(prompts.texts)})" if prompts else "",
        "latent": latent.source if latent else "not read: the settings above are refused",
    }
    checks = []
    for name in inputs.NAMES:
        if name in problems:
            checks.append(Check(name, False, str(problems[name]), needed_by=("run",)))
        else:
            checks.append(Check(name, name != "latent" or latent is not None, shown[name], needed_by=("run",)))
    return checks


def _mlperf_data() -> list[Check]:
    """What a closed submission needs beyond a run: MLPerf's 248 prompts and its fixed latent, in the data folder."""
    from fsbench.harness.run import dataset

    folder = data_dir()
    prompts = folder / dataset.PROMPTS_FILE
    try:
        count = len(dataset.load_prompts(prompts, "").texts)
        checks = [Check("MLPerf prompts", True, f"{prompts} ({count})", needed_by=("submission",))]
    except FsbenchError as exc:
        checks = [Check("MLPerf prompts", False, str(exc), FETCH_DATA, ("submission",))]
    latent = folder / dataset.LATENT_FILE
    try:
        blob = dataset.git_blob_id(latent.read_bytes())
    except OSError as exc:
        return checks + [Check("fixed latent", False, f"cannot read {latent} ({exc.strerror or exc}): the mlperf "
                               "preset starts from a seed", FETCH_DATA, ("submission",))]
    official = blob == dataset.LATENT_GIT_BLOB
    return checks + [Check("fixed latent", official, f"{latent} (git blob {blob[:12]}"
                           + (", MLPerf's)" if official else ", not MLPerf's)"), "" if official else FETCH_DATA,
                           ("submission",))]


def _vbench_data() -> Path:
    """The VBench data folder, with its full-info JSON read: a file that is not JSON is named, not raised."""
    import json

    from fsbench.eval import vbench_adapter

    folder = vbench_adapter.data_dir()
    info = folder / "VBench_full_info.json"
    try:
        entries = json.loads(info.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FsbenchError(f"cannot read {info} ({type(exc).__name__}: {str(exc)[:80]}): fetch it again with "
                           "scripts/fetch_dataset.py") from exc
    if not isinstance(entries, list):
        raise FsbenchError(f"{info} is not VBench's list of prompts: fetch it again with scripts/fetch_dataset.py")
    return folder


def _vbench_environment() -> str:
    """The VBench interpreter eval would use, with the vbench version it imports; FsbenchError unless that is the
    version MLPerf's reference pins (a score of another VBench is not the benchmark's)."""
    from fsbench.eval import vbench_adapter

    python = vbench_adapter.vbench_python()
    version = vbench_adapter.vbench_version(python)
    if version != vbench_adapter.PINNED_VERSION:
        raise FsbenchError(f"{python} imports vbench {version}, not the {vbench_adapter.PINNED_VERSION} MLPerf's "
                           "reference pins: rebuild it with scripts/setup_vbench_env.sh")
    return f"{python} (vbench {version}, as MLPerf pins)"


def _evaluation() -> list[Check]:
    from fsbench.eval import weights

    checks = []
    for name, probe in (("VBench environment", _vbench_environment), ("VBench data", _vbench_data)):
        try:
            checks.append(Check(name, True, str(probe()), needed_by=("eval", "submission")))
        except FsbenchError as exc:
            checks.append(Check(name, False, "not found" if name == "VBench data" else "not usable", str(exc),
                                ("eval", "submission")))
    files = weights.lpips_weights() + [w for group in weights.vbench_weights().values() for w in group]
    missing = weights.missing(files)
    checks.append(Check("eval weights", not missing, f"{len(files) - len(missing)} of {len(files)} files present"
                        + (f", first missing: {missing[0].path}" if missing else ""),
                        "" if not missing else "python scripts/fetch_eval_weights.py on a connected machine, then copy "
                        "the files to the same paths here", ("eval", "submission")))
    return checks


def metric_problems(metrics: tuple[str, ...] | list[str]) -> list[Check]:
    """What scoring `metrics` (psnr, ssim, lpips, vbench) needs and this machine lacks, each with its fix: the
    weights, the VBench environment and data. A campaign, sweep or tune asks before its first video, not after."""
    from fsbench.eval import weights

    problems = []
    if {"psnr", "ssim", "lpips"} & set(metrics) and importlib.util.find_spec("skimage") is None:
        problems.append(Check("scikit-image", False, "not installed", "pip install -e '.[eval]'"))
    if "lpips" in metrics:
        missing = weights.missing(weights.lpips_weights())
        if importlib.util.find_spec("lpips") is None:
            problems.append(Check("lpips", False, "not installed", "pip install -e '.[eval]'"))
        if missing:
            problems.append(Check("LPIPS weights", False, ", ".join(str(w.path) for w in missing) + " missing",
                                  "python scripts/fetch_eval_weights.py on a connected machine, then copy the files "
                                  "to the same paths here"))
    if "vbench" in metrics:
        for name, probe in (("VBench environment", _vbench_environment), ("VBench data", _vbench_data)):
            try:
                probe()
            except FsbenchError as exc:  # its message names the fix
                problems.append(Check(name, False, str(exc)))
        missing = weights.missing([w for group in weights.vbench_weights().values() for w in group])
        if missing:
            problems.append(Check("VBench weights", False, f"{len(missing)} file(s) missing, first {missing[0].path}",
                                  "python scripts/fetch_eval_weights.py on a connected machine, then copy the files "
                                  "to the same paths here"))
    return problems


def refuse_unscorable(metrics: tuple[str, ...] | list[str], what: str) -> None:
    """FsbenchError in one line naming everything `metrics` lack here and the command that fixes each, so `what`
    (a campaign, a tune) stops before its first video instead of after its last."""
    problems = metric_problems(metrics)
    if problems:
        raise FsbenchError(f"{what} cannot score {','.join(metrics)} on this machine; nothing was generated: "
                           + "; ".join(f"{p.name}: {p.found}" + (f" (fix: {p.fix})" if p.fix else "")
                                       for p in problems))


def diagnose(model: str, preset: str = "mlperf", prompts_file: Path | None = None,
             latent_file: Path | None = None) -> list[Check]:
    """Every check, in the order a run meets them; the run's inputs are those `fsbench run` would read with the same
    options. A probe that fails in a way nobody foresaw is a line naming it, so doctor always reports."""
    checks = [Check("fsbench", True, f"{__version__}, Python {platform.python_version()}")]
    probes: list[tuple[str, Callable[[], list[Check]]]] = [
        ("GPU", lambda: _gpu(model)), ("kernels", _kernels), ("packages", _packages),
        ("inputs", lambda: _inputs(model, preset, prompts_file, latent_file)), ("MLPerf data", _mlperf_data),
        ("evaluation", _evaluation)]
    for name, probe in probes:
        try:
            checks += probe()
        except Exception as exc:  # noqa: BLE001 - doctor reports every failure, it never stops at one
            checks.append(Check(name, False, f"the probe failed: {type(exc).__name__}: {str(exc)[:160]}",
                                needed_by=MODES))
    return checks


def needed(check: Check, mode: str) -> bool:
    return (mode == "all" and bool(check.needed_by)) or mode in check.needed_by


def ready(checks: list[Check], mode: str) -> bool:
    """Whether everything `mode` (run, eval, submission or all) needs is present."""
    return all(check.ok for check in checks if needed(check, mode))
