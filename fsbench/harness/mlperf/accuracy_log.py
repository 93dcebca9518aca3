"""Truncating `mlperf_log_accuracy.json` for a submission, byte for byte as MLPerf's
`tools/submission/truncate_accuracy_log.py` does, so a reviewer can verify our hash with their tool.

The checker refuses an accuracy log over 10240 bytes; what stays is the first and last 4096 characters around
a `...` marker, and `accuracy.txt` gains a line `hash=<sha256 of the untruncated log>` (the only proof left
of what the full log held). Logs under 4096 bytes are kept whole but still get the hash line.
"""
from __future__ import annotations

import re
from pathlib import Path

from fsbench.files import atomic_write
from fsbench.rundir import file_sha256

MAX_SIZE = 10 * 1024
VIEWABLE = 4096
MARKER = b"\n\n...\n\n"
HASH_LINE = re.compile(r"^hash=([\w\d]+)$")


def truncated(data: bytes) -> bytes:
    """The reference tool's cut: head and tail of VIEWABLE bytes (LoadGen's JSON is ASCII, so bytes = chars)."""
    if len(data) < VIEWABLE:
        return data
    return data[:VIEWABLE] + MARKER + data[-VIEWABLE:]


def hash_value(accuracy_txt: str) -> str | None:
    """The `hash=` value of an accuracy.txt, matched one line at a time as the checker does."""
    for line in accuracy_txt.splitlines():
        match = HASH_LINE.match(line)
        if match:
            return match.group(1)
    return None


def write_truncated(source: Path, accuracy_dir: Path, accuracy_txt: str) -> str:
    """Write `accuracy_dir/{mlperf_log_accuracy.json, accuracy.txt}` from the full `source` log; returns the hash.

    `accuracy_txt` is the score text; the hash line is appended after it, as the reference tool appends it.
    """
    digest = file_sha256(source)
    body = accuracy_txt if accuracy_txt.endswith("\n") or not accuracy_txt else accuracy_txt + "\n"
    cut = truncated(source.read_bytes())
    atomic_write(accuracy_dir / "mlperf_log_accuracy.json", lambda tmp: tmp.write_bytes(cut))
    atomic_write(accuracy_dir / "accuracy.txt",
                 lambda tmp: tmp.write_text(f"{body}hash={digest}\n", encoding="utf-8"))
    return digest
