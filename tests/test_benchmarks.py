"""benchmarks/: every campaign takes --out DIR, refuses in one line without it, and speaks of no limit but its own
work; the README lists every script there is."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
SHELL = sorted(p.name for p in BENCHMARKS.glob("*.sh"))


@pytest.mark.parametrize("name", SHELL)
def test_a_campaign_without_out_prints_its_usage_and_exits_2_before_any_work(name, tmp_path):
    done = subprocess.run(["bash", str(BENCHMARKS / name)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and done.stderr.startswith(f"usage: benchmarks/{name} --out DIR")
    assert done.stdout == "" and list(tmp_path.iterdir()) == []


def test_the_readme_names_every_campaign_and_lab_script():
    readme = (BENCHMARKS / "README.md").read_text()
    scripts = [p.relative_to(BENCHMARKS).as_posix() for p in BENCHMARKS.rglob("*") if p.suffix in (".sh", ".py")]
    listed = set(re.findall(r"^\| `([\w/]+\.(?:sh|py))", readme, re.MULTILINE))
    renderer = {"render.py", "baseline_tables.py"}  # the front page's renderer, named in its paragraph
    assert listed == set(scripts) - renderer and all(f"`{name}`" in readme for name in renderer)


def test_no_campaign_or_setup_script_speaks_of_a_command_limit_or_a_budget():
    # (the tuner's own --budget METRIC>=X, a fidelity bound, is no such budget)
    words = re.compile(r"\$OUT\b|(?i:--budget(?![ \"',]+[a-z]+[<>]=)|time limit|device[ ]call|\b600 s\b|10-minute)")
    hits = [f"{p.relative_to(REPO)}:{n}" for folder in ("benchmarks", "scripts") for p in (REPO / folder).rglob("*")
            if p.is_file() and p.suffix in (".sh", ".py", ".md")
            for n, line in enumerate(p.read_text().splitlines(), 1) if words.search(line)]
    assert hits == []
