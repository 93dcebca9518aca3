"""The kernels compiled ahead of time for sm_90 (Triton's bundled ptxas; no GPU): the schedule the GPU figures
depend on and the instructions a warp issues per key tile are checked in the SASS on every CI run."""
from __future__ import annotations

import json
import re

import pytest
import triton
from click.testing import CliRunner

from fsbench.harness.cli import main
from fsbench.kernels.tools import sass as ksass

# instructions a warp issues per key tile (`fsbench kernels sass`), pinned for the Triton this repository is tested
# with: a change to the loop shows here first, and the pin moves with the change that earns it
ISSUED = {"3.8": {"skeleton-fp8": 253, "fused-mxfp8": 439, "fused-mxfp6": 639, "fused-mxfp4": 639,
                  "conventional-fp8": 463}}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Every variant's SASS and loop count, compiled once (the CLI writes each .sass beside its .cubin)."""
    out = tmp_path_factory.mktemp("sass")
    result = CliRunner().invoke(main, ["kernels", "sass", "--out", str(out), "--json", str(out / "counts.json")])
    assert result.exit_code == 0, result.output
    counts = {row["variant"]: row for row in json.loads((out / "counts.json").read_text())["variants"]}
    sass = {name: (out / f"{name}.sass").read_text() for name in counts if (out / f"{name}.sass").exists()}
    return counts, sass, result.output


@pytest.fixture(scope="module")
def gluon_fused_sass(compiled) -> str:
    return compiled[1]["fused-mxfp8"]


def test_each_variants_issued_instructions_per_key_tile_are_pinned(compiled):
    counts, _, output = compiled
    pins = ISSUED.get(".".join(triton.__version__.split(".")[:2]))
    if pins is None:
        pytest.skip(f"no pinned counts for triton {triton.__version__}")
    assert {name: row["issued"] for name, row in counts.items()} == pins
    for name, row in counts.items():  # the steps partition what a warp issues; the table prints each
        assert sum(row["steps"].values()) == row["issued"] == row["loop"] - row["skippable"]
        assert re.search(rf"^{name}\s.*\s{row['issued']}\s+{row['skippable']}\s", output, re.M), output
    # mxfp6 and mxfp4 feed the kernel the same FP8 operands and block-scaled E2M3 P: one kernel
    assert counts["fused-mxfp6"]["steps"] == counts["fused-mxfp4"]["steps"]


def test_the_steps_name_the_fused_policys_per_score_work(compiled):
    """A math warpgroup holds 64 x 128 scores, 64 per thread. mxfp8 on the pattern grid: Stage-A is one clamping
    FFMA per score (the rounded pattern in its low bits), the row maximum an integer minimum of those bits, about
    one VIMNMX3 per two scores, each pattern moves to P's scale and into a float with one IMAD, and E4M3 P is one
    packed convert per two scores (the second of a register's pair merging into the first). Block-scaled MX P
    takes its block maxima on the float32 scores, about one FMNMX per score. The skeleton has none of the
    reduction and its P is one multiply per score."""
    counts, _, _ = compiled
    fused, skeleton = counts["fused-mxfp8"], counts["skeleton-fp8"]
    assert fused["opcodes"]["FFMA"] >= 64 + 64  # Stage-A's and the O update's
    assert skeleton["steps"]["stage_a"] == 64 and skeleton["steps"]["reduction"] < 8
    assert fused["opcodes"]["VIMNMX3"] >= 28 and fused["steps"]["reduction"] <= 48
    assert fused["opcodes"]["F2FP"] == 2 * 32  # the converts, on the common route and on the float route
    assert fused["steps"]["stage_a"] == 64  # the FFMA.SAT alone
    # the IMAD per score and the converts (the float route's own copy of the converts is skipped)
    assert fused["steps"]["narrowing"] == 64 + 32
    assert counts["fused-mxfp6"]["steps"]["reduction"] >= 62
    assert fused["steps"]["o_update"] >= 64 and skeleton["steps"]["o_update"] >= 64


def test_sass_refuses_an_unknown_variant_in_one_line():
    result = CliRunner().invoke(main, ["kernels", "sass", "--variants", "fused-mxfp8,fused-fp2"])
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1
    assert "unknown fused-fp2" in result.output and "fused-mxfp8" in result.output.split("known:")[1]


