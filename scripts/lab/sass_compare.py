#!/usr/bin/env python3
"""Compare the sm_90 SASS of two trees' attention kernels, compiled ahead of time (no GPU): a change meant to
leave the machine code alone (a refactor, a renamed constant) shows here as zero differing instructions.

Each tree compiles its own kernels with its own `fsbench kernels sass` in a subprocess (two copies of
`fsbench` cannot share one process; an older tree has `scripts/lab/sass_qgmma.py` instead); the variants both
trees know are compared after dropping addresses and encodings. The Triton found on PYTHONPATH compiles both
(put the device's Triton first to match it).

usage: python scripts/lab/sass_compare.py --old-tree DIR [--new-tree DIR] [--engine gluon|triton] [--json OUT]
(exit code 1 when any shared variant's instructions differ)
"""
from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
import tempfile

import click

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def compile_tree(tree: str, engine: str, out: str) -> dict[str, str]:
    """{variant: SASS} of `tree`'s kernels, compiled by its own `fsbench kernels sass` (or sass_qgmma.py)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    script = os.path.join(tree, "scripts", "lab", "sass_qgmma.py")
    command = [script] if os.path.exists(script) else ["-m", "fsbench", "kernels", "sass"]
    subprocess.run([sys.executable, *command, "--engine", engine, "--out", out], env=env, check=False,
                   capture_output=True, text=True)
    return {name[:-5]: open(os.path.join(out, name)).read() for name in sorted(os.listdir(out))
            if name.endswith(".sass")}


def instructions(sass: str) -> list[str]:
    """The instruction stream without addresses, encodings or branch-target labels."""
    out = []
    for line in sass.splitlines():
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m:
            out.append(re.sub(r"`\(\.L_x_\d+\)|0x[0-9a-f]+", "#", m.group(1)))
    return out


def opcode(instruction: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", instruction).split(" ", 1)[0]


@click.command(help=__doc__)
@click.option("--old-tree", required=True, type=click.Path(exists=True, file_okay=False), help="the reference tree")
@click.option("--new-tree", default=REPO, show_default=True, type=click.Path(exists=True, file_okay=False))
@click.option("--engine", default="gluon", type=click.Choice(["gluon", "triton"]), show_default=True)
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="write the comparison here")
def main(old_tree: str, new_tree: str, engine: str, json_out: str | None) -> None:
    import triton

    with tempfile.TemporaryDirectory() as work:
        old = compile_tree(os.path.abspath(old_tree), engine, os.path.join(work, "old"))
        new = compile_tree(os.path.abspath(new_tree), engine, os.path.join(work, "new"))
    rows = []
    for name in sorted(set(old) & set(new)):
        a, b = instructions(old[name]), instructions(new[name])
        diff = [d for d in difflib.ndiff(a, b) if d[:1] in "+-"]
        ops = [d for d in difflib.ndiff([opcode(x) for x in a], [opcode(x) for x in b]) if d[:1] in "+-"]
        rows.append({"variant": name, "old_instructions": len(a), "new_instructions": len(b),
                     "differing_instructions": len(diff), "differing_opcodes": len(ops)})
        print(f"{name:<24} old={len(a):>6} new={len(b):>6} differing instructions={len(diff):>5} "
              f"differing opcodes={len(ops):>5}")
    only = sorted(set(old) ^ set(new))
    if only:
        print(f"compiled by one tree only: {', '.join(only)}")
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"command": " ".join(sys.argv), "engine": engine, "triton": triton.__version__,
                       "target": "cuda sm_90", "variants": rows, "one_tree_only": only}, f, indent=2)
    sys.exit(0 if rows and all(r["differing_instructions"] == 0 for r in rows) else 1)


if __name__ == "__main__":
    main()
