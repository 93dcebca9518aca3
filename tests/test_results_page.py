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
    assert "-| `cudnn-fp8` | 905.9 |" in captured.out and "python benchmarks/render.py" in captured.err
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
