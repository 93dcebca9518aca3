"""The cudnn-fp8 reference row on the host: its input checks and how the bench treats a missing package."""
from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from fsbench.harness.cli import main
from fsbench.kernels.tools import cudnn_fp8


@pytest.mark.parametrize("shapes, message", [
    (((2, 64, 128), (1, 2, 64, 128), (1, 2, 64, 128)), "4-D"),
    (((1, 2, 64, 128), (1, 2, 64, 64), (1, 2, 64, 64)), "disagree"),
    (((1, 2, 64, 128), (1, 3, 64, 128), (1, 3, 64, 128)), "disagree"),
    (((1, 2, 64, 128), (1, 2, 64, 128), (1, 2, 32, 128)), "disagree"),
    (((1, 2, 64, 128), (1, 2, 64, 128), (1, 2, 64, 128)), "CUDA"),
])
def test_bad_inputs_are_refused_before_any_cudnn_work(shapes, message):
    q, k, v = (torch.zeros(s, dtype=torch.bfloat16) for s in shapes)
    with pytest.raises(ValueError, match=message):
        cudnn_fp8.cudnn_fp8_attention(q, k, v)


def test_scales_map_the_largest_magnitude_to_e4m3s_largest_value():
    x = torch.tensor([[-3.0, 1.5], [0.25, 2.0]])
    scale, descale = cudnn_fp8._scales(x)
    assert scale.shape == (1, 1, 1, 1) and descale.item() == pytest.approx(3.0 / 448.0)
    assert (x * scale).abs().max().item() == pytest.approx(448.0)
    assert cudnn_fp8._scales(torch.zeros(3))[1].item() == 1.0  # an all-zero tensor keeps scale 1, not inf


def test_bench_refuses_the_cudnn_row_by_name_without_its_package(monkeypatch):
    monkeypatch.setattr(cudnn_fp8, "available", lambda: False)
    result = CliRunner().invoke(main, ["kernels", "bench", "--rows", "sdpa-cudnn-bf16,cudnn-fp8"])
    assert result.exit_code == 2 and "pip install nvidia-cudnn-frontend" in result.output


def test_bench_rows_offer_the_cudnn_row_only_where_it_can_run(monkeypatch):
    from fsbench.kernels.tools import bench

    monkeypatch.setattr(cudnn_fp8, "available", lambda: False)
    selected, left_out = bench.select_rows(None)
    assert "cudnn-fp8" in {r.name for r in left_out} and "cudnn-fp8" not in {r.name for r in selected}
    monkeypatch.setattr(cudnn_fp8, "available", lambda: True)
    selected, left_out = bench.select_rows(None)
    assert "cudnn-fp8" not in {r.name for r in left_out} and "cudnn-fp8" in {r.name for r in selected}
