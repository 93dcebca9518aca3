#!/usr/bin/env python3
"""Fetch the evaluation weights on a connected machine, to the exact paths fsbench and VBench read them from.

    python scripts/fetch_eval_weights.py [--only lpips,vbench] [--force]

Targets follow eval/weights.py: VBench's checkpoints under VBENCH_CACHE_DIR (default ~/.cache/vbench), DINO's and
torchvision AlexNet's under the torch hub cache (TORCH_HOME), bert-base-uncased under the Hugging Face hub cache
(HF_HOME). Set those variables the same way on the offline machine, or copy the files to the paths printed.
Digests are checked where they are published (CLIP's full sha256, torchvision's 8-digit prefix).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
import zipfile
from pathlib import Path

import click

from fsbench.eval import weights


def _download(url: str) -> Path:
    fd, tmp = tempfile.mkstemp(prefix="fsbench-weight-")
    os.close(fd)
    print(f"  downloading {url}")
    with urllib.request.urlopen(url) as response, open(tmp, "wb") as out:
        shutil.copyfileobj(response, out, length=1 << 20)
    return Path(tmp)


def _check(path: Path, expected: str | None) -> None:
    if not expected:
        return
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if not digest.hexdigest().startswith(expected):
        raise SystemExit(f"sha256 mismatch for {path}: got {digest.hexdigest()}, expected {expected}...")


def _place(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(source), str(target))


def fetch(weight: weights.WeightFile, cache: dict[str, Path]) -> None:
    """Put one weight in place; a URL shared by two targets (DINO) is downloaded once."""
    print(f"{weight.what} -> {weight.path}")
    if weight.kind == "hf-snapshot":
        from huggingface_hub import snapshot_download

        snapshot_download(weight.url, allow_patterns=list(weight.files), cache_dir=str(weight.path.parent))
        return
    if weight.url in cache and weight.kind == "file":
        weight.path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cache[weight.url], weight.path)
        return
    tmp = _download(weight.url)
    if weight.kind == "file":
        _check(tmp, weight.sha256)
        _place(tmp, weight.path)
        cache[weight.url] = weight.path
    elif weight.kind == "zip-member":
        with zipfile.ZipFile(tmp) as archive:
            data = archive.read(weight.member)
        weight.path.parent.mkdir(parents=True, exist_ok=True)
        weight.path.write_bytes(data)
        tmp.unlink()
    elif weight.kind == "github-zip":
        folder = weight.path.parent
        with zipfile.ZipFile(tmp) as archive, tempfile.TemporaryDirectory() as unpack:
            archive.extractall(unpack)
            (top,) = [p for p in Path(unpack).iterdir() if p.is_dir()]
            if folder.exists():
                shutil.rmtree(folder)
            folder.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(top), str(folder))
        tmp.unlink()
    else:
        raise SystemExit(f"unknown weight kind {weight.kind}")


@click.command(help=__doc__)
@click.option("--only", default="lpips,vbench", show_default=True,
              help="comma-separated: lpips, vbench, or VBench dimension names")
@click.option("--force", is_flag=True, help="fetch even when the file is already there")
def main(only: str, force: bool) -> None:
    by_dimension = weights.vbench_weights()
    chosen = {c.strip() for c in only.split(",") if c.strip()}
    unknown = sorted(chosen - {"lpips", "vbench", *by_dimension})
    if unknown or not chosen:
        raise click.BadParameter(f"unknown {', '.join(unknown) or 'empty list'}; known: lpips, vbench, "
                                 f"{', '.join(sorted(by_dimension))}", param_hint="--only")
    wanted = weights.lpips_weights() if "lpips" in chosen else []
    for dimension, files in by_dimension.items():
        if "vbench" in chosen or dimension in chosen:
            wanted += files
    cache: dict[str, Path] = {}
    seen = set()
    for weight in wanted:
        if weight.path in seen:
            continue
        seen.add(weight.path)
        if weight.present() and not force:
            print(f"present: {weight.path}")
            continue
        fetch(weight, cache)
    missing = weights.missing(wanted)
    if missing:
        raise SystemExit(weights.describe_missing("still", missing))
    print("all evaluation weights in place")


if __name__ == "__main__":
    main()
