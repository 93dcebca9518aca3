"""results/README.md is the render of benchmarks/front_page.md and the raw JSON: no figure on the page lacks its
file, and adding a figure is adding a JSON and a line to the render's table list."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import load_script

render = load_script("render", "benchmarks")


def test_the_committed_front_page_is_the_render_of_its_template_and_raw_files():
    assert render.main(["--check"]) == 0, "results/README.md differs: run python benchmarks/render.py"


def test_check_reports_a_page_edited_by_hand_and_write_restores_it(tmp_path, monkeypatch, capsys):
    page = tmp_path / "README.md"
    page.write_text(render.PAGE.read_text().replace("| `cudnn-fp8` | 805.9 |", "| `cudnn-fp8` | 905.9 |"))
    monkeypatch.setattr(render, "PAGE", page)
    assert render.main(["--check"]) == 1
    captured = capsys.readouterr()
    assert "-| NVIDIA H200 | `cudnn-fp8` | 905.9 |" in captured.out and "python benchmarks/render.py" in captured.err
    assert render.main([]) == 0 and render.main(["--check"]) == 0
    assert "| `cudnn-fp8` | 805.9 |" in page.read_text()


def _results_with(tmp_path, monkeypatch, name: str, data: dict):
    (tmp_path / "h100").mkdir()
    (tmp_path / "h100" / name).write_text(json.dumps(data))
    monkeypatch.setattr(render, "RESULTS", tmp_path)


def test_a_new_figure_is_a_json_and_a_line_and_its_provenance_drops_output_paths(tmp_path, monkeypatch):
    data = json.loads((render.RESULTS / "h100/kernels/bench_25611d1.json").read_text())
    data["command"] += " --json /scratch/x.json --markdown=/scratch/x.md"
    _results_with(tmp_path, monkeypatch, "bench_new.json", data)
    tables = (render.Table("new", render.bench_by_shape, ("h100/bench_new.json",)),)
    page = render.render("# page\n{{ new }}\ntail", tables).splitlines()
    assert page[1].startswith("| shape | row | TFLOP/s |") and len([row for row in page if row.startswith("| (")]) == 8
    (line,) = [row for row in page if row.startswith("- `")]
    assert "/scratch" not in line and "--markdown" not in line and line.startswith("- `fsbench kernels bench --rows")
    assert "commit `25611d1`; NVIDIA H100 80GB HBM3; 2026-12-06 05:24 UTC; raw: [h100/bench_new.json]" in line
    assert page[-1] == "tail"


def test_a_figure_without_its_commit_or_file_and_a_misplaced_table_are_refused(tmp_path, monkeypatch, capsys):
    data = json.loads((render.RESULTS / "h100/kernels/bench_25611d1.json").read_text())
    del data["git_commit"]
    _results_with(tmp_path, monkeypatch, "bench_new.json", data)
    tables = (render.Table("new", render.bench_by_shape, ("h100/bench_new.json",)),)
    with pytest.raises(render.RenderError, match="lacks its command, commit, device or date"):
        render.render("{{ new }}", tables)
    gone = (render.Table("new", render.bench_by_shape, ("h100/gone.json",)),)
    with pytest.raises(render.RenderError, match="results/h100/gone.json not found"):
        render.render("{{ new }}", gone)
    with pytest.raises(render.RenderError, match="template line 2: no table named 'old'"):
        render.render("x\n{{ old }}\n{{ new }}", tables)
    with pytest.raises(render.RenderError, match="tables not placed in the template: new"):
        render.render("no placeholder", tables)
    monkeypatch.setattr(render, "TABLES", gone)
    monkeypatch.setattr(render, "TEMPLATE", tmp_path / "front_page.md")
    render.TEMPLATE.write_text("# page\n{{ new }}\n")
    assert render.main(["--check"]) == 2
    assert capsys.readouterr().err.strip() == "fsbench: results/h100/gone.json not found"


def test_a_run_folder_renders_from_its_manifest_profile_and_log(tmp_path, monkeypatch):
    run = "h200/e2e/queries_97f8d2f/mxfp8"
    shutil.copytree(render.RESULTS / run, tmp_path / "run")
    monkeypatch.setattr(render, "RESULTS", tmp_path)
    page = render.render("{{ q }}", (render.Table("q", render.queries, ("run",)),))
    assert "| [mxfp8](run) | 297.48 | - | 200555 | 14.42 | 11.07 | 3.349 | 138.4 | 1665 / 684 | 1755 / 680 |" in page
    assert "--out" not in page and "`fsbench run --model a14b-synthetic" in page
    (tmp_path / "run" / "fsbench.log").unlink()
    with pytest.raises(render.RenderError, match="not a run folder with a profile"):
        render.render("{{ q }}", (render.Table("q", render.queries, ("run",)),))


def test_output_options_go_with_their_paths_and_bare_flags_stay():
    assert render.strip_outputs("fsbench kernels bench --rows a --json /o/b.json --markdown /o/b.md --repeats 5") == (
        "fsbench kernels bench --rows a --repeats 5")
    assert render.strip_outputs("fsbench kernels proxy-table --json") == "fsbench kernels proxy-table --json"
    assert render.strip_outputs("fsbench run --out=/tmp/r --count 1") == "fsbench run --count 1"


def _row(name: str, shape: list[int], tflops: float, **more) -> dict:
    return {"row": name, "shape": shape, "tflops": tflops, **more}


def test_the_headline_names_each_baseline_and_says_in_bold_where_it_is_faster(tmp_path, monkeypatch):
    data = json.loads((render.RESULTS / "h100/kernels/bench_25611d1.json").read_text())
    paper = [1, 24, 32768, 128]
    ours = next(r for r in data["rows"] if r["row"] == "gluon-fused-mxfp8" and r["shape"] == paper)
    cudnn = next(r for r in data["rows"] if r["row"] == "cudnn-fp8" and r["shape"] == paper)
    ours["kernel_tflops"], cudnn["kernel_tflops"] = 900.0, 1000.0
    data["rows"] += [_row("fa3-bf16", paper, 700.0, kernel_tflops=720.0), _row("sdpa-flash-bf16", paper, 650.0)]
    _results_with(tmp_path, monkeypatch, "bench_new.json", data)
    page = render.render("{{ h }}", (render.Table("h", render.headline, ("h100/bench_new.json",)),)).splitlines()
    call, kernel = (line for line in page if "(1,24,32768,128)" in line)
    assert f"| {ours['tflops']:.1f} | `cudnn-fp8` {cudnn['tflops']:.1f} | **0.95x: it is faster** |" in call
    assert f"| `fa3-bf16` 700.0 | {ours['tflops'] / 700:.2f}x | `sdpa-cudnn-bf16`, `cudnn-bf16` |" in call
    assert "| kernel alone | 900.0 | `cudnn-fp8` 1000.0 | **0.90x: it is faster** | `fa3-bf16` 720.0 | 1.25x |" in (
        kernel)
    (far,) = (line for line in page if "(1,40,75600,128)" in line)
    assert "| 1.13x | not measured | - |" in far and "**" not in far


def test_the_calibration_sets_each_cudnn_row_beside_nvidias_figure_for_its_precision_and_length(tmp_path,
                                                                                              monkeypatch):
    data = json.loads((render.RESULTS / "h100/kernels/bench_25611d1.json").read_text())
    data["rows"] = [_row("cudnn-fp8", [1, 64, 4096, 128], 800.0, kv_heads=8, kernel_tflops=950.0),
                    _row("cudnn-bf16@9.27.0", [1, 64, 16384, 128], 600.0, kv_heads=8),
                    _row("sdpa-flash-bf16", [1, 64, 16384, 128], 690.0, kv_heads=64),
                    _row("cudnn-fp8", [1, 40, 75600, 128], 820.0)]
    _results_with(tmp_path, monkeypatch, "calibrate.json", data)
    page = render.render("{{ c }}", (render.Table("c", render.calibration, ("h100/calibrate.json",)),)).splitlines()
    rows = [line for line in page if line.startswith("| 4096") or line.startswith("| 16384")]
    assert rows == [
        "| 16384 | 702 (BF16) | `cudnn-bf16@9.27.0` | (1,64,16384,128), 8 | NVIDIA H100 80GB HBM3, - | the call "
        "| 600.0 | 0.85x | - | - |",
        "| 4096 | 973 (FP8) | `cudnn-fp8` | (1,64,4096,128), 8 | NVIDIA H100 80GB HBM3, - | the call | 800.0 | 0.82x "
        "| - | - |",
        "| 4096 | 973 (FP8) | `cudnn-fp8` | (1,64,4096,128), 8 | NVIDIA H100 80GB HBM3, - | kernel alone | 950.0 "
        "| 0.98x | - | - |"]
    assert len([line for line in page if line.startswith("| ")]) == 3 + 1  # the header and the three rows


def test_the_calibration_scales_a_row_with_a_measured_clock_to_the_cards_top_clock(tmp_path, monkeypatch):
    data = json.loads((render.RESULTS / "h100/kernels/bench_25611d1.json").read_text())
    data["rows"] = [_row("cudnn-fp8", [1, 64, 32768, 128], 880.0, kv_heads=8, kernel_tflops=990.0,
                         back_to_back={"clock_mhz": 1650.0})]
    _results_with(tmp_path, monkeypatch, "calibrate.json", data)
    page = render.render("{{ c }}", (render.Table("c", render.calibration, ("h100/calibrate.json",)),))
    # 990 TFLOP/s at 1.65 GHz is 600 per GHz: 1188 at the H100's 1980 MHz, 1.12x NVIDIA's 1062
    assert "| kernel alone | 990.0 | 0.93x | 600.0 | 1188 at 1980 MHz, 1.12x |" in page
    assert "| the call | 880.0 | 0.83x | 533.3 | 1056 at 1980 MHz, 0.99x |" in page


def test_the_tune_table_marks_the_chosen_schedule_and_ends_in_the_tunes_wall_time(tmp_path, monkeypatch):
    def candidate(name: str, ms: float, psnr: float, ok: bool) -> dict:
        return {"name": name, "kind": "single", "low_precision_cells": 4, "predicted_attention_ms": ms,
                "measured": {"prompts_compared": 2, "psnr": psnr, "ssim": 0.9}, "meets_budgets": ok}

    summary = {"command": "fsbench tune --model a14b-synthetic --out /scratch/t", "git_commit": "c" * 40,
               "device": "NVIDIA H100 80GB HBM3", "date": "2026-12-08T01:00:00+00:00", "wall_s": 450.0,
               "tune": {"budgets": ["psnr>=25", "ssim>=0.8"], "chosen": {"name": "mxfp6"},
                        "candidates": [candidate("bf16", 900.0, float("inf"), True),
                                       candidate("mxfp4", 400.0, 21.0, False), candidate("mxfp6", 500.0, 30.5, True)]}}
    _results_with(tmp_path, monkeypatch, "tune.json", summary)
    page = render.render("{{ t }}", (render.Table("t", render.tune, ("h100/tune.json",)),)).splitlines()
    rows = [line for line in page if line.startswith("| ") and "candidate" not in line]
    assert rows == ["| mxfp4 | single | 4 | 400 | psnr 21, ssim 0.9 | no |",
                    "| **mxfp6** (chosen) | single | 4 | 500 | psnr 30.5, ssim 0.9 | yes |",
                    "| bf16 | single | 4 | 900 | psnr inf, ssim 0.9 | yes |",
                    "| whole tune: 7.5 min wall | - | - | - | - | - |"]
    assert "`fsbench tune --model a14b-synthetic`; commit `ccccccc`; NVIDIA H100 80GB HBM3" in "\n".join(page)
    assert render.render("{{ t }}", (render.Table("t", render.tune, ()),)).startswith("Not measured yet")


def test_tables_fed_by_several_cards_name_each_cards_lines_and_draw_each_cards_plot():
    """`--from` puts a card's new source beside the other cards' (figures.json): every kind it feeds takes several."""
    peers = ("h100/kernels/bench_peers_dcaa377.json", "h200/kernels/bench_peers_f338843.json")
    lines = render.render_table(render.Table("peers", render.bench_by_kernel, peers))
    assert lines[0].startswith("| card | row | TFLOP/s (1,40,75600,128) |")
    assert "| NVIDIA H100 80GB HBM3 | `fa3-bf16` | 725.7 |" in "\n".join(lines)
    assert "| NVIDIA H200 | `fa3-fp8` | 898.9 |" in "\n".join(lines)
    sweeps = ("h100/kernels/sweep_dcaa377.json", "h200/kernels/sweep_f338843.json")
    lines = render.render_table(render.Table("sweep", render.sweep, sweeps, plot="sweep"))
    assert [line for line in lines if line.startswith("![")] == [
        "![sweep, NVIDIA H100 80GB HBM3](h100/kernels/sweep_dcaa377.png)",
        "![sweep, NVIDIA H200](h200/kernels/sweep_f338843.png)"]
    assert {line.split(" | ")[0] for line in lines if line.startswith("| NVIDIA")} == {"| NVIDIA H100 80GB HBM3",
                                                                                   "| NVIDIA H200"}
    steps = ("h100/e2e/step_fp8gemm_dcaa377.json", "h200/e2e/step_9ba88b2/step_pairs.json")
    page = "\n".join(render.render_table(render.Table("step-pairs", render.step_pairs, steps)))
    assert "| NVIDIA H100 80GB HBM3 | FP8 | mxfp8 | 14.32 |" in page
    assert "| NVIDIA H200 | BF16 | mxfp8 | 16.42 |" in page
