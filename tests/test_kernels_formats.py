"""Element codecs, E8M0 block scales and the Hadamard rotation, against hand-derived values."""
from __future__ import annotations

import pytest
import torch

from fsbench.kernels.reference.formats import (
    E2M1,
    E2M3,
    E4M3,
    quantize_elements,
    quantize_mx,
    quantize_p_fp8,
    quantize_per_tensor_fp8,
    representable_values,
)
from fsbench.kernels.reference.hadamard import hadamard_matrix, rotate

FORMATS = [E2M1, E2M3, E4M3]


def test_e2m1_has_exactly_the_ocp_values():
    assert representable_values(E2M1).tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def test_e2m3_and_e4m3_extremes_match_ocp():
    e2m3, e4m3 = representable_values(E2M3), representable_values(E4M3)
    assert (e2m3[1].item(), e2m3[-1].item(), len(e2m3)) == (0.125, 7.5, 32)
    assert (e4m3[1].item(), e4m3[-1].item(), len(e4m3)) == (2.0 ** -9, 448.0, 127)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_every_representable_value_round_trips(fmt):
    values = representable_values(fmt)
    both = torch.cat([values, -values])
    assert torch.equal(quantize_elements(both, fmt), both)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_ties_go_to_the_even_code(fmt):
    values = representable_values(fmt)  # index = code of the non-negative values
    mid = (values[:-1] + values[1:]) / 2
    even = torch.where(torch.arange(len(mid)) % 2 == 0, values[:-1], values[1:])
    assert torch.equal(quantize_elements(mid, fmt), even)
    assert torch.equal(quantize_elements(-mid, fmt), -even)


def test_e4m3_matches_torch_float8_cast_in_range():
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(0)) * 100
    x = x.clamp(-448, 448)
    assert torch.equal(quantize_elements(x, E4M3), x.to(torch.float8_e4m3fn).float())


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_saturates_to_max_normal(fmt):
    big = torch.tensor([fmt.max_normal * 1.2, 1e9, -1e9])
    assert quantize_elements(big, fmt).tolist() == [fmt.max_normal, fmt.max_normal, -fmt.max_normal]


def test_mx_scale_is_floor_log2_amax_minus_emax():
    # amax 5 in E2M1 (emax 2): scale 2^(2-2) = 1; 5 is a tie between 4 and 6 and goes to 4 (even).
    block = torch.zeros(32)
    block[:4] = torch.tensor([5.0, 0.3, -1.25, 2.6])
    out = quantize_mx(block, E2M1)
    assert out[:4].tolist() == [4.0, 0.5, -1.0, 3.0]
    # amax 7.9 in E2M1 lands in [4, 8): 7.9 saturates to 6 (the OCP rule clips the block maximum).
    block[0] = 7.9
    assert quantize_mx(block, E2M1)[0].item() == 6.0
    # amax 100 in E4M3 (emax 8): scale 2^(6-8) = 1/4; 400 ties between 384 and 416 and goes to 384.
    x = torch.full((32,), 0.0)
    x[0], x[1] = 100.0, 0.01
    assert quantize_mx(x, E4M3)[:2].tolist() == [96.0, 0.009765625]


def test_mx_zero_block_stays_zero_and_leaves_neighbours_alone():
    x = torch.cat([torch.zeros(32), torch.linspace(-3, 3, 32)])
    out = quantize_mx(x, E2M3)
    assert torch.equal(out[:32], torch.zeros(32))
    assert torch.equal(out[32:], quantize_mx(x[32:], E2M3))


def test_mx_works_on_any_axis_and_short_last_block():
    x = torch.randn(3, 70, 5, generator=torch.Generator().manual_seed(1))
    along_1 = quantize_mx(x, E2M1, axis=1)
    assert torch.equal(along_1, quantize_mx(x.transpose(1, 2), E2M1, axis=-1).transpose(1, 2))
    # the short tail block (70 = 2*32 + 6) has its own scale
    assert torch.equal(along_1[:, 64:], quantize_mx(x[:, 64:], E2M1, axis=1))


def test_p_fp8_scale_never_saturates_the_row_maximum():
    # floor(log2 500) - 7 = 1: 500 / 2 = 250 rounds to 256 (step 16 in [128, 256)), times 2 is 512,
    # where the MX rule (scale 2^0) would clip it to 448.
    p = torch.tensor([[500.0, 250.0, 1.0, 0.0]])
    assert quantize_p_fp8(p)[0].tolist() == [512.0, 256.0, 1.0, 0.0]
    assert quantize_mx(p, E4M3, block=4)[0, 0].item() == 448.0


def test_per_tensor_fp8_scale_maps_amax_to_448():
    x = torch.tensor([0.5, -2.0, 1.0])
    assert quantize_per_tensor_fp8(x).tolist() == [0.5, -2.0, 1.0]
    assert torch.equal(quantize_per_tensor_fp8(torch.zeros(4)), torch.zeros(4))


def test_hadamard_is_orthogonal_and_preserves_scores():
    h = hadamard_matrix(128, dtype=torch.float64)
    assert torch.allclose(h @ h.T, torch.eye(128, dtype=torch.float64), atol=1e-12)
    q, k = torch.randn(2, 16, 128, generator=torch.Generator().manual_seed(2)).unbind(0)
    assert torch.allclose(rotate(q) @ rotate(k).T, q @ k.T, atol=1e-4)


def test_hadamard_rejects_non_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        hadamard_matrix(96)
