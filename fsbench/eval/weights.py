"""Where every evaluation weight must lie, whether it is there, and where a connected machine fetches it from.

Nothing here downloads at evaluation time: this machine is offline, so a missing file is reported by its exact
path and `scripts/fetch_eval_weights.py` (run on a connected machine) puts it there. Paths follow what the readers
look up: VBench's `init_submodules` with `local=True` under VBENCH_CACHE_DIR (the MLPerf reference passes
`--load_ckpt_from_local=True`), torch hub's checkpoint folder (torchvision AlexNet for LPIPS; DINO's hubconf loads
its weights from there too), and the Hugging Face hub cache (bert-base-uncased for the scene captioner).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class WeightFile:
    """One file a metric reads; `kind` says how the fetch script gets it."""

    what: str
    path: Path
    url: str
    sha256: str | None = None  # full digest or a prefix (torchvision names carry the first 8 hex digits)
    kind: str = "file"  # file | zip-member | github-zip | hf-snapshot
    member: str | None = None  # zip-member: the path inside the archive
    files: tuple[str, ...] = field(default=())  # hf-snapshot: files that must be in the snapshot

    def present(self) -> bool:
        if self.kind == "hf-snapshot":
            snapshot = _hf_snapshot(self.path)
            return snapshot is not None and all((snapshot / f).is_file() for f in self.files)
        return self.path.is_file()


def vbench_cache_dir() -> Path:
    """VBench's cache root, computed as vbench/utils.py does."""
    return Path(os.environ.get("VBENCH_CACHE_DIR") or Path.home() / ".cache" / "vbench")


def torch_hub_checkpoints() -> Path:
    import torch

    return Path(torch.hub.get_dir()) / "checkpoints"


def hf_hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub"


def lpips_weights() -> list[WeightFile]:
    return [WeightFile("torchvision AlexNet (LPIPS backbone)", torch_hub_checkpoints() / "alexnet-owt-7be5be79.pth",
                       "https://download.pytorch.org/models/alexnet-owt-7be5be79.pth", sha256="7be5be79")]


_CLIP_SHA = "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af"


def vbench_weights() -> dict[str, list[WeightFile]]:
    """Per MLPerf dimension, the files VBench 0.1.5 reads in local mode."""
    cache = vbench_cache_dir()
    dino = "https://dl.fbaipublicfiles.com/dino/dino_vitbase16_pretrain/dino_vitbase16_pretrain.pth"
    clip = WeightFile("CLIP ViT-B/32", cache / "clip_model" / "ViT-B-32.pt",
                      f"https://openaipublic.azureedge.net/clip/models/{_CLIP_SHA}/ViT-B-32.pt", sha256=_CLIP_SHA)
    return {
        "subject_consistency": [
            WeightFile("DINO code (facebookresearch/dino hubconf)",
                       cache / "dino_model" / "facebookresearch_dino_main" / "hubconf.py",
                       "https://github.com/facebookresearch/dino/archive/refs/heads/main.zip", kind="github-zip"),
            WeightFile("DINO ViT-B/16 (VBench checks it exists)", cache / "dino_model" / "dino_vitbase16_pretrain.pth",
                       dino),
            WeightFile("DINO ViT-B/16 (DINO's hubconf loads it)",
                       torch_hub_checkpoints() / "dino_vitbase16_pretrain.pth", dino),
        ],
        "background_consistency": [clip],
        "motion_smoothness": [WeightFile("AMT-S", cache / "amt_model" / "amt-s.pth",
                                         "https://huggingface.co/lalala125/AMT/resolve/main/amt-s.pth")],
        "dynamic_degree": [WeightFile("RAFT (raft-things)", cache / "raft_model" / "models" / "raft-things.pth",
                                      "https://dl.dropboxusercontent.com/s/4j4z58wuv8o0mfz/models.zip",
                                      kind="zip-member", member="models/raft-things.pth")],
        "appearance_style": [clip],
        "scene": [
            WeightFile("Tag2Text Swin-B 14M", cache / "caption_model" / "tag2text_swin_14m.pth",
                       "https://huggingface.co/spaces/xinyu1205/recognize-anything/resolve/main/tag2text_swin_14m.pth"),
            WeightFile("bert-base-uncased (Tag2Text text encoder)", hf_hub_cache() / "models--bert-base-uncased",
                       "bert-base-uncased", kind="hf-snapshot",
                       files=("vocab.txt", "tokenizer_config.json", "config.json", "model.safetensors")),
        ],
    }


def missing(files: list[WeightFile]) -> list[WeightFile]:
    seen, out = set(), []
    for weight in files:
        if weight.path not in seen and not weight.present():
            out.append(weight)
        seen.add(weight.path)
    return out


FETCH_HINT = ("missing weights: run `python scripts/fetch_eval_weights.py` on a connected machine and copy the files "
              "to the same paths here (VBENCH_CACHE_DIR, TORCH_HOME and HF_HOME move them)")


def describe_missing(metric: str, files: list[WeightFile]) -> str:
    """One line: what is not computed and exactly which files are missing where."""
    listed = "; ".join(f"{w.path}" + (f" ({', '.join(w.files)})" if w.files else "") + f" [{w.what}]"
                       for w in files)
    return f"{metric} not computed, weights missing: {listed}"


def _hf_snapshot(repo_dir: Path) -> Path | None:
    ref = repo_dir / "refs" / "main"
    if not ref.is_file():
        return None
    snapshot = repo_dir / "snapshots" / ref.read_text().strip()
    return snapshot if snapshot.is_dir() else None
