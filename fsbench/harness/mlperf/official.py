"""MLCommons' own submission checker, run from the user's checkout of mlcommons/inference on the same tree that
fsbench's rules (`harness.mlperf.rules`) checked, so both verdicts are shown side by side.

The checker is not on PyPI (it lives in that repository's tools/submission), so fsbench runs it where the user keeps
it, in a subprocess with this interpreter, and writes its summary.csv into a temporary folder, never the checkout.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from fsbench.errors import FsbenchError

VERSION = "v6.1"
ENTRY = Path("submission_checker") / "main.py"
TOOLS = Path("tools") / "submission"
PASSED = "SUMMARY: submission looks OK"
ERROR_LINE = re.compile(r"^(?:\[[^\]]* ERROR\]|ERROR:[\w.]+:)\s*(.*)$")  # its log format, or logging's default
TIMEOUT_S = 1800


@dataclass(frozen=True)
class Verdict:
    """The checker's answer: whether it passed the tree, its summary line and every error it logged."""

    ok: bool
    summary: str
    errors: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        if self.ok:
            return f"official checker: {self.summary}"
        first = f"; first: {self.errors[0][:200]}" if self.errors else ""
        return f"official checker: {self.summary} ({len(self.errors)} error(s){first})"


def tools_dir(checkout: Path) -> Path:
    """tools/submission of an mlcommons/inference checkout (PATH may name that folder itself); a one-line error
    naming PATH when neither holds the checker."""
    checkout = Path(checkout)
    for folder in (checkout / TOOLS, checkout):
        if (folder / ENTRY).is_file():
            return folder.resolve()
    raise FsbenchError(f"--official-checker {checkout}: no {TOOLS / ENTRY} there; pass the folder of a checkout "
                       "of https://github.com/mlcommons/inference")


def check(tools: Path, root: Path) -> Verdict:
    """Run the checker of `tools` (see `tools_dir`) on the submission `root` for MLPerf Inference v6.1."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(tools), os.environ.get("PYTHONPATH"))))}
    with tempfile.TemporaryDirectory(prefix="fsbench-checker-") as scratch:
        try:
            done = subprocess.run([sys.executable, "-m", "submission_checker.main", "--input",
                                   str(Path(root).resolve()), "--version", VERSION, "--csv",
                                   str(Path(scratch) / "summary.csv")],
                                  cwd=scratch, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return Verdict(False, f"did not finish in {TIMEOUT_S} s")
    lines = (done.stdout + done.stderr).splitlines()
    where = str(Path(root).resolve()) + os.sep
    errors = [m.group(1).replace(where, "") for m in map(ERROR_LINE.match, lines)
              if m and not m.group(1).startswith("SUMMARY:")]
    if done.returncode == 0 and any(PASSED in line for line in lines):
        return Verdict(True, "submission looks OK", errors)
    if not any("SUMMARY:" in line for line in lines):  # it stopped before its verdict: the last line says why
        return Verdict(False, f"stopped with an error (exit {done.returncode})", lines[-1:])
    return Verdict(False, f"refused the tree (exit {done.returncode})", errors)
