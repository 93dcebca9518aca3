"""Shared fixtures and helpers. Keep this small: each test module owns the helpers only it needs."""
from __future__ import annotations

import importlib.util
import os
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each worker's torch (and every process it starts) runs on one thread, as `one_thread` does
    for one test: two workers with a thread per core each would oversubscribe a 2-core machine."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Test files with the most `slow` tests first, each file's own order kept: pytest-xdist hands whole files to
    its workers in this order, so the longest start early and the two workers finish close together."""
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The MLPerf data folder the product reads ($FSBENCH_DATA, which scripts/test.sh sets, else the user cache
    folder); tests needing it skip when it is absent."""
    from fsbench.paths import data_dir

    path = data_dir()
    if not (path / "vbench_prompts.txt").is_file():
        pytest.skip(f"no vbench_prompts.txt under {path}; set FSBENCH_DATA")
    return path


@pytest.fixture
def one_thread():
    """torch on one thread: on a shared 2-core machine this is several times faster for the tiny model."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def load_script(name: str, folder: str = "scripts") -> ModuleType:
    """<folder>/<name>.py (`name` may be `lab/<name>`) imported as a module (benchmarks/ and scripts/ are not
    packages)."""
    path = Path(__file__).resolve().parents[1] / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(Path(name).name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module
