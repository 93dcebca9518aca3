"""The house: one import package whose rooms import one way, a cheap `import fsbench`, a results folder that is
data, and no words of how the project is developed in any tracked file."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "fsbench"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Every fsbench module -> the fsbench modules it imports, wherever the import stands (module level, inside a
    function, under TYPE_CHECKING). `from P import name` points at P.name where that is a module, else at P."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in files)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    edges.add(target if target in files else base)
        graph[module] = {e for e in edges if e in files and e != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_walker_sees_imports_inside_functions_and_under_type_checking(tmp_path, monkeypatch):
    package = tmp_path / "fsbench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fsbench import b\n")
    (package / "b.py").write_text("def f():\n    from fsbench.a import x\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    assert _cycles(_import_graph()) == [["fsbench.a", "fsbench.b"]]


def test_fsbench_has_no_import_cycles():
    assert _cycles(_import_graph()) == []


@pytest.mark.parametrize("room, forbidden", [
    ("fsbench.eval", ("fsbench.harness", "fsbench.kernels")),
    ("fsbench.kernels", ("fsbench.harness", "fsbench.eval")),
])
def test_a_room_imports_nothing_of_the_rooms_it_must_not_know(room, forbidden):
    leaks = {m: sorted(e for e in edges if e.startswith(forbidden))
             for m, edges in _import_graph().items() if m == room or m.startswith(room + ".")}
    assert {m: e for m, e in leaks.items() if e} == {}


def test_kernels_import_neither_diffusers_nor_loadgen():
    for path in (PACKAGE / "kernels").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n.split(".")[0] in ("diffusers", "mlperf_loadgen", "transformers")], path


def test_import_fsbench_is_cheap_and_reaches_the_kernels_lazily():
    code = ("import sys, fsbench; heavy = [m for m in ('torch', 'diffusers', 'fsbench.kernels') if m in sys.modules]; "
            "print(heavy, fsbench.__version__); print(fsbench.attention.__module__)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert run.returncode == 0, run.stderr
    first, second = run.stdout.splitlines()
    assert first.startswith("[] ") and second == "fsbench.kernels"


_PROCESS_WORDS = re.compile(
    r"session[ _-]?[0-9]|round[ _-]?[0-9]|call[0-9]|\.[c]arry|\bissues? ?#?[0-9]+|(?<![\w&#)])#[0-9]+\b", re.IGNORECASE)


def _tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            text=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    return [name for name in listed.stdout.splitlines() if (REPO / name).is_file()]


def test_the_process_word_pattern_finds_what_it_is_for():
    # the samples are assembled, so this file's own text holds none of the words it looks for
    found = [t for t in (f"session {12}", f"Session_{3}", "round-2", "call4", f".{'carry'}/x", f"issue #{22}", "see #7")
             if _PROCESS_WORDS.search(t)]
    missed = [t for t in ("color: #fff", "a round of 3", "callback", "sessionless", "&#39;")
              if _PROCESS_WORDS.search(t)]
    assert len(found) == 7 and missed == []


def test_no_tracked_file_speaks_of_how_the_project_is_developed():
    hits = []
    for name in _tracked_files():
        if _PROCESS_WORDS.search(name):
            hits.append(f"{name} (name)")
            continue
        data = (REPO / name).read_bytes()
        if b"\0" in data[:4096]:
            continue
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            match = _PROCESS_WORDS.search(line)
            if match and name != "tests/test_package.py":
                hits.append(f"{name}:{number}: {match.group(0)!r}")
    assert hits == []


def test_results_hold_data_only_and_open_with_the_headline_tables():
    code = [n for n in _tracked_files() if n.startswith("results/") and n.endswith((".py", ".sh", ".ipynb"))]
    assert code == []
    lines = (REPO / "results" / "README.md").read_text(encoding="utf-8").splitlines()
    first_table = next(i for i, line in enumerate(lines) if line.startswith("|"))
    assert first_table < 15, "the front page opens with a table"
    links = re.findall(r"\]\(([^)#]+)\)", "\n".join(lines))
    missing = [link for link in links if "://" not in link and not (REPO / "results" / link).exists()]
    assert links and missing == []


def test_no_module_beside_the_vbench_runner_shadows_the_standard_library():
    """vbench_runner.py runs as a script in VBench's own environment, so its folder comes first on sys.path there: a
    module named like a standard one (html.py did) would replace it for VBench and its dependencies."""
    names = {p.stem for p in (PACKAGE / "eval").glob("*.py")} | {p.name for p in (PACKAGE / "eval").iterdir()
                                                                if p.is_dir() and p.name != "__pycache__"}
    assert names & set(sys.stdlib_module_names) == set()
