"""Download the MLPerf text-to-video data on a connected machine: the 248 VBench prompts (sha256 checked)
and the fixed initial latent (git blob id checked), into the data folder fsbench reads ($FSBENCH_DATA, else
$XDG_CACHE_HOME/fsbench) or --out. Files are written atomically, and only once verified."""
from __future__ import annotations

import hashlib
import urllib.request
from pathlib import Path

import click

from fsbench.files import atomic_write
from fsbench.harness.run.dataset import LATENT_FILE, LATENT_GIT_BLOB, LATENT_SHAPE, git_blob_id
from fsbench.paths import data_dir

COMMIT = "b66003e10e2db4b8c36a448b0545ec90fcc6e9e9"  # mlcommons/inference, as the reference runs it
BASE = f"https://github.com/mlcommons/inference/raw/{COMMIT}/text_to_video/wan-2.2-t2v-a14b/data/"
PROMPTS_SHA256 = "f45433f7d3f6ac055613bb36ea21f38120e3cb5873d91f7e621477761b7284e8"


def fetch(name: str) -> bytes:
    with urllib.request.urlopen(BASE + name, timeout=120) as response:
        return response.read()


@click.command()
@click.option("--out", type=click.Path(path_type=Path), default=data_dir, show_default="$FSBENCH_DATA, else "
              "$XDG_CACHE_HOME/fsbench", help="Data folder.")
@click.option("--skip-latent", is_flag=True, help="Fetch only the prompts.")
def main(out: Path, skip_latent: bool) -> None:
    """vbench_prompts.txt (sha256 verified) and fixed_latent.pt (git blob id and shape verified)."""
    prompts = fetch("vbench_prompts.txt")
    digest = hashlib.sha256(prompts).hexdigest()
    if digest != PROMPTS_SHA256:
        raise click.ClickException(f"vbench_prompts.txt has sha256 {digest}, expected {PROMPTS_SHA256}; "
                                   "the upstream file changed: check the MLPerf repository before using it")
    atomic_write(out / "vbench_prompts.txt", lambda tmp: tmp.write_bytes(prompts))
    click.echo(f"{out / 'vbench_prompts.txt'}: 248 prompts, sha256 verified")
    if skip_latent:
        return
    latent = fetch(LATENT_FILE)
    blob = git_blob_id(latent)
    if blob != LATENT_GIT_BLOB:
        raise click.ClickException(f"{LATENT_FILE} has git blob id {blob}, expected {LATENT_GIT_BLOB} (a git LFS "
                                   f"pointer, or another file?): download it by hand from {BASE}{LATENT_FILE}")
    path = atomic_write(out / LATENT_FILE, lambda tmp: tmp.write_bytes(latent))
    click.echo(f"{path}: MLPerf's initial latent {LATENT_SHAPE}, git blob {blob} verified; the mlperf preset reads "
               "it from there" + ("" if out == data_dir() else f" with FSBENCH_DATA={out}"))


if __name__ == "__main__":
    main()