def test_gluon_kernel_runs_both_gemms_on_fp8_wgmma_without_spills(gluon_fused_sass):
    ops = [line for line in gluon_fused_sass.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", line)]
    assert any("QGMMA.64x128x32.F32.E4M3.E4M3" in op for op in ops)  # QK and PV
    assert any("QGMMA.64x8x32.F32.E4M3.E4M3" in op for op in ops)  # the row-sum MMA, wgmma's narrowest N
    # the per-element state fits in 240 registers: nothing spills in the key-tile loop; with Triton 3.8 a few 32-bit
    # scalars (loop bounds, the peeled tiles' row values) go to local memory around it, which a spilled tensor would
    # outnumber many times, in wide or many accesses
    spills = [op for op in ops if re.search(r"\b(STL|LDL)", op)]
    assert not any(re.search(r"\b(STL|LDL)", op) for op in ksass.main_loop(gluon_fused_sass))
    assert len(spills) <= 20 and not any(re.search(r"\b(STL|LDL)\.(64|128)\b", op) for op in spills)
    assert not any("MUFU.EX2" in op for op in ops)  # the fused policy's exponential stays off the MUFU pipe


def test_gluon_math_warpgroups_take_turns_through_named_barriers(gluon_fused_sass):
    """Each math warpgroup waits at its own barrier (8 or 9, past the compiler's reserved ids; 256 threads) and
    arrives at the other's, and no other barrier instruction uses the kernel's ids."""
    from fsbench.kernels.hopper.gluon import pipeline

    ids = {hex(pipeline.barrier_id(name)) for name in pipeline.NAMED_BARRIERS}
    assert ids == {"0x8", "0x9"} and pipeline.RESERVED_BARRIERS == 8
    bars = re.findall(r"BAR\.(SYNC\.DEFER_BLOCKING|ARV) (0x[0-9a-f]+), (0x[0-9a-f]+)", gluon_fused_sass)
    assert {(kind, i) for kind in ("SYNC.DEFER_BLOCKING", "ARV") for i in ids} <= {(k, i) for k, i, _ in bars}
    assert all(n == hex(pipeline.TURN_THREADS) for _, i, n in bars if i in ids)
    assert "USETMAXREG" in gluon_fused_sass  # registers moved from the TMA warpgroup to the math ones


def test_gluon_fused_policy_feeds_p_from_shared_memory_and_skips_the_rescale_by_warp_vote(gluon_fused_sass):
    """P reaches the PV and row-sum GEMMs through shared memory (stmatrix, then every QGMMA reads both operands
    by descriptor), and the O rescale sits behind a warp vote (the schedule measured in results/log/)."""
    qgmma = re.findall(r"QGMMA\.\S+ R\d+, (\w+)", gluon_fused_sass)
    assert qgmma and set(qgmma) == {"gdesc"}
    assert "STSM" in gluon_fused_sass
    assert "VOTE.ANY" in gluon_fused_sass


def test_gluon_mx_block_p_takes_its_block_maxima_without_shuffles_and_its_clamp_from_the_ffma(compiled,
                                                                                             gluon_fused_sass):
    """Exact block-scaled MX P: each quad thread holds one MX block per row (the prepass's key order), so the block
    maxima cost no shuffle in the key-tile loop beyond mxfp8's row maximum; the E2M3 clamp is the Stage-A FFMA's
    .sat (no HMNMX2, no per-value integer min); the block's power of two is one E4M3->f16x2 convert, one HMUL2 and
    one convert back per two values."""
    sass = compiled[1]["fused-mxfp6"]
    counts = {op: len(re.findall(rf"\b{re.escape(op)}\b", sass))
              for op in ("F2FP.F16.E4M3.UNPACK_B", "HMUL2", "F2FP.SATFINITE.E4M3.F16.UNPACK_B_MERGE_C")}
    assert len(set(counts.values())) == 1 and counts["HMUL2"] > 0, counts
    assert "HMNMX2" not in sass and len(re.findall(r"\bVIMNMX\b", sass)) < counts["HMUL2"]
    assert "FFMA.SAT" in sass
    shuffles = [ksass.opcodes(ksass.main_loop(text)).get("SHFL", 0) for text in (sass, gluon_fused_sass)]
    assert shuffles[0] == shuffles[1] > 0, shuffles


def test_gluon_skeleton_keeps_both_fp8_gemms_and_the_schedule_and_drops_the_softmax(compiled, gluon_fused_sass):
    """The skeleton row measures the fused kernel's schedule without its softmax: the same QGMMAs and named-barrier
    turns, and less per-element work (no row maximum, Stage-A or gate in the loop)."""
    counts, sass, _ = compiled
    assert counts["skeleton-fp8"]["qgmma"] == counts["fused-mxfp8"]["qgmma"] > 0
    assert re.findall(r"BAR\.ARV (0x[89]), 0x100", sass["skeleton-fp8"]) and "MUFU.EX2" not in sass["skeleton-fp8"]
    skeleton, fused = counts["skeleton-fp8"]["opcodes"], counts["fused-mxfp8"]["opcodes"]
    steps = counts["skeleton-fp8"]["steps"], counts["fused-mxfp8"]["steps"]
    assert steps[0]["reduction"] < steps[1]["reduction"] and skeleton.get("VIMNMX3", 0) < fused["VIMNMX3"]
    assert counts["skeleton-fp8"]["issued"] < 0.85 * counts["fused-mxfp8"]["issued"]


def test_the_loop_count_names_the_key_tile_loop_and_the_rescale_a_warp_skips(gluon_fused_sass):
    """The count is one math warpgroup's key-tile loop: its QK, PV and row-sum QGMMAs (4 k-steps each), with the O
    rescale's multiplies, the floor of mxfp8's patterns and its float route for tiles far below the reference, each
    behind a warp vote's branch, as the instructions a warp may skip."""
    from fsbench.kernels.hopper.gluon import ptx

    loop = ksass.main_loop(gluon_fused_sass)
    assert ksass.opcodes(loop)["QGMMA"] == 12
    skipped = [loop[i] for i in sorted(ksass.skipped_lines(loop))]
    ops = ksass.opcodes(skipped)
    assert ops["FMUL"] == ptx.RESCALE_N + ptx.NARROW_N and ops["VIMNMX"] == ptx.NARROW_N
    assert sum("VOTE.ANY" in line for line in loop) == 3  # the rescale's, the floor's and the float route's
    assert {ksass.step_of(line) for line in skipped if "FMUL" in line} == {"o_update", "bookkeeping"}


def test_gluon_kernel_compiles_where_the_launcher_specialises_one_key_tile_and_one_query():
    """Triton turns an integer argument equal to 1 into a constant: the Gluon kernel must still build its program
    state from it (a sequence of at most 128 keys, a single query row)."""
    kernel = ksass.compile_variant(ksass.VARIANTS["fused-mxfp8"], ones=("N_KT", "S_Q"))
    assert len(kernel.asm["cubin"]) > 0
