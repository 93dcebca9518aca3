"""`fsbench tune` on the tiny model on the CPU with a fixed cost table: the chosen schedule keeps its budget on
the validation videos (measured), no single format keeping it is cheaper, a stricter budget never adds
low-precision calls, a second tune regenerates nothing, and bad input fails in one line before any work."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsbench.eval import fidelity
from fsbench.eval.runs import Run
from fsbench.harness.cli import main
from fsbench.harness.precision.schedule import load_file
from fsbench.harness.tune import costs, schedule_file, search

COSTS = Path(__file__).parent / "data" / "tiny_costs.json"
SMALL: list[str] = []  # the tiny model's own 64x64, 9 frames, 4 steps: the committed cost table's shape
BASE = ["tune", "--model", "tiny", "--formats", "mxfp8", "--candidates", "2", "--costs", str(COSTS),
        "--device", "cpu", *SMALL]


# SSIM bounds: a tiny video's mean PSNR is infinite as soon as one compared frame comes out identical.
LOOSE = ("--budget", "psnr>=30", "--budget", "ssim>=0.93")
STRICT = ("--budget", "psnr>=30", "--budget", "ssim>=0.95")


def _tune(out: Path, *extra: str):
    return CliRunner().invoke(main, [*BASE, "--out", str(out), *extra])


def _manifest(out: Path) -> dict:
    return json.loads((out / "tune.json").read_text())


def _videos(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.glob("runs/*/videos/*.mp4")}


def _cost_ms() -> dict[str, float]:
    rows = json.loads(COSTS.read_text())["rows"]
    return {row["row"].split("-")[-1]: row["median_ms"] for row in rows}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    import torch

    out = tmp_path_factory.mktemp("tune") / "loose"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny model runs several times faster on one thread of a shared machine
    try:
        result = _tune(out, *LOOSE)
    finally:
        torch.set_num_threads(threads)
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_the_chosen_schedule_keeps_its_budget_when_run_from_its_file(tuned, tmp_path, one_thread):
    manifest = _manifest(tuned)
    chosen = next(row for row in manifest["candidates"] if row["name"] == manifest["chosen"]["name"])
    assert chosen["low_precision_cells"] > 0
    check = tmp_path / "check"
    result = CliRunner().invoke(main, ["sweep", "--model", "tiny", "--schedules", str(tuned / "chosen.toml"),
                                       "--prompts", str(tuned / "prompts" / "validation.txt"), "--out", str(check),
                                       "--device", "cpu", *SMALL])
    assert result.exit_code == 0, result.output
    scored = fidelity.evaluate(Run.open(check / "chosen"), Run.open(tuned / "runs" / "bf16"), ("psnr", "ssim"))
    assert scored.summary["prompts_compared"] == 2
    assert scored.summary["metrics"]["psnr"]["mean"] >= 30 and scored.summary["metrics"]["ssim"]["mean"] >= 0.93


@pytest.mark.slow
def test_no_single_format_keeping_the_budget_is_cheaper_by_the_cost_table(tuned):
    manifest = _manifest(tuned)
    ms = _cost_ms()
    calls = {(r["step"], r["layer"]): r["calls_per_video"] for r in manifest["sensitivity"]}

    def predicted(row: dict) -> float:  # from the committed cost table and the schedule file itself
        table = load_file(tuned / row["schedule_file"]).resolve(4, 2).table
        return sum(n * ms["bf16" if table[s][layer] == "bf16" else table[s][layer]] for (s, layer), n in calls.items())

    chosen = next(row for row in manifest["candidates"] if row["name"] == manifest["chosen"]["name"])
    singles = [row for row in manifest["candidates"] if row["kind"] == "single" and row["low_precision_cells"]]
    assert singles
    for row in singles:
        if row["meets_budgets"]:
            assert predicted(row) >= predicted(chosen)
    table = load_file(tuned / "chosen.toml").resolve(4, 2).table
    assert table == load_file(tuned / chosen["schedule_file"]).resolve(4, 2).table
    assert (tuned / "report.md").read_text().count("|") > 20 and (tuned / "front.png").stat().st_size > 0


@pytest.mark.slow
def test_a_resumed_tune_regenerates_nothing_and_a_stricter_budget_adds_no_low_precision_call(tuned):
    before, loose = _videos(tuned), _manifest(tuned)
    again = _tune(tuned, *LOOSE)
    assert again.exit_code == 0, again.output
    assert "calibrating" not in again.output and _videos(tuned) == before
    assert all(row["videos_generated"] == 0 for row in _manifest(tuned)["candidates"])
    strict = _tune(tuned, *STRICT)
    assert strict.exit_code == 0, strict.output
    manifest = _manifest(tuned)
    assert _videos(tuned) == before and manifest["sensitivity"] == loose["sensitivity"]

    def cells(m: dict) -> int:
        return next(r["low_precision_cells"] for r in m["candidates"] if r["name"] == m["chosen"]["name"])

    chosen = next(r for r in manifest["candidates"] if r["name"] == manifest["chosen"]["name"])
    assert chosen["measured"]["ssim"] >= 0.95 and float(chosen["measured"]["psnr"]) >= 30
    assert cells(manifest) <= cells(loose)


@pytest.mark.slow
def test_a_budget_no_schedule_meets_is_one_line_and_leaves_no_schedule(tuned):
    before = _videos(tuned)
    result = _tune(tuned, "--budget", "psnr>=120")  # above any video that differs from BF16 by one step anywhere
    assert result.exit_code == 2
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("fsbench: error: no low-precision schedule meets psnr>=120") and "closest" in last
    assert _videos(tuned) == before
    assert not (tuned / "chosen.toml").exists() and _manifest(tuned)["chosen"] is None


@pytest.mark.parametrize("extra, words", [
    (["--budget", "psnr<=35"], "psnr is better when higher"),
    (["--budget", "fvd>=3"], "unknown metric"),
    (["--budget", "psnr>=lots"], "bad --budget"),
    (["--budget", "psnr>=30", "--formats", "mxfp8,fp3"], "unknown: fp3"),
    (["--budget", "psnr>=30", "--granularity", "frame"], "bad --granularity"),
    (["--budget", "psnr>=30", "--profile", str(COSTS)], "not a profile.json"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, extra, words):
    out = tmp_path / "tune"
    result = CliRunner().invoke(main, [*BASE, "--out", str(out), *extra])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and words in result.output
    assert not out.exists()


def test_a_cost_file_of_another_shape_is_refused_in_one_line(tmp_path):
    other = json.loads(COSTS.read_text())
    for row in other["rows"]:
        row["shape"] = [1, 40, 75600, 128]
    costs = tmp_path / "a14b.json"
    costs.write_text(json.dumps(other))
    out = tmp_path / "tune"
    args = [a if a != str(COSTS) else str(costs) for a in BASE]
    result = CliRunner().invoke(main, [*args, "--out", str(out), "--budget", "psnr>=30"])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "1,40,75600,128" in result.output and "1,2,48,32" in result.output
    assert not out.exists()


def test_the_rest_of_a_query_is_its_wall_time_less_every_self_attention_call():
    profile = Path(__file__).parents[1] / "results" / "h200" / "e2e" / "queries_97f8d2f" / "bf16" / "profile.json"
    doc = json.loads(profile.read_text())
    summary = doc["summary"]  # per format: its steps and their mean self-attention time
    attention = sum(part["steps"] * part["self_attention_s"] for part in summary["step_by_format"].values())
    expected_ms = 1e3 * (summary["wall_s"] - attention) / summary["videos"]
    assert costs.rest_from_profile(profile)["ms"] == pytest.approx(expected_ms, rel=1e-6)
    assert 0 < expected_ms < 1e3 * summary["wall_s"]


def _sensitivity(errors: dict[str, list[float]]) -> list[dict]:
    """Four steps of one layer, two calls each, with the given per-step errors of each format."""
    return [{"step": s, "layer": 0, "fmt": fmt, "calls_per_video": 2.0, "rel_l2": errs[s]}
            for fmt, errs in errors.items() for s in range(4)]


def test_the_search_prices_formats_by_their_costs_only():
    table = _sensitivity({"mxfp8": [0.03, 0.02, 0.02, 0.05], "mxfp4": [0.12, 0.1, 0.1, 0.2]})
    hopper = search.groups(table, {"bf16": 1.0, "mxfp8": 0.5, "mxfp4": 0.5}, ("mxfp8", "mxfp4"), "step")
    assert not any("mxfp4" in row for c in search.front(hopper, 4, 1) for row in c.table)
    faster = search.groups(table, {"bf16": 1.0, "mxfp8": 0.5, "mxfp4": 0.25}, ("mxfp8", "mxfp4"), "step")
    points = search.front(faster, 4, 1)
    assert points[0].table == (("mxfp4",),) * 4 and points[-1].table == (("bf16",),) * 4
    for cheaper, dearer in zip(points, points[1:]):
        assert cheaper.predicted_ms <= dearer.predicted_ms and cheaper.predicted_error >= dearer.predicted_error
        assert cheaper.low_precision_cells >= dearer.low_precision_cells
    # the most sensitive step (3) is the first to go back to BF16
    first_back = next(c for c in points if c.low_precision_cells == 3)
    assert first_back.table == (("mxfp8",),) * 3 + (("bf16",),)


def test_without_a_rollback_the_gate_changes_no_output():
    """Calibration reuses the gated output for the ungated variant where the gate never fired."""
    import torch

    from fsbench import kernels

    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 48, 2, 32, generator=gen) for _ in range(3))
    for fmt in ("mxfp8", "mxfp4"):
        gated, stats = kernels.attention_with_stats(q, k, v, fmt, impl="emulate", layout="BSHD")
        assert stats.rollbacks == 0
        assert torch.equal(gated, kernels.attention(q, k, v, fmt, impl="emulate", layout="BSHD", gate_doublings=None))


@pytest.mark.parametrize("granularity, count", [("step", 4), ("layer", 2), ("step,layer", 8)])
def test_groups_cover_every_cell_once_and_carry_its_calls(granularity, count):
    table = [{"step": s, "layer": layer, "fmt": "mxfp8", "calls_per_video": 2.0, "rel_l2": 0.01 * (1 + s + layer)}
             for s in range(4) for layer in range(2)]
    grouped = search.groups(table, {"bf16": 1.0, "mxfp8": 0.5}, ("mxfp8",), granularity)
    assert len(grouped) == count
    assert sorted(c for g in grouped for c in g.cells) == [(s, layer) for s in range(4) for layer in range(2)]
    assert sum(g.cost["bf16"] for g in grouped) == 16.0 and sum(g.cost["mxfp8"] for g in grouped) == 8.0
    assert sum(g.error["mxfp8"] for g in grouped) == pytest.approx(sum(r["rel_l2"] for r in table) / 8)


def test_a_quick_bench_prices_every_format_with_the_kernel_a_run_would_use(one_thread, monkeypatch):
    import warnings

    import torch

    from fsbench.kernels import dropin

    monkeypatch.setattr(dropin, "_warned", [])  # the drop-in warns once per process: as if none had yet
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        measured = costs.bench_here((1, 2, 48, 32), ("bf16", "mxfp8"), torch.device("cpu"), "auto")
    assert not seen, [str(w.message) for w in seen]  # the drop-in's advice to a script, not to `fsbench tune`
    assert set(measured.ms) == {"bf16", "mxfp8"} and all(ms > 0 for ms in measured.ms.values())
    assert measured.source["measured_here"] == "cpu" and measured.source["impl"]["mxfp8"] == "emulate"


@pytest.mark.parametrize("table", [
    (("mxfp8", "bf16"),) * 3,
    (("mxfp8", "mxfp8"), ("bf16", "bf16"), ("mxfp4", "mxfp4")),
    (("mxfp8", "bf16", "mxfp8"), ("bf16", "bf16", "bf16"), ("mxfp4", "mxfp8", "mxfp4")),
])
def test_a_schedule_file_resolves_to_the_table_it_was_written_from(tmp_path, table):
    path = schedule_file.write(tmp_path / "s.toml", table, "test")
    assert load_file(path).resolve(len(table), len(table[0])).table == table
