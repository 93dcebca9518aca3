"""Reading a file the user names (a plan, schedule, preset, prompt list, cost or profile JSON) with a size limit: a
file that never ends (`/dev/zero`, a fifo fed forever) or is far larger than any such file is one line naming it, not
a MemoryError after minutes."""
from __future__ import annotations

from pathlib import Path

from fsbench.errors import FsbenchError

MAX_BYTES = 16 << 20  # 16 MiB: MLPerf's 248 prompts are 30 kB, a bench JSON of every shape a few hundred kB


def read_text(path: Path, what: str) -> str:
    """`path` decoded as UTF-8 (a byte-order mark dropped); `what` names it in the error ("plan", "prompts file").

    FsbenchError past MAX_BYTES; OSError and UnicodeDecodeError are left to the caller, whose message knows the
    file's form."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise FsbenchError(f"{what} {path} holds more than {MAX_BYTES >> 20} MiB (or never ends): pass the right "
                           "file")
    return data.decode("utf-8-sig")
