"""Build the two-expert diffusers `WanPipeline`: a real checkpoint (local folder or HF cache, offline),
the embedded `tiny` model, or `a14b-synthetic` (real A14B shapes, random bf16 weights made on the GPU)."""
from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from fsbench.errors import FsbenchError
from fsbench.harness.model.synthetic import CONFIGS
from fsbench.harness.run.presets import Settings

SYNTHETIC = tuple(CONFIGS)
CHECKPOINT_PARTS = ("scheduler", "text_encoder", "tokenizer", "transformer", "transformer_2", "vae")
FETCH_HINT = "run scripts/fetch_model.py on a connected machine and copy the folder here"


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def check_device(model: str, device: torch.device) -> None:
    if model == "a14b-synthetic" and device.type != "cuda":
        raise FsbenchError("a14b-synthetic needs a CUDA GPU (about 70 GB of weights); use --model tiny on a CPU")


def build(model: str, settings: Settings, device: torch.device | None = None) -> Any:
    """A ready WanPipeline on `device` with the preset's UniPC flow shift and boundary ratio."""
    device = device or default_device()
    check_device(model, device)
    if model == "tiny":
        return _synthetic("tiny", settings, device, torch.bfloat16 if device.type == "cuda" else torch.float32)
    if model == "a14b-synthetic":
        return _synthetic("a14b-synthetic", settings, device, torch.bfloat16)
    return _checkpoint(checkpoint_dir(model), settings, device)


def num_layers(model: str) -> int:
    """Transformer blocks per expert, read without loading weights (schedules are checked against it)."""
    if model in CONFIGS:
        return CONFIGS[model]["transformer"]["num_layers"]
    config = checkpoint_dir(model) / "transformer" / "config.json"
    try:
        layers = json.loads(config.read_text(encoding="utf-8"))["num_layers"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FsbenchError(f"{config} is not a transformer config with num_layers ({type(exc).__name__}: {exc}): "
                           f"{FETCH_HINT}") from exc
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise FsbenchError(f"{config}: num_layers must be a positive integer, got {layers!r}: {FETCH_HINT}")
    return layers


def _is_json_object(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_text(encoding="utf-8")), dict) and path.stat().st_size > 2
    except (OSError, ValueError):
        return False


def checkpoint_dir(model: str) -> Path:
    """A complete Wan2.2 diffusers checkpoint folder for `model` (a path or a cached HF repo id)."""
    if not model.strip():  # Path("") is the current folder, which no one means by an empty name
        raise FsbenchError(f"the model name {model!r} is empty: pass --model tiny, a14b-synthetic, a checkpoint "
                           "folder or a cached Hugging Face repo id")
    path = Path(model).expanduser()
    if not path.exists() and re.fullmatch(r"[\w.-]+/[\w.-]+", model):
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError

        try:
            path = Path(snapshot_download(model, local_files_only=True))
        except (LocalEntryNotFoundError, OSError) as exc:
            raise FsbenchError(f"model {model} is not in the Hugging Face cache: {FETCH_HINT}") from exc
    if not path.is_dir():
        raise FsbenchError(f"model {model!r} is not tiny, a14b-synthetic, a checkpoint folder or a cached "
                           f"Hugging Face repo id; {FETCH_HINT}")
    missing = [p for p in ("model_index.json",) if not (path / p).is_file() or not (path / p).stat().st_size]
    for part in CHECKPOINT_PARTS:
        folder = path / part
        if not folder.is_dir():
            missing.append(f"{part}/")
        elif part != "tokenizer" and not _is_json_object(folder / ("scheduler_config.json" if part == "scheduler"
                                                                  else "config.json")):
            missing.append(f"{part}/ a config (JSON object)")
        elif part in ("transformer", "transformer_2", "text_encoder", "vae") and not (
                any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))):
            missing.append(f"{part}/*.safetensors")
    if missing:
        raise FsbenchError(f"checkpoint folder {path} has no {', '.join(missing)}: {FETCH_HINT}")
    return path


def _scheduler(settings: Settings, config: dict | None = None) -> Any:
    """UniPC flow matching; `flow_shift` only acts together with use_flow_sigmas and flow_prediction."""
    from diffusers import UniPCMultistepScheduler

    base = dict(config or {}, num_train_timesteps=1000, prediction_type="flow_prediction", use_flow_sigmas=True)
    return UniPCMultistepScheduler.from_config(base, flow_shift=settings.flow_shift)


def _checkpoint(path: Path, settings: Settings, device: torch.device) -> Any:
    from diffusers import AutoencoderKLWan, WanPipeline

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    vae = AutoencoderKLWan.from_pretrained(path, subfolder="vae", torch_dtype=torch.float32, local_files_only=True)
    pipe = WanPipeline.from_pretrained(path, vae=vae, boundary_ratio=settings.boundary_ratio, torch_dtype=dtype,
                                       local_files_only=True)
    pipe.scheduler = _scheduler(settings, dict(pipe.scheduler.config))
    return pipe.to(device)


@contextlib.contextmanager
def _creating(device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    """Create parameters directly on `device` in `dtype`: 14B-parameter experts never touch host memory."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous)


def _synthetic(name: str, settings: Settings, device: torch.device, dtype: torch.dtype) -> Any:
    """Same classes as the checkpoint, random weights (seeded, so `tiny` is the same model every time)."""
    from diffusers import AutoencoderKLWan, WanPipeline, WanTransformer3DModel
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed
    from transformers import UMT5Config, UMT5EncoderModel

    from fsbench.harness.model.synthetic import build_tokenizer

    cfg = CONFIGS[name]
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if device.type == "cuda" else []):
        torch.manual_seed(0)
        experts = []
        for _ in range(2):
            with _creating(device, dtype):
                t = WanTransformer3DModel(**cfg["transformer"])
            with _creating(device, torch.float32):
                t.rope = WanRotaryPosEmbed(t.config.attention_head_dim, t.config.patch_size, t.config.rope_max_seq_len)
            keep = set(WanTransformer3DModel._keep_in_fp32_modules)  # as from_pretrained(torch_dtype=bf16) does
            for full, param in t.named_parameters():
                if keep & set(full.split(".")):
                    param.data = param.data.float()
            experts.append(t.eval().requires_grad_(False))
        with _creating(device, dtype):
            encoder = UMT5EncoderModel(UMT5Config(**cfg["text_encoder"], pad_token_id=0, eos_token_id=1,
                                                  decoder_start_token_id=0)).eval().requires_grad_(False)
        with _creating(device, torch.float32):
            vae = AutoencoderKLWan(**cfg["vae"]).eval().requires_grad_(False)
    return WanPipeline(tokenizer=build_tokenizer(), text_encoder=encoder, vae=vae, scheduler=_scheduler(settings),
                       transformer=experts[0], transformer_2=experts[1], boundary_ratio=settings.boundary_ratio)
