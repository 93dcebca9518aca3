"""impl="auto" runs the Gluon kernel only on a Triton that has it (the release it was tested on, or newer); an
older Triton runs the Triton kernel and says why."""
from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from fsbench.kernels import registry  # noqa: E402
from fsbench.kernels.hopper import launch  # noqa: E402


@pytest.fixture
def triton_version(monkeypatch):
    def use(version: str) -> str | None:
        monkeypatch.setattr(triton, "__version__", version)
        launch.gluon_missing.cache_clear()
        return launch.gluon_missing()
    yield use
    launch.gluon_missing.cache_clear()


def test_an_older_triton_is_named_with_the_release_to_install(triton_version):
    reason = triton_version("3.5.1")
    assert reason == "triton 3.5.1 is older than 3.6, the Gluon kernel's: pip install 'triton>=3.6'"


def test_the_installed_triton_has_gluon(triton_version):
    assert triton_version(triton.__version__) is None


def test_the_gpu_extra_asks_for_the_triton_the_gluon_kernel_needs():
    from pathlib import Path

    setup = (Path(__file__).resolve().parents[1] / "setup.cfg").read_text()
    assert f"triton>={'.'.join(map(str, launch.GLUON_TRITON))}" in setup


def test_off_hopper_auto_never_reports_a_gluon_fallback():
    assert registry.auto_fallback("mxfp8", torch.device("cpu"), 128) is None
    assert registry.resolve_impl("mxfp8", registry.AUTO, torch.device("cpu"), 128) == registry.EMULATE


def test_on_hopper_with_an_older_triton_auto_runs_the_triton_kernel_and_says_why(triton_version, monkeypatch):
    monkeypatch.setattr(registry, "device_capability", lambda device: (9, 0))
    cuda = torch.device("cuda")
    assert registry.resolve_impl("mxfp8", registry.AUTO, cuda, 128) == registry.GLUON
    assert registry.auto_fallback("mxfp8", cuda, 128) is None
    reason = triton_version("3.5.1")
    assert registry.resolve_impl("mxfp8", registry.AUTO, cuda, 128) == registry.TRITON
    assert registry.auto_fallback("mxfp8", cuda, 128) == f"impl='gluon': {reason}"
    assert registry.auto_fallback("bf16", cuda, 128) is None
