"""`fsbench kernels` commands through the real CLI."""
from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from fsbench.harness.cli import main


def test_proxy_table_prints_the_bf16_row_of_table_8():
    result = CliRunner().invoke(main, ["kernels", "proxy-table"])
    assert result.exit_code == 0
    bf16 = next(line for line in result.output.splitlines() if line.startswith("U16 / BF16"))
    assert bf16.split()[-4:] == ["-4.199", "2.242", "1.777", "0.162"]


def test_ablation_json_has_every_row_and_format_and_is_saved(tmp_path):
    out = tmp_path / "ablation.json"
    result = CliRunner().invoke(main, ["kernels", "ablation", "--shape", "1,1,200,64", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert [r["components"] for r in saved["rows"]][0] == "conventional softmax" and len(saved["rows"]) == 6
    bf16_ref = saved["rows"][0]["bf16"]
    assert bf16_ref["err_pct"] == 0 and bf16_ref["cos"] > 0.999999
    mxfp4 = saved["rows"][3]["mxfp4"]["err_pct"]
    assert mxfp4 > saved["rows"][3]["mxfp8"]["err_pct"] > saved["rows"][3]["bf16"]["err_pct"] > 0


def test_ablation_bad_shape_is_a_usage_error():
    result = CliRunner().invoke(main, ["kernels", "ablation", "--shape", "1,2,3"])
    assert result.exit_code == 2 and "B,H,S,D" in result.output
    result = CliRunner().invoke(main, ["kernels", "ablation", "--shape", "1,1,64,48"])
    assert result.exit_code == 2 and "multiple of 32" in result.output


@pytest.mark.slow
def test_ablation_merge_of_consecutive_seed_runs_equals_one_run_over_all_seeds(tmp_path):
    def ablation(name, *args):
        out = tmp_path / name
        result = CliRunner().invoke(main, ["kernels", "ablation", "--shape", "1,1,130,32", "--formats", "mxfp8,mxfp4",
                                           "--out", str(out), *args])
        assert result.exit_code == 0, result.output
        return out

    whole = json.loads(ablation("whole.json", "--seeds", "3").read_text())
    first, last = ablation("first.json", "--seeds", "2"), ablation("last.json", "--first-seed", "2")
    merged_path = tmp_path / "merged.json"
    result = CliRunner().invoke(main, ["kernels", "ablation-merge", str(last), str(first), "--out", str(merged_path)])
    assert result.exit_code == 0, result.output
    merged = json.loads(merged_path.read_text())
    assert merged["seeds"] == 3 and merged["seed_range"] == [0, 3]
    for row_whole, row_merged in zip(whole["rows"], merged["rows"]):
        for fmt in ("mxfp8", "mxfp4"):
            assert abs(row_merged[fmt]["err_pct"] - row_whole[fmt]["err_pct"]) < 1e-9
            assert abs(row_merged[fmt]["cos"] - row_whole[fmt]["cos"]) < 1e-12


def test_ablation_merge_refuses_overlapping_seeds_and_leaves_the_output_alone(tmp_path):
    part = tmp_path / "part.json"
    assert CliRunner().invoke(main, ["kernels", "ablation", "--shape", "1,1,64,32", "--formats", "bf16",
                                     "--out", str(part)]).exit_code == 0
    out = tmp_path / "merged.json"
    out.write_text("keep me")
    result = CliRunner().invoke(main, ["kernels", "ablation-merge", str(part), str(part), "--out", str(out)])
    assert result.exit_code == 2 and "overlap" in result.output
    assert out.read_text() == "keep me"


def test_bench_refuses_unknown_rows_by_name():
    result = CliRunner().invoke(main, ["kernels", "bench", "--rows", "gluon-fused-mxfp8,triton-fused-fp8"])
    assert result.exit_code == 2 and "triton-fused-fp8" in result.output and "gluon-fused-mxfp6" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without a GPU")
@pytest.mark.parametrize("args", [["check", "--impl", "gluon"], ["bench", "--rows", "gluon-fused-mxfp8"]])
def test_kernel_commands_say_in_one_line_that_they_need_a_hopper_gpu(args):
    result = CliRunner().invoke(main, ["kernels", *args])
    assert result.exit_code == 2 and "sm_90" in result.output


def test_check_refuses_an_unknown_engine():
    result = CliRunner().invoke(main, ["kernels", "check", "--impl", "cuda"])
    assert result.exit_code == 2 and "gluon" in result.output


def test_bench_markdown_adds_the_clock_columns_only_when_a_row_was_held():
    from fsbench.kernels.tools.bench import format_markdown, tflop_per_joule

    row = {"row": "gluon-fused-mxfp8", "shape": [1, 40, 75600, 128], "median_ms": 130.0, "tflops": 900.0,
           "rel_err_pct": 5.7, "cosine": 0.998, "x_cudnn": 1.56, "x_conventional": 1.06}
    plain = format_markdown([row]).splitlines()
    back_to_back = {"tflops": 880.0, "clock_mhz": 1740.0, "power_w": 689.6,
                    "tflop_per_j": tflop_per_joule(880.0, 689.6)}
    held = format_markdown([dict(row, back_to_back=back_to_back), dict(row, row="sdpa-cudnn-bf16")]).splitlines()
    assert "MHz" not in plain[0] and "MHz" in held[0] and "TFLOP/J" in held[0]
    assert all(line.count("|") == held[0].count("|") for line in held)  # header, separator and rows line up
    assert held[2].endswith("| 880.0 | 1740 | 690 | 1.276 |") and held[3].endswith("|  |  |  |  |")


def test_tflop_per_joule_is_throughput_over_watts_and_none_without_power():
    from fsbench.kernels.tools.bench import tflop_per_joule

    assert tflop_per_joule(700.0, 700.0) == 1.0 and tflop_per_joule(900.0, 600.0) == 1.5
    assert tflop_per_joule(900.0, None) is None and tflop_per_joule(900.0, 0.0) is None


def test_row_kernels_refuses_unknown_rows_before_touching_a_gpu():
    from conftest import load_script

    result = CliRunner().invoke(load_script("row_kernels", "benchmarks").main,
                                 ["--rows", "gluon-fused-mxfp8,cudnn-fp16", "--out", "unused"])
    assert result.exit_code == 2 and "cudnn-fp16" in result.output and "cudnn-fp8" in result.output


def test_bench_refuses_a_negative_clock_window():
    result = CliRunner().invoke(main, ["kernels", "bench", "--clock-seconds", "-1"])
    assert result.exit_code == 2 and "--clock-seconds" in result.output


def test_bench_lists_its_rows_with_the_skeleton_without_a_gpu():
    result = CliRunner().invoke(main, ["kernels", "bench", "--list"])
    names = [line.split()[0] for line in result.output.splitlines()]
    assert result.exit_code == 0, result.output
    assert "skeleton-fp8" in names and "gluon-fused-mxfp8" in names and "sdpa-cudnn-bf16" in names


def test_the_skeleton_row_prints_its_speed_and_clock_with_blank_error_columns():
    from fsbench.kernels.tools.bench import format_markdown, format_table

    row = {"row": "skeleton-fp8", "shape": [1, 40, 75600, 128], "median_ms": 110.0, "tflops": 1070.0,
           "rel_err_pct": None, "cosine": None, "x_cudnn": 1.8, "x_cudnn_fp8": 1.34, "x_conventional": None,
           "back_to_back": {"tflops": 1095.0, "clock_mhz": 1620.0, "power_w": 690.0}}
    md = format_markdown([row]).splitlines()[-1]
    assert md.startswith("| (1, 40, 75600, 128) | skeleton-fp8 | 110.00 | 1070.0 | 1.80 | 1.34 |  |  |  |")
    assert md.endswith("| 1095.0 | 1620 | 690 |  |")  # no TFLOP/J without it in the hold
    assert "skeleton-fp8" in format_table([row]) and "None" not in format_table([row])
