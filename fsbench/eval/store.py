"""Result files of eval, each written whole (`fsbench.files.atomic_write`), so an interrupted eval never leaves
half a file to resume from.

Non-finite numbers are stored as the strings "inf"/"-inf"/"nan": plain JSON has no Infinity, and an identical
video's PSNR is infinite and must stay visible as such.
"""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from fsbench import files


def write_text(path: Path, text: str) -> None:
    files.atomic_write_text(path, text)


def encode(value):
    """JSON-safe copy of `value`: non-finite floats become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    return value


def number(value) -> float | None:
    """A stored metric back as a float ("inf" -> inf); None stays None."""
    if value is None or value == "":
        return None
    return float(value)


def write_json(path: Path, data) -> None:
    write_text(path, json.dumps(encode(data), indent=2, ensure_ascii=False) + "\n")


def read_json(path: Path, default=None):
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):  # ValueError: invalid JSON or not UTF-8
        return default


def update_json(path: Path, section: str, data) -> None:
    """Replace one top-level section of a JSON file, keeping the others (fidelity and vbench share summary.json)."""
    current = read_json(path, {})
    current[section] = data
    write_json(path, current)


def write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else encode(row.get(k))) for k in columns})
    write_text(path, buffer.getvalue())
