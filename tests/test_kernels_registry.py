"""The registry is the one place that names an attention implementation: the CLI offers its names, `auto` picks
from its table, and no other module of the package spells a name out."""
from __future__ import annotations

import ast
from pathlib import Path

import click
import pytest
import torch

import fsbench
from fsbench import kernels
from fsbench.harness.cli import main
from fsbench.kernels import registry

PACKAGE = Path(fsbench.__file__).parent


def _choices(command: click.Command, option: str) -> tuple[str, ...]:
    param = next(p for p in command.params if option in p.opts)
    return tuple(param.type.choices)


def test_cli_offers_the_registry_names_for_a_run_and_for_the_kernel_check():
    impls = _choices(main.commands["run"], "--impl")
    assert impls == registry.RUN_CHOICES
    assert set(impls) == {registry.AUTO} | {i.name for i in registry.TABLE if set(i.formats) - {"bf16"}}
    assert _choices(main.commands["kernels"].commands["check"], "--impl") == registry.HOPPER
    assert set(registry.HOPPER) == {i.name for i in registry.TABLE if i.hopper is not None} and registry.HOPPER


_PACKAGE_LOOKUPS = {"version", "_version", "find_spec", "import_module"}


def _distribution_lists(tree: ast.AST) -> set[int]:
    """ids of string constants that name a Python distribution, where "triton" is the package, not the kernel:
    inside a tuple or list that also names torch (the environment record), or the argument of a package lookup
    (`version("triton")`, `find_spec("triton")`)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List)) and any(
                isinstance(e, ast.Constant) and e.value == "torch" for e in node.elts):
            skip |= {id(e) for e in node.elts}
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in _PACKAGE_LOOKUPS:
                skip |= {id(a) for a in node.args if isinstance(a, ast.Constant)}
    return skip


def _attribute_names(tree: ast.AST) -> set[int]:
    """ids of string constants that name a Python attribute, where "sdpa" is the package's function, not the
    kernel: the elements of `__all__`, and a lazy export's name with its (module, attribute) pair."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            skip |= {id(e) for e in getattr(node.value, "elts", [])}
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(value, ast.Tuple) and isinstance(value.elts[0], ast.Constant) and str(
                        value.elts[0].value).startswith("fsbench."):
                    skip |= {id(key), *(id(e) for e in value.elts)}
    return skip


def test_no_module_but_the_registry_spells_an_implementation_name():
    """Every string constant of every module in the package (docstrings, messages and comments are longer
    strings or no constants at all, and import statements hold names, not strings). "auto" is left out: it is
    the table's keyword for "choose", and other options (`--device auto`) use the same word."""
    names = {impl.name for impl in registry.TABLE}
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "kernels" / "registry.py":
            continue
        tree = ast.parse(path.read_text())
        skip = _distribution_lists(tree) | _attribute_names(tree)
        hits += [f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and node.value in names and id(node) not in skip]
    assert hits == []


def test_the_check_sees_a_name_spelled_outside_the_registry(tmp_path):
    """The AST scan above is not blind: a module that compares with a literal name is caught."""
    tree = ast.parse(f"def f(impl):\n    return impl == {registry.GLUON!r}\n")
    found = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == registry.GLUON]
    assert found == [registry.GLUON] and not _distribution_lists(tree)


@pytest.mark.parametrize("capability,head_dim,fmt,expected", [
    ((9, 0), 128, "mxfp8", registry.GLUON), ((9, 0), 64, "mxfp6", registry.TRITON),
    ((8, 0), 128, "mxfp8", registry.EMULATE), (None, 128, "mxfp4", registry.EMULATE),
    ((9, 0), 128, "bf16", registry.SDPA), (None, 64, "bf16", registry.SDPA)])
def test_auto_takes_the_first_entry_of_the_table_that_can_run_the_call(capability, head_dim, fmt, expected,
                                                                     monkeypatch):
    monkeypatch.setattr(registry, "device_capability", lambda device: capability)
    assert kernels.resolve_impl(fmt, registry.AUTO, torch.device("cpu"), head_dim) == expected


@pytest.mark.parametrize("impl,fmt,message", [(registry.SDPA, "mxfp8", "computes bf16, not mxfp8"),
                                              (registry.GLUON, "mxfp8", "head_dim"),
                                              (registry.TRITON, "mxfp4", "CUDA sm_90 GPU, not cpu")])
def test_an_implementation_that_cannot_run_the_call_says_why_before_any_work(impl, fmt, message):
    head_dim = 64 if impl == registry.GLUON else 128
    q, k, v = (torch.randn(1, 16, 2, head_dim) for _ in range(3))
    with pytest.raises(ValueError, match=message):
        kernels.attention(q, k, v, fmt, impl=impl)


def test_unknown_names_are_refused_with_the_known_ones():
    q = torch.randn(1, 16, 2, 64)
    with pytest.raises(ValueError, match="expected one of " + ", ".join(registry.IMPLS)):
        kernels.attention(q, q, q, "mxfp8", impl="cuda")
