"""Progress bars: shown only on a terminal and never under --quiet, so a log written to a file holds lines, not
carriage returns. While a campaign runs, one plan bar (stage and ETA) counts the videos of every stage: a bar
made here forwards its updates to it."""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import click
from tqdm.auto import tqdm

from fsbench.harness.run import logs

_PLAN: list[tqdm] = []  # the plan bar of the running campaign, if any


def shown() -> bool:
    """Whether bars are drawn: stderr is a terminal and the command was not asked for --quiet."""
    return not logs.quiet() and sys.stderr.isatty()


class _Bar(tqdm):
    """A tqdm bar that also advances the campaign's plan bar by what it counts in the plan's unit."""

    counts: str = ""  # the unit, kept here too: a disabled tqdm keeps none of its arguments

    def update(self, n: float | None = 1) -> bool | None:
        shown_now = super().update(n)
        if _PLAN and self.counts == _PLAN[0].counts:
            _PLAN[0].update(n)
        return shown_now


def bar(total: int | None, desc: str, unit: str, **kwargs: Any) -> tqdm:
    """A bar that draws only where `shown()`; its updates also reach the campaign's plan bar."""
    made = _Bar(total=total, desc=desc, unit=unit, disable=not shown(), dynamic_ncols=True, **kwargs)
    made.counts = unit
    return made


@contextlib.contextmanager
def plan(total: int | None, unit: str) -> Iterator[tqdm]:
    """The one bar of a campaign: `total` units over all its stages; `stage(text)` names the one running."""
    with tqdm(total=total, unit=unit, disable=not shown(), dynamic_ncols=True, position=0,
              bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}<{remaining}]"
              ) as outer:
        outer.counts = unit
        _PLAN.append(outer)
        try:
            yield outer
        finally:
            _PLAN.remove(outer)


def stage(text: str) -> None:
    """Name the running stage on the plan bar (a terminal) or as a line of its own (anywhere else)."""
    if _PLAN and not _PLAN[0].disable:
        _PLAN[0].set_description_str(text)
    elif not logs.quiet():
        click.echo(text, err=True)


def note(text: str) -> None:
    """A line of its own, above the plan bar on a terminal (a stage skipped, say)."""
    if _PLAN and not _PLAN[0].disable:
        _PLAN[0].write(text, file=sys.stderr)
    elif not logs.quiet():
        click.echo(text, err=True)


def quiet_libraries() -> None:
    """diffusers' and transformers' own bars (loading weights, denoising) follow `shown()` too."""
    if shown():
        return
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    diffusers_logging.disable_progress_bar()
    transformers_logging.disable_progress_bar()
