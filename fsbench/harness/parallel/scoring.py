"""`fsbench eval --gpus N`: PSNR, SSIM and LPIPS of a run scored by N processes, one per GPU (one per CPU share
on a machine without CUDA), also under torchrun. (VBench's dimensions are dealt over the GPUs by
`eval.vbench_adapter`, in VBench's own processes, from rank 0.)

Rank r scores every N-th prompt from the r-th into the run's per-prompt store (RUN/eval/fidelity/<prompt>.json,
each written atomically by the one rank that owns the prompt); after a barrier over gloo, rank 0 goes on to
`fidelity.evaluate`, which reads every prompt back and writes the summary. The values are therefore those of one
process by construction, and an interrupted evaluation resumes on any N.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.distributed as dist

from fsbench.files import atomic_write_text
from fsbench.harness.parallel.team import TIMEOUT_ENV, process_count, run_ranks, torchrun_world
from fsbench.harness.run import progress as bars

PROGRESS_DIR = ".progress"  # under RUN/eval/, while ranks score


def processes(gpus: int | None) -> int:
    """How many ranks score: torchrun's WORLD_SIZE, else --gpus (at most the CUDA devices here), else 1."""
    return process_count(gpus, torch.cuda.is_available())


def local_processes(n: int) -> int:
    """The ranks on this host (torchrun's LOCAL_WORLD_SIZE): the GPUs rank 0 may deal VBench's dimensions over."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", n)) if torchrun_world() is not None else n


def leads() -> bool:
    """Whether this process summarizes and runs VBench: always, except a torchrun rank other than 0."""
    return torchrun_world() is None or int(os.environ["RANK"]) == 0


def score_fidelity(run: Path, reference: Path, metrics: Sequence[str], n: int) -> None:
    """Score the run's prompts on `n` ranks (this process one of them) into the per-prompt store."""
    from fsbench.eval import fidelity
    from fsbench.eval.runs import Run

    fidelity.check_same_settings(Run.open(run), Run.open(reference))  # one clear line, not one per rank
    if torchrun_world() is not None:
        _score_share(int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), n, run, reference, tuple(metrics),
                     "env://")
        return
    run_ranks(n, not torch.cuda.is_available(), _score_share,
              lambda rank, init: (rank, rank, n, run, reference, tuple(metrics), init))


def _score_share(rank: int, local_rank: int, n: int, run: Path, reference: Path, metrics: tuple[str, ...],
                 init_method: str) -> None:
    """One rank: score prompts rank, rank + n, ... with its own GPU (or CPU share), then wait for the others."""
    from fsbench.eval import fidelity
    from fsbench.eval.runs import Run

    device = f"cuda:{local_rank}" if torch.cuda.is_available() else None
    cores = max(1, (os.cpu_count() or 1) // n)
    timeout = datetime.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, 1800)))
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n, timeout=timeout)
    test = Run.open(run)
    progress = _Progress(test.eval_dir / PROGRESS_DIR, rank, n, len(test.prompts()))
    try:
        share = test.prompts()[rank::n]
        fidelity.score(test, Run.open(reference), share, metrics, workers=cores, device=device,
                       on_prompt=progress.advance)
        dist.barrier()
    finally:
        progress.close()
        dist.destroy_process_group()


class _Progress:
    """One progress line for all ranks: each rank keeps its count of finished prompts in PROGRESS_DIR/rank<r>,
    and rank 0 shows their sum (files work under torchrun too, where the ranks share nothing but the run)."""

    def __init__(self, folder: Path, rank: int, n: int, total: int):
        self.folder, self.rank, self.n, self.done = folder, rank, n, 0
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.folder / f"rank{rank}", "0")
        self.stop = threading.Event()
        self.thread = None
        if rank == 0:  # the bar is made here: the thread has no click context to read --quiet from
            self.thread = threading.Thread(target=self._show, args=(bars.bar(total, f"fidelity ({n} ranks)",
                                                                             "prompt"),), daemon=True)
            self.thread.start()

    def advance(self, _prompt: str) -> None:
        self.done += 1
        atomic_write_text(self.folder / f"rank{self.rank}", str(self.done))

    def _show(self, bar) -> None:
        with bar:
            while not self.stop.wait(0.5):
                bar.update(self._sum() - bar.n)
            bar.update(self._sum() - bar.n)

    def _sum(self) -> int:
        done = 0
        for r in range(self.n):
            with contextlib.suppress(OSError, ValueError):
                done += int((self.folder / f"rank{r}").read_text())
        return done

    def close(self) -> None:
        if self.thread is not None:
            self.stop.set()
            self.thread.join()
            shutil.rmtree(self.folder, ignore_errors=True)
