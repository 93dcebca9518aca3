"""The peer rows (SageAttention2, FlashAttention-3 FP8) and the shape sweep of `fsbench kernels bench`, and the
sweep's plot, through the real CLI and real matplotlib."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from fsbench.harness.cli import main
from fsbench.kernels.tools import bench, peers, sweep

PEERS_ABSENT = peers.sage2_missing() is not None and peers.fa3_missing() is not None


def test_the_bench_rows_include_both_peers_beside_cudnn_fp8():
    names = [row.name for row in bench.rows()]
    assert names.index("cudnn-fp8") < names.index("sage2-fp8") < names.index("fa3-fp8")
    by_name = {row.name: row for row in bench.rows()}
    assert by_name["sage2-fp8"].fn is peers.sage2_fp8_attention and by_name["fa3-fp8"].fn is peers.fa3_fp8_attention


def test_the_sweep_grid_is_the_fixed_one_of_4k_to_128k_keys_at_24_and_40_heads():
    keys = [4096, 8192, 16384, 32768, 65536, 75600, 131072]
    assert sorted(sweep.GRID) == sorted((1, h, s, 128) for s in keys for h in (24, 40))
    assert len(set(sweep.GRID)) == 14
    assert set(sweep.ROWS) == {"gluon-fused-mxfp8", "cudnn-fp8", "sdpa-cudnn-bf16"}
    assert set(sweep.ROWS) <= {row.name for row in bench.rows()}


@pytest.mark.skipif(not PEERS_ABSENT or torch.cuda.is_available(),
                    reason="checks the notes where neither peer is installed and there is no GPU")
def test_an_absent_peer_is_skipped_with_a_note_and_refused_by_name():
    result = CliRunner().invoke(main, ["kernels", "bench"])
    assert "skipping row sage2-fp8: it needs SageAttention" in result.output
    assert "skipping row fa3-fp8: it needs FlashAttention-3" in result.output
    assert result.exit_code == 2 and "sm_90" in result.output  # then the GPU check stops it
    for name in ("sage2-fp8", "fa3-fp8"):
        result = CliRunner().invoke(main, ["kernels", "bench", "--rows", f"{name},gluon-fused-mxfp8"])
        assert result.exit_code == 2 and f"row {name} needs" in result.output and "build_peers.sh" in result.output


def test_sweep_refuses_shapes_of_its_own():
    result = CliRunner().invoke(main, ["kernels", "bench", "--sweep", "--shape", "1,24,4096,128"])
    assert result.exit_code == 2 and "--sweep runs its own grid" in result.output


def _sweep_doc(held: bool) -> dict:
    rows = []
    for name, base in (("gluon-fused-mxfp8", 880.0), ("cudnn-fp8", 820.0)):
        for heads in (24, 40):
            for keys in (4096, 32768, 75600):
                row = {"row": name, "shape": [1, heads, keys, 128], "tflops": base + keys / 1000, "median_ms": 1.0}
                if held:
                    row["back_to_back"] = {"tflops": base, "power_w": 700.0, "tflop_per_j": base / 700.0}
                rows.append(row)
    return {"command": "fsbench kernels bench --sweep", "git_commit": "0" * 40, "device": "NVIDIA H200",
            "date": "2026-12-03T00:00:00+00:00", "rows": rows}


@pytest.mark.parametrize("held, panels", [(True, 2), (False, 1)])
def test_plot_sweep_draws_one_line_per_row_and_head_count_and_tflop_per_joule_where_held(tmp_path, held, panels):
    doc_path, png = tmp_path / "sweep.json", tmp_path / "plots" / "sweep.png"
    doc_path.write_text(json.dumps(_sweep_doc(held)))
    result = CliRunner().invoke(main, ["kernels", "plot-sweep", str(doc_path), str(png)])
    assert result.exit_code == 0, result.output
    assert "4 lines" in result.output
    image = np.asarray(Image.open(png).convert("RGB"))
    assert image.shape[1] > image.shape[0] * (2.2 if panels == 2 else 1.3)  # a second panel makes it wider
    blue = np.array([31, 119, 180])  # matplotlib's C0, the first row's colour
    assert (np.abs(image.astype(int) - blue).sum(axis=2) < 30).sum() > 200
    assert not list(png.parent.glob("*.partial.png"))


def test_plot_sweep_refuses_a_json_without_bench_rows_and_leaves_the_png_alone(tmp_path):
    doc_path, png = tmp_path / "sweep.json", tmp_path / "sweep.png"
    doc_path.write_text(json.dumps({"rows": []}))
    png.write_bytes(b"keep me")
    result = CliRunner().invoke(main, ["kernels", "plot-sweep", str(doc_path), str(png)])
    assert result.exit_code == 2 and "no bench rows" in result.output
    assert png.read_bytes() == b"keep me"
