"""Download the MLPerf text-to-video data on a connected machine: the 248 VBench prompts (sha256 checked)
and the fixed initial latent, into $FSBENCH_DATA or --out. Files are written atomically."""
from __future__ import annotations

import hashlib
import urllib.request
from pathlib import Path

import click

from fsbench.harness.results import atomic_write

BASE = "https://github.com/mlcommons/inference/raw/master/text_to_video/wan-2.2-t2v-a14b/data/"
PROMPTS_SHA256 = "f45433f7d3f6ac055613bb36ea21f38120e3cb5873d91f7e621477761b7284e8"
LATENT_SHAPE = (1, 16, 21, 90, 160)


def fetch(name: str) -> bytes:
    with urllib.request.urlopen(BASE + name, timeout=120) as response:
        return response.read()


@click.command()
@click.option("--out", type=click.Path(path_type=Path), envvar="FSBENCH_DATA", required=True,
              help="Data folder [default: $FSBENCH_DATA].")
@click.option("--skip-latent", is_flag=True, help="Fetch only the prompts.")
def main(out: Path, skip_latent: bool) -> None:
    """vbench_prompts.txt (verified) and fixed_latent.pt (shape-checked)."""
    prompts = fetch("vbench_prompts.txt")
    digest = hashlib.sha256(prompts).hexdigest()
    if digest != PROMPTS_SHA256:
        raise click.ClickException(f"vbench_prompts.txt has sha256 {digest}, expected {PROMPTS_SHA256}; "
                                   "the upstream file changed: check the MLPerf repository before using it")
    atomic_write(out / "vbench_prompts.txt", lambda tmp: tmp.write_bytes(prompts))
    click.echo(f"{out / 'vbench_prompts.txt'}: 248 prompts, sha256 verified")
    if skip_latent:
        return
    import torch

    latent = fetch("fixed_latent.pt")
    path = atomic_write(out / "fixed_latent.pt", lambda tmp: tmp.write_bytes(latent))
    try:
        tensor = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable download is the same user-facing problem
        path.unlink()
        raise click.ClickException(f"fixed_latent.pt is not a torch tensor file ({exc}); a git LFS pointer? "
                                   f"download it by hand from {BASE}fixed_latent.pt") from exc
    if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != LATENT_SHAPE:
        path.unlink()
        raise click.ClickException(f"fixed_latent.pt does not hold a {LATENT_SHAPE} tensor")
    click.echo(f"{path}: {tuple(tensor.shape)} {tensor.dtype}; use it with fsbench run --latent {path}")


if __name__ == "__main__":
    main()
