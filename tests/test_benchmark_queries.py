"""benchmarks/queries.py: one real SingleStream query per invocation, a row per query, compare over the runs."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fsbench.harness.cli import main as fsbench_main

from conftest import load_script

TINY = ("--model", "tiny", "--height", "32", "--width", "32", "--frames", "5", "--steps", "2")


@pytest.fixture(scope="module")
def script():
    return load_script("queries", "benchmarks")


def _query(script, tmp_path, schedules: tuple[str, ...], config: str, *options: str):
    args = [*(a for s in schedules for a in ("--schedule", s)), "--config", config, "--out", str(tmp_path / "runs"),
            "--table", str(tmp_path / "queries.json"), *options, "--model", "tiny", *TINY[2:]]
    return CliRunner().invoke(script.main, args)


def test_bad_schedule_an_existing_run_folder_or_a_bad_table_stops_before_any_work(script, tmp_path):
    bad = _query(script, tmp_path, ("bf16", "mxfp9"), "optimized")
    assert bad.exit_code == 2 and "fsbench: error: --schedule must be one of bf16, hybrid" in bad.stderr
    (tmp_path / "runs" / "optimized-mxfp8").mkdir(parents=True)
    taken = _query(script, tmp_path, ("bf16", "mxfp8"), "optimized")
    assert taken.exit_code == 2 and "optimized-mxfp8 exists" in taken.stderr
    assert not (tmp_path / "queries.json").exists() and not (tmp_path / "runs" / "optimized-bf16").exists()
    (tmp_path / "queries.json").write_text('{"schedule": "bf16"}')
    (tmp_path / "runs" / "optimized-mxfp8").rmdir()
    table = _query(script, tmp_path, ("bf16",), "optimized")
    assert table.exit_code == 2 and "does not hold a JSON list of query rows" in table.stderr
    assert not (tmp_path / "runs" / "optimized-bf16").exists()


def test_more_gpus_than_cuda_visible_devices_names_stops_before_any_work(script, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    result = _query(script, tmp_path, ("bf16", "mxfp8"), "optimized", "--gpus", "2")
    assert result.exit_code == 2 and result.stderr.strip() == (
        "fsbench: error: --gpus 2: CUDA_VISIBLE_DEVICES=5 names 1")
    assert not (tmp_path / "runs").exists()


def _span(run) -> tuple[str, str]:
    """The earliest and latest timestamps of a run's log: when `fsbench run` started and finished."""
    stamps = sorted(line[:23] for line in (run / "fsbench.log").read_text().splitlines() if line[:2] == "20")
    return stamps[0], stamps[-1]


@pytest.mark.slow
def test_queries_make_rows_and_compare_builds_latency_speedup_and_energy_per_configuration(script, tmp_path):
    """The tiny model on a CPU: two queries at once (`--gpus 2`), each `fsbench run --compile --profile` (inductor)
    appending its row; `fsbench compare` over the two run folders shows the same latencies; a third query in the
    other configuration joins the comparison as its own column."""
    result = _query(script, tmp_path, ("bf16", "mxfp8"), "optimized", "--gpus", "2")
    assert result.exit_code == 0, result.output
    rows = sorted(json.loads((tmp_path / "queries.json").read_text()), key=lambda r: r["schedule"])
    assert all(r["gpu"] is None for r in rows)  # a CPU run names no GPU
    (bf16_start, bf16_end), (mxfp8_start, mxfp8_end) = (_span(tmp_path / "runs" / f"optimized-{s}")
                                                        for s in ("bf16", "mxfp8"))
    assert bf16_start < mxfp8_end and mxfp8_start < bf16_end  # they ran at the same time
    assert [(r["schedule"], r["gemm"], r["compile"], r["vae"], r["steps"]) for r in rows] == [
        ("bf16", "fp8", True, "bf16", 2), ("mxfp8", "fp8", True, "bf16", 2)]
    assert all(r["query_s"] > 0 and r["joules"] is None and r["commit"] for r in rows)
    assert rows[0]["energy_note"] == "energy not measured: no GPU energy on a cpu device"
    assert all(r["warm_up"] for r in rows)
    out = tmp_path / "cmp"
    runs = [str(tmp_path / "runs" / f"optimized-{s}") for s in ("bf16", "mxfp8")]
    compared = CliRunner().invoke(fsbench_main, ["compare", *runs, "--out", str(out)])
    assert compared.exit_code == 0, compared.output
    table = json.loads((out / "compare.json").read_text())
    assert [r["latency_s"] for r in table["rows"]] == pytest.approx([r["query_s"] for r in rows])
    assert table["rows"][1]["speedup"] == pytest.approx(rows[0]["query_s"] / rows[1]["query_s"])
    assert table["footnotes"][str(table["rows"][0]["notes"]["joules"])] == rows[0]["energy_note"]
    manifest = json.loads((tmp_path / "runs" / "optimized-mxfp8" / "manifest.json").read_text())
    assert manifest["results"]["SingleStream"]["performance"]["warm_up"]["formats"] == ["mxfp8"]

    # a query in the BF16-GEMM configuration: compare tells the configurations apart and keeps each speedup within
    # its own (this one has no BF16 run of its configuration here)
    assert _query(script, tmp_path, ("mxfp8",), "bf16-gemm").exit_code == 0
    third = json.loads((tmp_path / "queries.json").read_text())[-1]
    assert (third["schedule"], third["gemm"], third["vae"]) == ("mxfp8", "bf16", "fp32")
    compared = CliRunner().invoke(fsbench_main, ["compare", *runs, str(tmp_path / "runs" / "bf16-gemm-mxfp8"),
                                                 "--out", str(out)])
    assert compared.exit_code == 0, compared.output
    table = json.loads((out / "compare.json").read_text())
    assert [r["schedule"] for r in table["rows"]] == [
        "BF16 · FP8 GEMMs, bf16 VAE", "MXFP8 · FP8 GEMMs, bf16 VAE", "MXFP8 · BF16 GEMMs, fp32 VAE"]
    assert table["rows"][1]["speedup"] == pytest.approx(rows[0]["query_s"] / rows[1]["query_s"])
    assert table["rows"][2]["latency_s"] == pytest.approx(third["query_s"]) and table["rows"][2]["speedup"] is None
    assert table["by_configuration"] == {"BF16": {"FP8 GEMMs, bf16 VAE": 0, "BF16 GEMMs, fp32 VAE": None},
                                         "MXFP8": {"FP8 GEMMs, bf16 VAE": 1, "BF16 GEMMs, fp32 VAE": 2}}
