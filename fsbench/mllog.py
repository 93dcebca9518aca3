"""LoadGen's detail log (`mlperf_log_detail.txt`, one `:::MLLOG {json}` record a line), read in one place for the
harness (the run summary, the submission rules) and eval (the latency columns of older runs).

Read here, not with MLCommons' mlperf-logging (whose training-rules parser reads these lines too), because that package
brings pandas and scipy into the base install for what is one json.loads a line.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MARKER = ":::MLLOG"


@dataclass(frozen=True)
class MLLog:
    """The last value of every key, the messages LoadGen flagged as errors, and whether the first line
    carries the marker (the official checker refuses a detail log that does not start with it)."""

    values: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    marked: bool = False


def read(path: Path | str) -> MLLog:
    """Every well-formed record of `path`; lines that are not records (a run killed mid-line, text around the log)
    are skipped, so a damaged log reads as one with fewer keys, never as an exception."""
    log = MLLog()
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines):
            if not line.startswith(MARKER):
                continue
            if number == 0:
                log = MLLog(marked=True)
            try:
                entry = json.loads(line[len(MARKER):])
            except json.JSONDecodeError:
                continue
            if not isinstance(entry, dict) or "key" not in entry:
                continue
            log.values[entry["key"]] = entry.get("value")
            metadata = entry.get("metadata")
            if isinstance(metadata, dict) and metadata.get("is_error"):
                log.errors.append(str(entry.get("value")))
    return log
