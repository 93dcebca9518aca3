"""The proof a submission tree carries of what it was packaged from: in each scenario's accuracy folder, the
made_with record of every audit video (`made_with/<idx>.mp4.json`, the run's sidecar) and one digest file that
holds the sha256 of every video, the truncated accuracy log, accuracy.txt and every made_with record. It is in
`sha256sum`'s format, so `sha256sum -c` checks it as `fsbench submission --check` does; the check names the first
file that differs, so a swapped audit video, an edited line of the log or a forged record cannot pass unseen."""
from __future__ import annotations

import json
import re
from pathlib import Path

from fsbench.files import atomic_write_text
from fsbench.rundir import file_sha256

DIGESTS = "fsbench.sha256"  # beside the accuracy log, where MLPerf's checker reads only the files it knows
RECORDS = "made_with"
VIDEOS = "videos"
LOGS = ("mlperf_log_accuracy.json", "accuracy.txt")
_LINE = re.compile(r"([0-9a-f]{64})  ([A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)?)")


def covered(folder: Path) -> list[str]:
    """What the digest covers in an accuracy folder (relative paths): the audit videos and captions, the made_with
    records, the truncated log and accuracy.txt."""
    found = [name for name in LOGS if (folder / name).is_file() or (folder / name).is_symlink()]
    for sub in (VIDEOS, RECORDS):
        if (folder / sub).is_dir():
            found += sorted(f"{sub}/{p.name}" for p in (folder / sub).iterdir() if p.is_file() or p.is_symlink())
    return found


def write(folder: Path) -> Path:
    """Write the digest file of the accuracy folder `folder` from what it holds now (the tree just packaged)."""
    return atomic_write_text(folder / DIGESTS, "".join(f"{file_sha256(folder / name)}  {name}\n"
                                                       for name in covered(folder)))


def differences(folder: Path) -> list[tuple[str, str]]:
    """(file, why) for each file of the accuracy folder `folder` that is not as packaged, the digest file's order
    first: missing, other bytes, not in the digest, or a made_with record whose sha256 is not its video's."""
    path = folder / DIGESTS
    if not path.is_file():
        return [(DIGESTS, "missing: the tree records no digest of its videos, accuracy log and made_with records; "
                          "package it with `fsbench submission`")]
    recorded: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        match = _LINE.fullmatch(line)
        if not match or ".." in match.group(2).split("/"):
            return [(DIGESTS, f"line {number} is not '<sha256>  <file>' naming a file of this folder: package "
                              "the tree again")]
        recorded[match.group(2)] = match.group(1)
    found = []
    for name, digest in recorded.items():
        target = folder / name
        if target.is_symlink() or not target.is_file():
            found.append((name, "missing (or a link), but the digest records it"))
        elif file_sha256(target) != digest:
            found.append((name, "differs from the sha256 recorded when the tree was packaged"))
    found += [(name, "is not in the digest written when the tree was packaged") for name in covered(folder)
              if name not in recorded]
    for name in sorted(n for n in recorded if n.startswith(f"{RECORDS}/")):
        video = f"{VIDEOS}/{name[len(RECORDS) + 1:].removesuffix('.json')}"
        try:
            claimed = json.loads((folder / name).read_text(encoding="utf-8")).get("sha256")
        except (OSError, ValueError, AttributeError):
            claimed = None
        if video in recorded and claimed != recorded[video]:
            found.append((name, f"records a sha256 other than {video}'s: the record is not that video's"))
    return found
