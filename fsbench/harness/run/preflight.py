"""`fsbench doctor`: what this machine can run, found by probing the real things (imports, the GPU, files), and for
each missing piece the command that fixes it.

A check is needed by some modes: `run` (a LoadGen run of the model), `eval` (VBench and LPIPS scores), `submission`
(a closed-division package). A check needed by no mode (the Gluon kernel, cuDNN's FP8 attention) only informs.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
from collections.abc import Callable
from dataclasses import dataclass

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


def _model(model: str) -> Check:
    from fsbench.harness.model import pipeline

    if model in pipeline.SYNTHETIC:
        return Check("model", True, f"{model} (built in, random weights)", needed_by=("run",))
    try:
        return Check("model", True, str(pipeline.checkpoint_dir(model)), needed_by=("run",))
    except FsbenchError as exc:
        return Check("model", False, f"{model}: not found", str(exc), ("run",))


def _data(model: str) -> list[Check]:
    from fsbench.harness.run import dataset

    folder = data_dir()
    prompts = folder / dataset.PROMPTS_FILE
    run_needs = ("run", "submission") if model != "tiny" else ("submission",)
    if prompts.is_file():
        count = sum(1 for line in prompts.read_text(encoding="utf-8").splitlines() if line.strip())
        checks = [Check("prompts", True, f"{prompts} ({count})", needed_by=run_needs)]
    else:
        checks = [Check("prompts", False, f"{prompts} is missing", FETCH_DATA, run_needs)]
    latent = folder / dataset.LATENT_FILE
    if latent.is_file():
        blob = dataset.git_blob_id(latent.read_bytes())
        official = blob == dataset.LATENT_GIT_BLOB
        checks.append(Check("fixed latent", official, f"{latent} (git blob {blob[:12]}"
                            + (", MLPerf's)" if official else ", not MLPerf's)"), "" if official else FETCH_DATA,
                            ("submission",)))
    else:
        checks.append(Check("fixed latent", False, f"no {dataset.LATENT_FILE}: the mlperf preset starts from a seed",
                            FETCH_DATA, ("submission",)))
    return checks


def _evaluation() -> list[Check]:
    from fsbench.eval import vbench_adapter, weights

    checks = []
    for name, probe in (("VBench environment", vbench_adapter.vbench_python), ("VBench data", vbench_adapter.data_dir)):
        try:
            checks.append(Check(name, True, str(probe()), needed_by=("eval", "submission")))
        except FsbenchError as exc:
            checks.append(Check(name, False, "not found", str(exc), ("eval", "submission")))
    files = weights.lpips_weights() + [w for group in weights.vbench_weights().values() for w in group]
    missing = weights.missing(files)
    checks.append(Check("eval weights", not missing, f"{len(files) - len(missing)} of {len(files)} files present"
                        + (f", first missing: {missing[0].path}" if missing else ""),
                        "" if not missing else "python scripts/fetch_eval_weights.py on a connected machine, then copy "
                        "the files to the same paths here", ("eval", "submission")))
    return checks


def diagnose(model: str) -> list[Check]:
    """Every check, in the order a run meets them."""
    checks = [Check("fsbench", True, f"{__version__}, Python {platform.python_version()}")]
    probes: list[Callable[[], list[Check]]] = [lambda: _gpu(model), _kernels, _packages, lambda: [_model(model)],
                                               lambda: _data(model), _evaluation]
    for probe in probes:
        checks += probe()
    return checks


def needed(check: Check, mode: str) -> bool:
    return (mode == "all" and bool(check.needed_by)) or mode in check.needed_by


def ready(checks: list[Check], mode: str) -> bool:
    """Whether everything `mode` (run, eval, submission or all) needs is present."""
    return all(check.ok for check in checks if needed(check, mode))
