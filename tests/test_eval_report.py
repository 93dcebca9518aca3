"""`fsbench eval` and `fsbench compare` on synthetic bf16 / mxfp8 / hybrid runs with real mp4 files."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
from click.testing import CliRunner

from fsbench.eval import figures, report
from fsbench.eval.runs import Run
from fsbench.harness.cli import main

from eval_runs import SETTINGS, constant_video, make_run

PROMPTS = ("a cat grooming itself meticulously with its tongue", "a motorcycle cruising along a coastal highway")
LATENCY = {"bf16": 2.0, "mxfp8": 1.3, "hybrid": 1.1}
# the profile summaries' energy: measured on the GPU (bf16, mxfp8); the hybrid run was not profiled
ENERGY = {"bf16": {"source": "nvml energy counter", "reason": None, "joules_per_video": 1400.0},
          "mxfp8": {"source": "nvml energy counter", "reason": None, "joules_per_video": 910.4}}


def _perf(schedule: str, offline: bool = True) -> dict:
    single = {"latency_p90_ns": LATENCY[schedule] * 1e9, "valid": True}
    if schedule in ENERGY:
        single["profile"] = {"videos": 1, "energy": ENERGY[schedule]}
    results = {"SingleStream": {"performance": single}}
    if offline:
        results["Offline"] = {"performance": {"samples_per_second": 0.5 / LATENCY[schedule], "valid": True}}
    return results


@pytest.fixture
def three_runs(tmp_path):
    """BF16 grey 100; MXFP8 grey 110 (PSNR 28.13 dB); hybrid grey 120 without an Offline result."""
    runs = {}
    for schedule, value in (("bf16", 100), ("mxfp8", 110), ("hybrid", 120)):
        videos = {p: constant_video([value] * 9) for p in PROMPTS}
        runs[schedule] = make_run(tmp_path / schedule, schedule, videos, results=_perf(schedule, schedule != "hybrid"))
    return runs


def _eval(run, ref, metrics="psnr,ssim", env=None):
    return CliRunner().invoke(main, ["eval", str(run), "--reference", str(ref), "--metrics", metrics,
                                     "--workers", "1"], env=env)


def test_eval_cli_writes_results_and_prints_means(three_runs):
    result = _eval(three_runs["mxfp8"], three_runs["bf16"])
    assert result.exit_code == 0, result.output
    assert "PSNR 28.13" in result.stdout and "2 of 2 prompts" in result.stdout
    with open(three_runs["mxfp8"] / "eval" / "fidelity.csv") as f:
        assert [r["prompt"] for r in csv.DictReader(f)] == sorted(PROMPTS)


def test_eval_cli_reports_missing_lpips_weights_and_keeps_the_rest(three_runs, tmp_path):
    result = _eval(three_runs["mxfp8"], three_runs["bf16"], "psnr,lpips", env={"TORCH_HOME": str(tmp_path / "th")})
    assert result.exit_code == 2
    assert f"{tmp_path}/th/hub/checkpoints/alexnet-owt-7be5be79.pth" in result.stderr
    assert "fsbench: error: evaluation incomplete (lpips not computed" in result.stderr
    assert "python scripts/fetch_eval_weights.py" in result.stderr
    summary = json.loads((three_runs["mxfp8"] / "eval" / "summary.json").read_text())["fidelity"]
    assert summary["metrics"]["psnr"]["mean"] == pytest.approx(10 * math.log10(255**2 / 100))


def test_eval_cli_rejects_unknown_metric_and_missing_reference(three_runs):
    bad = CliRunner().invoke(main, ["eval", str(three_runs["mxfp8"]), "--metrics", "psnr,fvd"])
    assert bad.exit_code == 2 and "unknown metric(s) fvd" in bad.stderr
    no_ref = CliRunner().invoke(main, ["eval", str(three_runs["mxfp8"]), "--metrics", "psnr"])
    assert no_ref.exit_code == 2 and "need --reference BF16_RUN" in no_ref.stderr


def test_compare_table_has_paper_columns_reference_row_speedups_and_footnotes(three_runs, tmp_path):
    for schedule in ("mxfp8", "hybrid"):
        assert _eval(three_runs[schedule], three_runs["bf16"]).exit_code == 0
    out = tmp_path / "cmp"
    result = CliRunner().invoke(main, ["compare", *(str(three_runs[s]) for s in ("bf16", "mxfp8", "hybrid")),
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = (out / "compare.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| Schedule"))
    for column in ("Subject consistency", "Scene", "VBench overall", "PSNR (dB)", "SSIM", "LPIPS",
                   "SingleStream p90 latency (s)", "Speedup vs BF16", "Energy per video (J)", "Offline (samples/s)"):
        assert column in header
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in lines
            if line.startswith("| ") and not line.startswith("| Schedule")}
    assert rows["BF16"][7:10] == ["reference"] * 3
    psnr = f"{10 * math.log10(255**2 / 100):.2f}"  # both prompts alike: an interval of one point
    mp4_note = rows["MXFP8"][7].split()[-1]
    assert rows["MXFP8"][7] == f"{psnr} [{psnr}, {psnr}] {mp4_note}"
    assert f"{mp4_note} scored on the mp4 files (lossy: the codec's error is in the score); the runs kept no " \
           "lossless frames" in lines
    assert rows["MXFP8"][13] == f"{2.0 / 1.3:.2f}×" and rows["hybrid"][13] == f"{2.0 / 1.1:.2f}×"
    assert rows["BF16"][14] == "1400" and rows["MXFP8"][14] == "910"
    assert f"{rows['hybrid'][14]} energy is measured with --profile; this run has no profile" in lines
    offline_note = rows["hybrid"][15]
    assert offline_note.startswith("[")
    assert f"{offline_note} no Offline performance result in the run" in lines
    with open(out / "compare.csv") as f:
        by_schedule = {r["schedule"]: r for r in csv.DictReader(f)}
    assert by_schedule["hybrid"]["offline_sps"] == "" and by_schedule["BF16"]["role"] == "reference"
    run = Path(by_schedule["BF16"]["run"])  # relative to the comparison, which can then be committed or moved
    assert not run.is_absolute() and (out / run).resolve() == three_runs["bf16"].resolve()
    assert float(by_schedule["mxfp8".upper()]["speedup"]) == pytest.approx(2.0 / 1.3)
    table = json.loads((out / "compare.json").read_text())
    note = table["rows"][2]["notes"]["offline_sps"]
    assert table["footnotes"][str(note)] == "no Offline performance result in the run"
    for name in ("speedup.png", "frames.png"):
        assert iio.imread(out / name).ndim == 3
    # the speedup plot follows the data: PSNR and SSIM were computed, LPIPS and VBench were not
    rows = report.build_rows([Run.open(three_runs[s]) for s in ("bf16", "mxfp8", "hybrid")])
    assert [key for key, *_ in figures.speedup_panels(rows)] == ["psnr", "ssim"]


def test_compare_of_query_records_without_videos_gives_the_latency_and_energy_columns_and_no_grid(three_runs,
                                                                                                 tmp_path):
    """Query records kept without their videos (results/h200/e2e/): the table and the speedup plot, no frame grid,
    and a note saying why; asked for a prompt, the grid is drawn with its cells marked "no video"."""
    for schedule in ("bf16", "mxfp8"):
        for video in (three_runs[schedule] / "videos").glob("*.mp4"):
            video.unlink()
    out = tmp_path / "cmp"
    result = CliRunner().invoke(main, ["compare", str(three_runs["bf16"]), str(three_runs["mxfp8"]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "frames.png not drawn: no prompt has a video in every run" in result.output
    assert not (out / "frames.png").exists() and iio.imread(out / "speedup.png").ndim == 3
    mxfp8 = next(line for line in (out / "compare.md").read_text().splitlines() if line.startswith("| MXFP8"))
    assert f"| {2.0 / 1.3:.2f}× | 910 |" in mxfp8
    result = CliRunner().invoke(main, ["compare", str(three_runs["bf16"]), str(three_runs["mxfp8"]), "--out", str(out),
                                       "--prompts", PROMPTS[0]])
    assert result.exit_code == 0 and iio.imread(out / "frames.png").ndim == 3


def test_frame_grid_shows_the_chosen_frame_of_each_run(three_runs, tmp_path):
    runs = [Run.open(three_runs[s]) for s in ("bf16", "mxfp8", "hybrid")]
    assert figures.default_frame(runs) == 4  # 9-frame videos: the middle frame, not the paper's 40
    path = figures.frame_grid(runs, [PROMPTS[0]], 4, tmp_path / "grid.png")
    grid = iio.imread(path)[..., :3].reshape(-1, 3)
    for grey in (100, 110, 120):  # each column's uniform frame appears in the picture
        assert np.any(np.all(grid == grey, axis=1))
    with pytest.raises(Exception, match="has 9 frames; frame 40 does not exist"):
        figures.frame_grid(runs, [PROMPTS[0]], 40, tmp_path / "g2.png")


def test_performance_falls_back_to_loadgen_logs(tmp_path):
    run = make_run(tmp_path / "r", "mxfp8", {})
    single = run / "sys" / "wan-2.2-t2v-a14b" / "SingleStream" / "performance" / "run_1"
    single.mkdir(parents=True)
    (single / "mlperf_log_detail.txt").write_text(
        ':::MLLOG {"key": "result_90.0_percentile_latency_ns", "value": 2500000000, "time_ms": 1}\n'
        ':::MLLOG {"key": "result_validity", "value": "VALID", "time_ms": 2}\n')
    offline = run / "sys" / "wan-2.2-t2v-a14b" / "Offline" / "performance" / "run_1"
    offline.mkdir(parents=True)
    (offline / "mlperf_log_summary.txt").write_text("Scenario : Offline\nSamples per second: 0.25\n"
                                                    "Result is : INVALID\n")
    perf = Run.open(run)
    assert perf.performance("SingleStream").latency_p90_s == 2.5
    assert perf.performance("SingleStream").valid is True
    assert perf.performance("Offline").samples_per_second == 0.25
    assert perf.performance("Offline").valid is False


def test_runs_sharing_a_schedule_are_told_apart_by_folder(tmp_path):
    a = make_run(tmp_path / "paper_bf16", "bf16", {}, settings=SETTINGS)
    b = make_run(tmp_path / "mlperf_bf16", "bf16", {}, settings=SETTINGS)
    assert report.labels([Run.open(a), Run.open(b)]) == ["BF16 (paper_bf16)", "BF16 (mlperf_bf16)"]


def test_runs_of_two_configurations_get_speedups_within_each_and_a_side_by_side_table(tmp_path):
    """Table 6's latency columns: each speedup is over the BF16 run of its own configuration, the labels say
    which configuration a row is, and a second table puts each schedule's configurations side by side."""
    bf16_gemm = {"compile": True, "gemm": "bf16", "vae": "fp32"}
    fp8_gemm = {"compile": True, "gemm": "fp8", "vae": "bf16"}
    queries = [("bf16", bf16_gemm, 5.0), ("mxfp8", bf16_gemm, 4.0), ("hybrid", bf16_gemm, 3.2),
               ("bf16", fp8_gemm, 4.5), ("mxfp8", fp8_gemm, 3.0)]
    runs = []
    for schedule, speed, latency in queries:
        single = {"latency_p90_ns": latency * 1e9, "valid": True, "speed": {**speed, "sdpa_priority": []}}
        runs.append(make_run(tmp_path / f"{speed['gemm']}-{schedule}", schedule, {},
                             results={"SingleStream": {"performance": single}}))
    out = tmp_path / "cmp"
    result = CliRunner().invoke(main, ["compare", *map(str, runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = json.loads((out / "compare.json").read_text())
    assert [r["schedule"] for r in table["rows"]] == [
        "BF16 · BF16 GEMMs, fp32 VAE", "MXFP8 · BF16 GEMMs, fp32 VAE", "hybrid · BF16 GEMMs, fp32 VAE",
        "BF16 · FP8 GEMMs, bf16 VAE", "MXFP8 · FP8 GEMMs, bf16 VAE"]
    assert [r["speedup"] for r in table["rows"]] == pytest.approx([1.0, 5.0 / 4.0, 5.0 / 3.2, 1.0, 4.5 / 3.0])
    assert table["configurations"] == ["BF16 GEMMs, fp32 VAE", "FP8 GEMMs, bf16 VAE"]
    assert table["by_configuration"]["hybrid"] == {"BF16 GEMMs, fp32 VAE": 2, "FP8 GEMMs, bf16 VAE": None}
    lines = (out / "compare.md").read_text().splitlines()
    assert "speedup = latency of the BF16 run of the same configuration / latency" in lines[0]
    side = lines[lines.index(next(line for line in lines if line.startswith("Each configuration"))) + 2:]
    assert side[0] == ("| Schedule | BF16 GEMMs, fp32 VAE: latency (s) | BF16 GEMMs, fp32 VAE: energy (J) "
                       "| FP8 GEMMs, bf16 VAE: latency (s) | FP8 GEMMs, bf16 VAE: energy (J) |")
    mxfp8 = next(line for line in side if line.startswith("| MXFP8 "))
    assert mxfp8.startswith(f"| MXFP8 | 4.000 ({5.0 / 4.0:.2f}×) | [") and f"| 3.000 ({4.5 / 3.0:.2f}×) |" in mxfp8
    hybrid = next(line for line in side if line.startswith("| hybrid "))
    assert hybrid.endswith("| no run | no run |")

    alone = CliRunner().invoke(main, ["compare", str(runs[0]), str(runs[4]), "--out", str(tmp_path / "alone")])
    assert alone.exit_code == 0, alone.output
    row = json.loads((tmp_path / "alone" / "compare.json").read_text())["rows"][1]
    footnotes = json.loads((tmp_path / "alone" / "compare.json").read_text())["footnotes"]
    assert row["speedup"] is None and footnotes[str(row["notes"]["speedup"])] == (
        "no BF16 run of this configuration (FP8 GEMMs, bf16 VAE) with a SingleStream latency in this comparison")


def test_host_offload_is_a_configuration_of_its_own_that_keeps_the_videos(tmp_path):
    """`--offload` changes the latency, not the pixels: compare tells its runs apart (a speed record without the
    key kept every weight on the GPU), and a video's reuse digest ignores it."""
    from fsbench.harness.run import made_with as artifacts

    speed = {"compile": True, "gemm": "bf16", "vae": "fp32", "sdpa_priority": []}
    offloaded = {"offload": True, "host_offload": {"parts": ["text_encoder"], "pinned_bytes": 1 << 30}}
    runs = []
    for name, schedule, extra in [("bf16", "bf16", {}), ("mxfp8", "mxfp8", {}),
                                  ("bf16-off", "bf16", offloaded), ("mxfp8-off", "mxfp8", offloaded)]:
        single = {"latency_p90_ns": 5e9, "valid": True, "speed": {**speed, **extra}}
        results = {"SingleStream": {"performance": single}}
        runs.append(Run.open(make_run(tmp_path / name, schedule, {}, results=results)))
    assert report.labels(runs) == ["BF16 · weights on the GPU", "MXFP8 · weights on the GPU", "BF16 · host offload",
                                   "MXFP8 · host offload"]
    digests = {artifacts.made_with("tiny", {}, "0" * 64, "mxfp8", "auto", {**speed, "offload": offload})
               for offload in (False, True)}
    assert len(digests) == 1


def test_latencies_carry_intervals_over_queries_and_an_invalid_speedup_is_no_figure(tmp_path):
    rng = np.random.default_rng(3)
    runs = {}
    for schedule, valid in (("bf16", True), ("mxfp8", True), ("hybrid", False)):
        latencies = (LATENCY[schedule] * rng.uniform(0.9, 1.1, 40) * 1e9).astype(int).tolist()
        single = {"latency_p50_ns": float(np.percentile(latencies, 50)),
                  "latency_p90_ns": float(np.percentile(latencies, 90)), "valid": valid, "query_count": 40,
                  "query_latencies_ns": latencies}
        runs[schedule] = make_run(tmp_path / schedule, schedule, {PROMPTS[0]: constant_video([1] * 9)},
                                  results={"SingleStream": {"performance": single}})
    out = tmp_path / "cmp"
    result = CliRunner().invoke(main, ["compare", *(str(runs[s]) for s in ("bf16", "mxfp8", "hybrid")),
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = {r["schedule"]: r for r in json.loads((out / "compare.json").read_text())["rows"]}
    for row in table.values():
        low, high = row["ci95"]["latency_s"]
        assert low <= row["latency_s"] <= high and row["queries"] == 40
        assert row["ci95"]["latency_p50_s"][0] <= row["latency_p50_s"] <= row["ci95"]["latency_p50_s"][1]
    assert table["MXFP8"]["speedup_valid"] is True and table["hybrid"]["speedup_valid"] is False
    low, high = table["hybrid"]["ci95"]["speedup"]
    assert low < table["hybrid"]["speedup"] < high
    text = (out / "compare.md").read_text()
    hybrid = next(line for line in text.splitlines() if line.startswith("| hybrid"))
    assert f"({table['hybrid']['speedup']:.2f}× [{low:.2f}×, {high:.2f}×])" in hybrid
    assert report.NOT_VALID in text
    mxfp8 = next(line for line in text.splitlines() if line.startswith("| MXFP8"))
    assert f"| {table['MXFP8']['speedup']:.2f}× [" in mxfp8  # both VALID: a figure, not in parentheses
