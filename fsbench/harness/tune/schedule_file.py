"""A format table written as a schedule TOML file that `fsbench run --schedule FILE` reads
(`precision.schedule`): as few `[[rule]]` tables as the table's shape allows, checked by reading it back."""
from __future__ import annotations

import json
from pathlib import Path

from fsbench.files import atomic_write_text
from fsbench.harness.precision.schedule import load_file

Table = tuple[tuple[str, ...], ...]


def rules(table: Table) -> list[dict[str, str]]:
    """`[[rule]]` entries giving every (step, layer) its format: per layer where all steps agree, per step where
    all layers agree, else per step and format (rules of one specificity never overlap)."""
    steps, layers = len(table), len(table[0])
    if all(row == table[0] for row in table):
        return [{"format": fmt, "steps": "*", **({} if len(ids) == layers else {"layers": _span(ids)})}
                for fmt, ids in _by_format(table[0]).items()]
    if all(len(set(row)) == 1 for row in table):
        return [{"format": fmt, "steps": _span(ids)} for fmt, ids in _by_format([row[0] for row in table]).items()]
    out = []
    for step in range(steps):
        for fmt, ids in _by_format(table[step]).items():
            out.append({"format": fmt, "steps": str(step), **({} if len(ids) == layers else {"layers": _span(ids)})})
    return out


def write(path: Path, table: Table, description: str) -> Path:
    """Write `table` as a schedule file and read it back: the file resolves to exactly `table`."""
    lines = [f"description = {json.dumps(description)}"]
    for rule in rules(table):
        lines += ["", "[[rule]]", *(f"{key} = {json.dumps(value)}" for key, value in rule.items())]
    atomic_write_text(path, "\n".join(lines) + "\n")
    resolved = load_file(path).resolve(len(table), len(table[0]))
    if resolved.table != table:
        raise AssertionError(f"{path} does not resolve to the table it was written from")
    return path


def _by_format(row: list[str] | tuple[str, ...]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for index, fmt in enumerate(row):
        out.setdefault(fmt, []).append(index)
    return out


def _span(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the schedule's own term syntax)."""
    parts, start = [], ids[0]
    for prev, cur in zip(ids, [*ids[1:], -1]):
        if cur != prev + 1:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = cur
    return ",".join(parts)
