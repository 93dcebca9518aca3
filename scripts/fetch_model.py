"""Download the Wan2.2-T2V-A14B-Diffusers checkpoint (about 126 GB) on a connected machine, then check that
fsbench can use it offline: `fsbench run --model DIR` (or the repo id, if it went to the HF cache)."""
from __future__ import annotations

from pathlib import Path

import click

from fsbench.errors import FsbenchError
from fsbench.harness.model.pipeline import checkpoint_dir

REPO = "Wan-AI/Wan2.2-T2V-A14B-Diffusers"
REVISION = "5be7df9619b54f4e2667b2755bc6a756675b5cd7"  # the commit the MLPerf reference pins


@click.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("models/Wan2.2-T2V-A14B-Diffusers"),
              show_default=True, help="Checkpoint folder to create (resumes a partial download).")
@click.option("--revision", default=REVISION, show_default=True)
def main(out: Path, revision: str) -> None:
    """Fetch the checkpoint with huggingface_hub and verify every part fsbench loads is present."""
    from huggingface_hub import snapshot_download

    snapshot_download(REPO, revision=revision, local_dir=out)
    try:
        checkpoint_dir(str(out))
    except FsbenchError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"checkpoint ready: fsbench run --model {out}")


if __name__ == "__main__":
    main()
