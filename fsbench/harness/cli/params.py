"""Click parameter types and callbacks for the `fsbench` commands: every option is checked where it is parsed,
with its valid range in the message, so a bad value stops the command before any work or any write."""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, cast

import click

from fsbench.errors import FsbenchError
from fsbench.folders import refuse_foreign
from fsbench.harness.mlperf.loadgen import (
    MAX_COUNT as MAX_COUNT,
    MAX_TARGET_LATENCY_MS as MAX_TARGET_LATENCY_MS,
    MAX_TARGET_QPS as MAX_TARGET_QPS,
    MAX_TIME_S as MAX_TIME_S,
)
from fsbench.harness.run import presets
from fsbench.harness.run.presets import MAX_FRAMES as MAX_FRAMES, MAX_SIDE as MAX_SIDE, MAX_STEPS as MAX_STEPS

MAX_PROCESSES = 1024
MAX_SHAPE_ELEMENTS = 2**31  # q, k and v of a B,H,S,D shape on the kernel commands

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}")


class FiniteFloatRange(click.FloatRange):
    """A FloatRange that also refuses nan and inf (click lets nan through every comparison)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number; expected {self._describe_range()}", param, ctx)
        return number


def int_range(low: int, high: int | None = None) -> click.IntRange:
    return click.IntRange(min=low, max=high)


def positive_float(high: float) -> FiniteFloatRange:
    """A float in (0, high]."""
    return FiniteFloatRange(min=0, max=high, min_open=True)


def non_negative_float(high: float) -> FiniteFloatRange:
    return FiniteFloatRange(min=0, max=high)


class NameType(click.ParamType):
    """A name that becomes one folder or file name: letters, digits and `_.+-`, never a path or `..`."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        if not _NAME.fullmatch(text) or set(text) == {"."}:
            self.fail(f"{text[:60]!r} cannot name a folder: use 1-100 letters, digits or _.+- "
                      "(no '/', no leading '.')", param, ctx)
        return text


class OutPath(click.Path):
    """An output path (folder, or file with dir_okay=False) that may not exist yet, is never the empty string
    (which the OS reads as the current folder) and can be created: its nearest existing ancestor is a writable
    folder. A folder of `kind` follows `fsbench.folders.claim`'s rule: new, empty or fsbench's own of that kind, outside
    any run folder. Checked here, so a wrong output fails before the work whose result it would hold."""

    def __init__(self, kind: str | None = None, **kwargs: Any):
        super().__init__(path_type=Path, **kwargs)
        self.kind = kind

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path names nothing; pass a path such as results/runs/NAME", param, ctx)
        path = cast(Path, super().convert(value, param, ctx))  # path_type=Path
        ancestor = Path(os.path.abspath(path))
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        what = "output directory" if self.dir_okay else "output file"
        if ancestor != Path(os.path.abspath(path)) and not ancestor.is_dir():
            self.fail(f"cannot write to {what} {path}: {ancestor} is a file, not a folder", param, ctx)
        if not os.access(ancestor if ancestor.is_dir() else ancestor.parent, os.W_OK):
            self.fail(f"cannot write to {what} {path}: no write permission in {ancestor}", param, ctx)
        if self.kind is not None:
            try:
                refuse_foreign(path, self.kind)
            except FsbenchError as exc:
                self.fail(str(exc), param, ctx)
        return path


class PresetType(click.ParamType):
    """A built-in preset name or a preset .toml file (checked to exist here; its fields when it is read)."""

    name = "preset"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            presets.preset_path(str(value))
        except FsbenchError as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


def comma_list(choices: tuple[str, ...] | None = None):
    """A callback turning 'a,b,c' into a tuple; refuses empty items, repeats and (with `choices`) unknown names."""

    def parse(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        items = tuple(item.strip() for item in value.split(","))
        if not items or any(not item for item in items):
            raise click.BadParameter(f"{value!r} has an empty item; expected a comma-separated list such as "
                                     f"{','.join(choices or ('a', 'b'))}")
        repeated = sorted({item for item in items if items.count(item) > 1})
        if repeated:
            raise click.BadParameter(f"{', '.join(repeated)} given twice; name each once")
        unknown = sorted(set(items) - set(choices)) if choices else []
        if unknown:
            raise click.BadParameter(f"unknown {', '.join(unknown)}; choose from {', '.join(choices or ())}")
        return items

    return parse


def shape(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A callback for B,H,S,D shapes (one, or a tuple of them for `multiple=True`): four positive integers whose
    product stays below MAX_SHAPE_ELEMENTS, so a typo fails here rather than in the allocator."""
    if value is None or isinstance(value, tuple):
        return None if value is None else tuple(shape(ctx, param, v) for v in value)
    try:
        dims = tuple(int(x) for x in str(value).split(","))
    except ValueError:
        dims = ()
    if len(dims) != 4 or min(dims) < 1:
        raise click.BadParameter(f"expected B,H,S,D (four positive integers), got {str(value)[:60]!r}")
    if math.prod(dims) > MAX_SHAPE_ELEMENTS:
        raise click.BadParameter(f"{value} has {math.prod(dims):.3g} elements per tensor; at most "
                                 f"{MAX_SHAPE_ELEMENTS:.3g} fit")
    return dims


NAME = NameType()
PRESET = PresetType()
# The one --preset of every command that builds settings (run, sweep, doctor, tune): they take the same names and files
preset_option = click.option("--preset", type=PRESET, default="mlperf", show_default=True,
                             help="Generation settings: a name (scenarios/<preset>.toml) or a .toml file of that "
                                  "form; tiny gets small videos by default.")
POSITIVE_INT = int_range(1)
NON_NEGATIVE_INT = int_range(0)
PROCESSES = int_range(1, MAX_PROCESSES)
