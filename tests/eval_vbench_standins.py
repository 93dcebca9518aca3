"""Test-only: random-weight stand-ins for VBench's checkpoints, written where VBench's local mode reads them.

Run with the vbench environment's python: `python eval_vbench_standins.py VBENCH_CACHE_DIR TORCH_HOME`.
Route A of ../shared/reference/offline-stack.md section 3: VBench's real `evaluate(local=True)` loads these files,
so the whole adapter -> runner -> VBench path runs offline. The models are random (and CLIP and DINO are shrunk
to one narrow layer to keep CI fast), so only weight-independent properties may be asserted on their scores.
Scene is left out on purpose: Tag2Text with BERT peaks at 23 GB RSS on CPU.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

DINO_HUBCONF = '''"""Test stand-in for facebookresearch/dino's hubconf: a one-layer random ViT, no download."""
import torch
from timm.models.vision_transformer import VisionTransformer


def dino_vitb16(**kwargs):
    torch.manual_seed(0)
    return VisionTransformer(img_size=224, patch_size=16, embed_dim=64, depth=1, num_heads=1, num_classes=0)
'''


def write_clip(path: Path) -> None:
    """A TorchScript CLIP (clip.load rebuilds the architecture from the archive's state dict)."""
    import clip
    from clip.model import CLIP

    model = CLIP(embed_dim=64, image_resolution=224, vision_layers=1, vision_width=64, vision_patch_size=32,
                 context_length=77, vocab_size=49408, transformer_width=64, transformer_heads=1, transformer_layers=1)
    traced = torch.jit.trace(model.eval(), (torch.zeros(1, 3, 224, 224), clip.tokenize(["x"])), check_trace=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    traced.save(str(path))


def write_amt(path: Path) -> None:
    import vbench
    from omegaconf import OmegaConf
    from vbench.third_party.amt.utils.build_utils import build_from_cfg

    config = Path(vbench.__file__).parent / "third_party" / "amt" / "cfgs" / "AMT-S.yaml"
    model = build_from_cfg(OmegaConf.load(config).network)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": model.state_dict()}, path)


def write_raft(path: Path) -> None:
    from easydict import EasyDict
    from vbench.third_party.RAFT.core.raft import RAFT

    model = RAFT(EasyDict(small=False, mixed_precision=False, alternate_corr=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)


def main(cache: Path, torch_home: Path) -> None:
    torch.manual_seed(0)
    write_clip(cache / "clip_model" / "ViT-B-32.pt")
    write_amt(cache / "amt_model" / "amt-s.pth")
    write_raft(cache / "raft_model" / "models" / "raft-things.pth")
    dino = cache / "dino_model"
    (dino / "facebookresearch_dino_main").mkdir(parents=True, exist_ok=True)
    (dino / "facebookresearch_dino_main" / "hubconf.py").write_text(DINO_HUBCONF)
    (dino / "dino_vitbase16_pretrain.pth").touch()  # VBench only checks that it exists
    checkpoints = torch_home / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    (checkpoints / "dino_vitbase16_pretrain.pth").touch()  # the stand-in hubconf never loads it


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    main(Path(sys.argv[1]), Path(sys.argv[2]))
