"""impl="auto" runs the Gluon kernel only on a Triton that has it (the release it was tested on, or newer); an
older Triton runs the Triton kernel and says why."""
from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from fsbench.kernels import api  # noqa: E402


@pytest.fixture
def triton_version(monkeypatch):
    def use(version: str) -> str | None:
        monkeypatch.setattr(triton, "__version__", version)
        api.gluon_missing.cache_clear()
        return api.gluon_missing()
    yield use
    api.gluon_missing.cache_clear()


def test_an_older_triton_is_named_with_the_release_to_install(triton_version):
    reason = triton_version("3.5.1")
    assert reason == "triton 3.5.1 is older than 3.6, the Gluon kernel's: pip install 'triton>=3.6'"


def test_the_installed_triton_has_gluon(triton_version):
    assert triton_version(triton.__version__) is None


def test_the_gpu_extra_asks_for_the_triton_the_gluon_kernel_needs():
    from pathlib import Path

    setup = (Path(__file__).resolve().parents[1] / "setup.cfg").read_text()
    assert f"triton>={'.'.join(map(str, api.GLUON_TRITON))}" in setup


def test_off_hopper_auto_never_reports_a_gluon_fallback():
    assert api.gluon_fallback("mxfp8", "auto", torch.device("cpu"), 128) is None
    assert api.resolve_impl("mxfp8", "auto", torch.device("cpu"), 128) == "emulate"
