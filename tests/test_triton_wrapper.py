"""Host side of the Hopper kernels, on the CPU: option resolution, shape and device checks, dispatch."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from fsbench import kernels
from fsbench.kernels.hopper import tiling
from fsbench.kernels.hopper.launch import D_BIAS, check_tensors, parse_options

from triton_interpreter import RNE_FP8, run_in_interpreter


def test_defaults_select_the_fused_pipeline_with_the_gate_at_32_doublings():
    opts = parse_options("mxfp8", {})
    assert opts.fused and opts.gate_doublings == 32 and opts.hadamard
    assert opts.gate_pattern == math.floor(128 * 32 + D_BIAS) == 20344


@pytest.mark.parametrize("options", [{"softmax": "conventional"},
                                     {"rowsum_gemm": False, "frozen_max": False, "schraudolph": False}])
def test_conventional_baseline_is_reachable_by_name_or_by_the_ablation_switches(options):
    assert not parse_options("mxfp8", options).fused


@pytest.mark.parametrize("options", [{"frozen_max": False}, {"schraudolph": False, "rowsum_gemm": False},
                                     {"softmax": "conventional", "frozen_max": True}, {"proxy": "u32"},
                                     {"gate_doublings": 0}, {"softmax": "online"}, {"tile_n": 64}])
def test_unimplemented_option_mixes_raise(options):
    with pytest.raises(ValueError):
        parse_options("mxfp8", options)


def test_gate_can_be_disabled_and_trips_are_then_counted_at_the_design_cap():
    opts = parse_options("mxfp6", {"gate_doublings": None})
    assert opts.gate_doublings is None and opts.gate_pattern == 20344


@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp3"])
def test_formats_outside_the_kernel_raise(fmt):
    with pytest.raises(ValueError):
        parse_options(fmt, {})


def test_conventional_baseline_is_mxfp8_only():
    with pytest.raises(ValueError, match="conventional"):
        parse_options("mxfp4", {"softmax": "conventional"})


def test_p_scale_rules_follow_the_emulator():
    assert parse_options("mxfp8", {}).p_format == (7, 0, False, False)
    assert parse_options("mxfp6", {}).p_format == (2, -5, True, True)  # E8M0 per 32 keys
    assert parse_options("mxfp4", {"mx_p_scale": "row"}).p_format == (2, 6, True, False)
    with pytest.raises(ValueError, match="mx_p_scale"):
        parse_options("mxfp6", {"mx_p_scale": "tile"})


def _bhsd(s=256, d=128, device="cpu"):
    return [torch.randn(1, 2, s, d, device=device) for _ in range(3)]


def test_cpu_tensors_are_refused_with_a_pointer_to_the_emulator():
    with pytest.raises(ValueError, match="emulate"):
        check_tensors(*_bhsd())


@pytest.mark.parametrize("shapes", [((1, 2, 64, 128), (1, 2, 64, 128), (1, 2, 32, 128)),
                                    ((1, 2, 64, 128), (1, 3, 64, 128), (1, 3, 64, 128)),
                                    ((1, 2, 64, 96), (1, 2, 64, 96), (1, 2, 64, 96))])
def test_shape_mismatches_and_unsupported_head_dims_raise(shapes):
    with pytest.raises(ValueError):
        check_tensors(*(torch.zeros(s) for s in shapes))


@pytest.mark.parametrize("impl", ["triton", "gluon"])
def test_attention_dispatches_impl_triton_and_gluon_to_the_wrapper(impl):
    q, k, v = (torch.randn(1, 64, 2, 128) for _ in range(3))
    with pytest.raises(ValueError, match="CUDA sm_90"):
        kernels.attention(q, k, v, "mxfp8", impl=impl)


@pytest.mark.parametrize("fmt,head_dim,hopper,expected", [
    ("mxfp8", 128, True, "gluon"), ("mxfp6", 64, True, "triton"), ("mxfp4", 128, False, "emulate"),
    ("bf16", 128, True, "sdpa")])
def test_auto_picks_gluon_on_hopper_at_head_dim_128_else_triton_or_emulator(fmt, head_dim, hopper, expected,
                                                                              monkeypatch):
    from fsbench.kernels import api, registry

    monkeypatch.setattr(registry, "device_capability", lambda device: (9, 0) if hopper else None)
    assert api.resolve_impl(fmt, "auto", torch.device("cpu"), head_dim) == expected
    assert api.resolve_impl(fmt, "triton", torch.device("cpu"), head_dim) == "triton"


def test_unknown_kernels_and_gluon_head_dim_64_are_refused():
    from fsbench.kernels.hopper.launch import GLUON_KERNEL, triton_attention

    with pytest.raises(ValueError, match="HopperKernel"):
        triton_attention(*_bhsd(), "mxfp8", kernel="cuda")
    with pytest.raises(ValueError, match="head_dim.*Triton kernel"):
        triton_attention(*_bhsd(d=64), "mxfp8", kernel=GLUON_KERNEL)


def test_bench_ratios_compare_each_row_with_the_baselines_of_its_own_shape():
    from fsbench.kernels.tools.bench import add_ratios

    measured = {"sdpa-cudnn-bf16": 500.0, "cudnn-fp8": 800.0, "triton-conventional-fp8": 750.0,
                "triton-fused-mxfp8": 825.0, "gluon-conventional-fp8": 600.0, "gluon-fused-mxfp6": 660.0}
    small, large = [1, 24, 32768, 128], [1, 40, 75600, 128]
    rows = add_ratios([{"row": name, "shape": small, "tflops": tflops} for name, tflops in measured.items()]
                      + [{"row": "cudnn-fp8", "shape": large, "tflops": 600.0},
                         {"row": "gluon-fused-mxfp6", "shape": large, "tflops": 690.0}])
    by = {(r["row"], tuple(r["shape"])): r for r in rows}
    at_small = {name: by[(name, tuple(small))] for name in measured}
    assert at_small["triton-fused-mxfp8"]["x_conventional"] == pytest.approx(1.1)
    assert at_small["gluon-fused-mxfp6"]["x_conventional"] == pytest.approx(1.1)
    assert at_small["gluon-fused-mxfp6"]["x_cudnn"] == pytest.approx(1.32)
    assert at_small["gluon-fused-mxfp6"]["x_cudnn_fp8"] == pytest.approx(0.825)
    assert at_small["sdpa-cudnn-bf16"]["x_conventional"] is None
    # the other shape has no BF16 or conventional row of its own: those ratios stay blank, not borrowed
    other = by[("gluon-fused-mxfp6", tuple(large))]
    assert other["x_cudnn_fp8"] == pytest.approx(1.15) and other["x_cudnn"] is None and other["x_conventional"] is None
    assert add_ratios([{"row": "gluon-fused-mxfp8", "tflops": 1.0}])[0]["x_conventional"] is None


def test_tiling_keeps_128_key_tiles_whole_warpgroups_and_prunes_by_shared_memory():
    configs = tiling.choose(128)
    assert configs and all(t.block_n == 128 and t.block_m == 16 * t.num_warps for t in configs)
    assert {t.block_m for t in configs} == {64, 128} and all(tiling.STAT_M % t.block_m == 0 for t in configs)
    assert all(tiling.keep(t, 128) for t in configs)
    capped = [t for t in configs if t.max_registers]
    assert all(3 * 32 * t.num_warps * t.max_registers <= 65536 for t in capped)
    assert not tiling.keep(tiling.Tiling(128, 128, 8, 8), 128)
    with pytest.raises(ValueError):
        tiling.choose(96)


def test_importing_the_wrapper_imports_no_triton():
    code = ("import sys, fsbench.kernels.hopper.launch, fsbench.kernels.hopper.tiling, fsbench.kernels.registry; "
            "assert 'triton' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


_INTERPRETER_SCRIPT = RNE_FP8 + '''
import json, sys
import fsbench.kernels.hopper.triton_fused as tf


@triton.jit
def _mark(ptr, need):
    tl.store(ptr + tl.zeros_like(need.to(tl.int32)), tl.full(need.shape, 1, tl.int8), mask=need)


tf._mark = _mark  # inline PTX does not run in the interpreter
autotuned = tf.attention_kernel
config = autotuned.configs[int(sys.argv[1])]


class FirstConfig:
    """The autotuner needs a GPU to time configs: launch the chosen one as it would."""

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            kwargs.update(config.kwargs)
            config.pre_hook({**dict(zip(autotuned.fn.arg_names, args)), **kwargs})
            autotuned.fn[grid(kwargs)](*args, **kwargs)
        return launch


tf.attention_kernel = FirstConfig()
from fsbench.kernels.tools import check
from fsbench.kernels.hopper import launch as ta
from fsbench.kernels.reference.emulator import emulate

out = {"block_m": config.kwargs["BM"]}
conventional = {"frozen_max": False, "schraudolph": False, "rowsum_gemm": False}
for name, fmt, opts, spikes in (("mxfp8", "mxfp8", {}, ()), ("conventional", "mxfp8", {"softmax": "conventional"}, ()),
                                ("mxfp6", "mxfp6", {}, ()), ("mxfp4", "mxfp4", {}, ()),
                                ("late-sink", "mxfp6", {}, ((290, 40.0),))):
    case = check.Case(name, (1, 1, 300, 128), {}, spikes)
    q, k, v = (t.half() for t in check.make_inputs(case, 0, "cpu"))  # the interpreter's bf16 dot is unreliable
    o = ta.parse_options(fmt, opts)
    got, flags, _ = ta.forward(q, k, v, o)
    ref, stats = emulate(q, k, v, fmt, **(conventional if not o.fused else {}))
    out[name] = {"rel": ((got.float() - ref.float()).norm() / ref.float().norm()).item(),
                 "flags": int(flags.sum()) if o.fused else 0, "rollbacks": stats.rollbacks}
q, k, v = (t.half() for t in check.make_inputs(check.Case("bshd", (1, 2, 200, 128), {}, ()), 0, "cpu"))
o = ta.parse_options("mxfp8", {})
dense = ta.forward(q, k, v, o)[0]
got = ta.forward(*(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)), o)[0]
out["bshd"] = {"equal": torch.equal(got, dense), "bshd_storage": got.transpose(1, 2).is_contiguous(),
               "bhsd_storage": dense.is_contiguous()}
print(json.dumps(out))
'''


@pytest.mark.slow
@pytest.mark.parametrize("config, block_m", [(0, 128), (1, 64)])
def test_kernels_match_the_emulator_in_the_triton_interpreter(tmp_path, config, block_m):
    """The kernel bodies on the CPU (TRITON_INTERPRET=1), FP8 casts made RNE, against the emulator, with
    128 and 64 query rows per program (two 64-row programs share one statistics tile); and BSHD views, whose
    output the kernel writes BSHD through its strides."""
    res = run_in_interpreter(tmp_path, _INTERPRETER_SCRIPT, str(config))
    assert res["block_m"] == block_m
    assert res["mxfp8"]["rel"] < 5e-4 and res["conventional"]["rel"] < 1e-3
    # block-scaled MX P on the pattern grid: the emulator's patterns, codes and sums, so the same output bit for bit
    assert res["mxfp6"]["rel"] == 0 and res["mxfp4"]["rel"] == 0
    assert res["late-sink"]["flags"] == res["late-sink"]["rollbacks"] > 0 and res["late-sink"]["rel"] < 1e-3
    # BSHD views in, the output written BSHD underneath (no copy back), the same values as from BHSD tensors
    assert res["bshd"] == {"equal": True, "bshd_storage": True, "bhsd_storage": True}


_PREPASS_ORDER_SCRIPT = '''
import json
import torch
from fsbench.kernels.hopper import launch as ta

torch.manual_seed(0)
q, k, v = (torch.randn(1, 1, 300, 128).half() for _ in range(3))
opts = ta.parse_options("mxfp6", {})
pv, thread = ta.quantize(q, k, v, opts, ta.TRITON_KERNEL), ta.quantize(q, k, v, opts, ta.GLUON_KERNEL)
print(json.dumps({name: {"k": t["k"][0].float().tolist(), "v": t["v"][0].float().tolist(),
                         "k_scale": t["k_scale"].tolist(), "v_scale": t["v_scale"].tolist()}
                  for name, t in (("pv", pv), ("thread", thread))}))
'''


@pytest.mark.slow
def test_gluon_key_order_gives_each_quad_thread_one_mx_block_and_v_follows_its_keys(tmp_path):
    """The prepass in the Triton interpreter, Triton's key order against Gluon's: every key of a 128-key tile
    lands on a score column that the wgmma accumulator hands to quad thread (column >> 1) & 3, and that thread
    must be the key's MX block; V's copy of the key sits at the k position `_pv_order` gives that column
    (16h + 8e + 2t + j -> 16h + 4t + 2e + j in each 32-column block). 300 keys: a short last tile."""
    import torch

    res = run_in_interpreter(tmp_path, _PREPASS_ORDER_SCRIPT)
    k_pv, k_thread = torch.tensor(res["pv"]["k"]), torch.tensor(res["thread"]["k"])
    v_pv, v_thread = torch.tensor(res["pv"]["v"]), torch.tensor(res["thread"]["v"])
    assert res["pv"]["k_scale"] == res["thread"]["k_scale"] and res["pv"]["v_scale"] == res["thread"]["v_scale"]

    def pv_position(c: int) -> int:
        h, e, t, j = (c >> 4) & 1, (c >> 3) & 1, (c >> 1) & 3, c & 1
        return (c & ~31) | (h << 4) | (t << 2) | (e << 1) | j

    # Triton's order: K as it comes, V's key r at pv_position(r)
    for tile in range(3):
        base = 128 * tile
        for r in range(128):
            key = base + r
            matches = [c for c in range(128) if torch.equal(k_thread[base + c], k_pv[key])]
            if key >= 300:  # padding: zero rows, no key to find
                assert torch.count_nonzero(k_pv[key]) == 0
                continue
            assert len(matches) == 1, (key, matches)
            c = matches[0]
            assert (c >> 1) & 3 == r // 32
            assert torch.equal(v_thread[:, base + pv_position(c)], v_pv[:, base + pv_position(r)])


_PREPASS_VALUES_SCRIPT = RNE_FP8 + '''
import json
from fsbench.kernels.hopper import launch as ta
from fsbench.kernels.reference.emulator import EmulatorOptions, quantize_operands


def stored_row(r: int, order: str, tensor: str) -> int:
    """Where key r of a 128-key tile is stored (the KEY_ORDERS comment, written out bit by bit)."""
    c, a, b, d, e = r >> 5, (r >> 3) & 3, (r >> 2) & 1, (r >> 1) & 1, r & 1
    if order == "triton":
        return r if tensor == "k" else (r & ~15) | (((r >> 1) & 3) << 2) | (((r >> 3) & 1) << 1) | e
    return 32 * a + 16 * b + (8 * d + 2 * c if tensor == "k" else 4 * c + 2 * d) + e


torch.manual_seed(0)
b, h, s, d = 1, 2, 300, 128  # a short last tile (300 = 2 x 128 + 44); K and V of BSHD views
q = torch.randn(b, h, s, d).half()  # the interpreter's bf16 dot is unreliable
k, v = (torch.randn(b, s, h, d).half().transpose(1, 2) * 3 for _ in range(2))
keys = range(128 * -(-s // 128))
stored = {(engine, name): torch.tensor([r & ~127 | stored_row(r & 127, engine, name) for r in keys])
          for engine in ("triton", "gluon") for name in "kv"}


def tile_scale(x):
    return x.repeat_interleave(128, dim=-1)[..., :s]


out = {}
kernels = {"triton": ta.TRITON_KERNEL, "gluon": ta.GLUON_KERNEL}
for fmt in ("mxfp8", "mxfp6", "mxfp4"):
    for engine in ("triton", "gluon"):
        for hadamard in (False, True):
            t = ta.quantize(q, k, v, ta.parse_options(fmt, {"hadamard": hadamard}), kernels[engine])
            emu = quantize_operands(q, k, v, fmt, EmulatorOptions(hadamard=hadamard))
            k_keys, v_keys = t["k"].float()[:, stored[engine, "k"]], t["v"].float()[:, :, stored[engine, "v"]]
            got = {"q": (t["q"].float() * t["q_scale"][..., None])[:, :s],
                   "k": k_keys[:, :s] * tile_scale(t["k_scale"])[..., None],
                   "v": (v_keys[:, :, :s] * tile_scale(t["v_scale"])[:, None, :]).transpose(1, 2)}
            want = dict(zip("qkv", (x.reshape(b * h, s, d) for x in emu)))
            case = out[f"{fmt}/{engine}/{hadamard}"] = {
                name: {"max_diff_over_max": ((got[name] - want[name]).abs().max() / want[name].abs().max()).item(),
                       "mismatches": int((got[name] != want[name]).sum())} for name in "qkv"}
            case["padding_nonzero"] = int(torch.count_nonzero(k_keys[:, s:]) + torch.count_nonzero(v_keys[:, :, s:]))
print(json.dumps(out))
'''


@pytest.mark.slow
def test_prepass_operands_dequantize_to_the_emulators_quantized_operands(tmp_path):
    """The prepass in the Triton interpreter against `emulator.quantize_operands`, in both key orders, on
    BSHD views with a short last tile. Without the rotation the dequantized operands equal the emulator's
    exactly, except MXFP8's Q and K, whose E4M3 re-encoding under one scale per row (Q) or key tile (K) may lose
    the low bits of a block far below the group (module docstring of `kernels.hopper.prepass`): at most half of
    E4M3's smallest subnormal at the group's scale, under 2^-18 of the group's maximum (asserted against the
    tensor's). With the rotation the prepass rotates in a 16-bit MMA where the emulator rotates in float32 (fp16
    inputs: the interpreter's bf16 dot is unreliable): a rare element rounds to its neighbour, one step of the
    element format away."""
    res = run_in_interpreter(tmp_path, _PREPASS_VALUES_SCRIPT)
    assert len(res) == 12
    for key, ops in res.items():
        fmt, _, hadamard = key.split("/")
        assert ops.pop("padding_nonzero") == 0, key
        for name, cmp in ops.items():
            if hadamard == "True":
                assert cmp["mismatches"] <= 1e-3 * 2 * 300 * 128, (key, name, cmp)
                assert cmp["max_diff_over_max"] < 2.0 ** -3, (key, name, cmp)
            elif fmt == "mxfp8" and name in "qk":
                assert cmp["max_diff_over_max"] < 2.0 ** -18, (key, name, cmp)
            else:
                assert cmp["mismatches"] == 0, (key, name, cmp)
