"""The Gluon kernel compiled ahead of time for sm_90 (Triton's bundled ptxas; no GPU): the schedule the
H200 figures depend on is checked in the SASS on every CI run, not only on the device."""
from __future__ import annotations

import re

import pytest

from conftest import load_script


@pytest.fixture(scope="module")
def sass_tool():
    return load_script("lab/sass_qgmma")


@pytest.fixture(scope="module")
def gluon_fused_sass(sass_tool, tmp_path_factory) -> str:
    kernel = sass_tool.compile_variant(sass_tool.VARIANTS["fused-mxfp8"], engine="gluon")
    return sass_tool.sass_of(kernel.asm["cubin"], str(tmp_path_factory.mktemp("sass")), "fused-mxfp8")


def test_gluon_kernel_runs_both_gemms_on_fp8_wgmma_without_spills(gluon_fused_sass):
    ops = [line for line in gluon_fused_sass.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", line)]
    assert any("QGMMA.64x128x32.F32.E4M3.E4M3" in op for op in ops)  # QK and PV
    assert any("QGMMA.64x8x32.F32.E4M3.E4M3" in op for op in ops)  # the row-sum MMA, wgmma's narrowest N
    # the per-element state fits in 240 registers: Triton 3.6 (the H200 figures) spills nothing, 3.8 three
    # 32-bit loop bounds (3 STL before the loop, 4 LDL in it); a spilled tensor would add wide or many accesses
    spills = [op for op in ops if re.search(r"\b(STL|LDL)", op)]
    assert len(spills) <= 8 and not any(re.search(r"\b(STL|LDL)\.(64|128)\b", op) for op in spills)
    assert not any("MUFU.EX2" in op for op in ops)  # the fused policy's exponential stays off the MUFU pipe


def test_gluon_math_warpgroups_take_turns_through_named_barriers(gluon_fused_sass):
    """Each math warpgroup waits at its own barrier (8 or 9, 256 threads) and arrives at the other's."""
    bars = re.findall(r"BAR\.(SYNC\.DEFER_BLOCKING|ARV) (0x[89]), 0x100", gluon_fused_sass)
    assert {("SYNC.DEFER_BLOCKING", "0x8"), ("SYNC.DEFER_BLOCKING", "0x9"), ("ARV", "0x8"), ("ARV", "0x9")} <= set(bars)
    assert "USETMAXREG" in gluon_fused_sass  # registers moved from the TMA warpgroup to the math ones


def test_gluon_fused_policy_feeds_p_from_shared_memory_and_skips_the_rescale_by_warp_vote(gluon_fused_sass):
    """P reaches the PV and row-sum GEMMs through shared memory (stmatrix, then every QGMMA reads both operands
    by descriptor), and the O rescale sits behind a warp vote (the schedule measured in results/log/)."""
    qgmma = re.findall(r"QGMMA\.\S+ R\d+, (\w+)", gluon_fused_sass)
    assert qgmma and set(qgmma) == {"gdesc"}
    assert "STSM" in gluon_fused_sass
    assert "VOTE.ANY" in gluon_fused_sass


def test_gluon_mx_block_p_takes_its_block_maxima_without_shuffles_and_its_clamp_from_the_ffma(sass_tool, tmp_path,
                                                                                             gluon_fused_sass):
    """Exact block-scaled MX P: each quad thread holds one MX block per row (the prepass's key order), so the block
    maxima cost no shuffle beyond mxfp8's row maximum; the E2M3 clamp is the Stage-A FFMA's .sat (no HMNMX2, no
    per-value integer min); the block's power of two is one E4M3->f16x2 convert, one HMUL2 and one convert back per
    two values."""
    kernel = sass_tool.compile_variant(sass_tool.VARIANTS["fused-mx-p-e2m3-block"], engine="gluon")
    sass = sass_tool.sass_of(kernel.asm["cubin"], str(tmp_path), "fused-mx-p-e2m3-block")
    counts = {op: len(re.findall(rf"\b{re.escape(op)}\b", sass))
              for op in ("F2FP.F16.E4M3.UNPACK_B", "HMUL2", "F2FP.SATFINITE.E4M3.F16.UNPACK_B_MERGE_C")}
    assert len(set(counts.values())) == 1 and counts["HMUL2"] > 0, counts
    assert "HMNMX2" not in sass and len(re.findall(r"\bVIMNMX\b", sass)) < counts["HMUL2"]
    assert "FFMA.SAT" in sass
    shuffles = [len(re.findall(r"\bSHFL\.", text)) for text in (sass, gluon_fused_sass)]
    assert shuffles[0] == shuffles[1] > 0, shuffles


def test_gluon_skeleton_keeps_both_fp8_gemms_and_the_schedule_and_drops_the_softmax(sass_tool, tmp_path,
                                                                                   gluon_fused_sass):
    """The skeleton row measures the fused kernel's schedule without its softmax: the same QGMMAs and named-barrier
    turns, and less per-element work (no row maximum, Stage-A or gate in the loop)."""
    kernel = sass_tool.compile_variant(sass_tool.VARIANTS["skeleton-fp8"], engine="gluon")
    sass = sass_tool.sass_of(kernel.asm["cubin"], str(tmp_path), "skeleton-fp8")
    fused_loop, loop = sass_tool.main_loop(gluon_fused_sass), sass_tool.main_loop(sass)
    count = sass_tool.opcodes
    assert count(loop)["QGMMA"] == count(fused_loop)["QGMMA"] > 0
    assert re.findall(r"BAR\.ARV (0x[89]), 0x100", sass) and "MUFU.EX2" not in sass
    assert count(loop)["FMNMX"] < count(fused_loop)["FMNMX"] and count(loop)["FADD"] < count(fused_loop)["FADD"]
    assert sass_tool._total(count(loop)) < 0.85 * sass_tool._total(count(fused_loop))


def test_the_loop_count_names_the_key_tile_loop_and_the_rescale_a_warp_skips(sass_tool, gluon_fused_sass):
    """`sass_qgmma` counts one math warpgroup's key-tile loop: its QK, PV and row-sum QGMMAs (4 k-steps each), with
    the O rescale's multiplies behind the warp vote's branch as the instructions a warp may skip."""
    from fsbench.kernels.hopper import gluon_fused

    loop = sass_tool.main_loop(gluon_fused_sass)
    assert sass_tool.opcodes(loop)["QGMMA"] == 12
    assert sass_tool.skippable(loop) == gluon_fused._RESCALE_N
    assert sum("VOTE.ANY" in line for line in loop) == 1
