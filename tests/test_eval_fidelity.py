"""PSNR / SSIM / LPIPS against hand-computed values, on real mp4 files and a random-backbone LPIPS."""
from __future__ import annotations

import csv
import json
import math
import os

import lpips as lpips_pkg
import numpy as np
import pytest
import torch

from fsbench.errors import FsbenchError
from fsbench.eval import fidelity
from fsbench.eval.runs import Run
from fsbench.eval.video_io import read_frames, write_video

from eval_runs import SETTINGS, constant_video, make_run

C1 = (0.01 * 255) ** 2


def ssim_of_constants(a: float, b: float) -> float:
    """SSIM of two uniform images: variances vanish, leaving the luminance term (2ab + C1) / (a^2 + b^2 + C1)."""
    return (2 * a * b + C1) / (a * a + b * b + C1)


def random_lpips() -> fidelity.Lpips:
    """Test-only LPIPS: the package's real linear heads on a random AlexNet (no ImageNet weights offline)."""
    torch.manual_seed(0)
    return fidelity.Lpips(lpips_pkg.LPIPS(net="alex", pretrained=True, pnet_rand=True, verbose=False), device="cpu")


def test_psnr_of_uniform_offset_is_hand_computed_value():
    a = np.full((16, 24, 3), 100, np.uint8)
    assert fidelity.psnr(a, a + 10) == pytest.approx(10 * math.log10(255**2 / 100), abs=1e-9)
    b = a.copy()
    b[..., 0] += 30  # one channel of three off by 30: MSE = 900 / 3
    assert fidelity.psnr(a, b) == pytest.approx(10 * math.log10(255**2 / 300), abs=1e-9)


def test_ssim_of_uniform_frames_is_the_luminance_term():
    a = np.full((16, 24, 3), 100, np.uint8)
    assert fidelity.ssim(a, a + 10) == pytest.approx(ssim_of_constants(100, 110), abs=1e-9)
    assert fidelity.ssim(a, np.full_like(a, 200)) == pytest.approx(ssim_of_constants(100, 200), abs=1e-9)


def test_identical_frames_give_infinite_psnr_and_ssim_one():
    a = np.random.default_rng(0).integers(0, 256, (32, 48, 3), dtype=np.uint8)
    assert fidelity.psnr(a, a) == math.inf
    assert fidelity.ssim(a, a) == pytest.approx(1.0, abs=1e-12)
    assert fidelity.format_metric(math.inf, 2) == "inf"


@pytest.mark.slow
def test_lpips_is_zero_on_identical_frames_and_symmetric():
    model = random_lpips()
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)
    b = rng.integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)
    assert np.all(model(a, a) == 0.0)
    ab, ba = model(a, b), model(b, a)
    assert np.all(ab > 0)
    np.testing.assert_allclose(ab, ba, rtol=1e-6)


def test_frames_are_read_back_bit_exact_every_fourth(tmp_path):
    frames = np.random.default_rng(2).integers(0, 256, (9, 32, 48, 3), dtype=np.uint8)
    path = write_video(tmp_path / "v.mp4", frames, lossless=True)
    kept, total = read_frames(path, 4)
    assert total == 9 and np.array_equal(kept, frames[[0, 4, 8]])


@pytest.fixture
def runs(tmp_path):
    """A reference and a test run of two prompts: one brighter by 10 on every frame, one identical."""
    ref = make_run(tmp_path / "bf16", "bf16", {"grey": constant_video(range(100, 109)),
                                               "same": constant_video([50] * 9)})
    run = make_run(tmp_path / "mxfp8", "mxfp8", {"grey": constant_video(range(110, 119)),
                                                 "same": constant_video([50] * 9)})
    return Run.open(run), Run.open(ref)


def test_evaluate_means_match_hand_computation_and_identical_video_is_counted_not_averaged(runs):
    run, ref = runs
    result = fidelity.evaluate(run, ref, metrics=("psnr", "ssim", "lpips"), lpips=random_lpips)
    rows = {r["prompt"]: r for r in result.rows}
    assert rows["grey"]["frames"] == 9 and rows["grey"]["frames_compared"] == 3
    assert rows["grey"]["psnr"] == pytest.approx(10 * math.log10(255**2 / 100), abs=1e-9)
    expected_ssim = np.mean([ssim_of_constants(100 + i, 110 + i) for i in (0, 4, 8)])
    assert rows["grey"]["ssim"] == pytest.approx(expected_ssim, abs=1e-9)
    assert rows["same"]["psnr"] == math.inf and rows["same"]["ssim"] == pytest.approx(1.0)
    assert rows["same"]["lpips"] == 0.0 and rows["grey"]["lpips"] > 0
    # the identical prompt is counted, never averaged in: the mean is the other prompt's finite PSNR
    assert result.summary["metrics"]["psnr"] == {"mean": pytest.approx(10 * math.log10(255**2 / 100)), "ci95": None,
                                                 "prompts": 1, "identical": 1}
    assert result.summary["metrics"]["ssim"]["mean"] == pytest.approx((expected_ssim + 1) / 2, abs=1e-9)
    assert result.summary["source"] == {"kind": "mp4", "frames": 0, "mp4": 2}
    with open(run.eval_dir / "fidelity.csv") as f:
        csv_rows = {r["prompt"]: r for r in csv.DictReader(f)}
    assert csv_rows["same"]["psnr"] == "inf" and csv_rows["same"]["status"] == "ok"
    summary = json.loads((run.eval_dir / "summary.json").read_text())
    assert summary["fidelity"]["metrics"]["psnr"]["mean"] == pytest.approx(10 * math.log10(255**2 / 100))


def test_mismatched_and_missing_videos_are_listed_not_averaged(tmp_path):
    ref = make_run(tmp_path / "bf16", "bf16", {"ok": constant_video([100] * 9), "short": constant_video([100] * 9),
                                               "small": constant_video([100] * 9)})
    run = make_run(tmp_path / "mxfp4", "mxfp4", {"ok": constant_video([110] * 9), "short": constant_video([0] * 5),
                                                 "small": constant_video([0] * 9, height=16),
                                                 "orphan": constant_video([0] * 9)})
    result = fidelity.evaluate(Run.open(run), Run.open(ref), metrics=("psnr", "ssim"))
    problems = {p["prompt"]: p["problem"] for p in result.problems}
    assert problems["short"] == "frame count 5 vs 9 in the reference"
    assert problems["small"] == "frame size 48x16 vs 48x32 in the reference"
    assert problems["orphan"].startswith("video missing in the reference")
    assert result.summary["prompts_compared"] == 1 and result.summary["prompts_expected"] == 4
    assert result.summary["metrics"]["psnr"]["mean"] == pytest.approx(10 * math.log10(255**2 / 100))


def test_prompt_listed_in_manifest_without_video_is_a_problem(tmp_path):
    prompts = tmp_path / "hybrid" / "prompts.txt"  # a run recorded before its texts were kept, its file inside it
    prompts.parent.mkdir()
    prompts.write_text("a\nb\n")
    ref = make_run(tmp_path / "bf16", "bf16", {"a": constant_video([1] * 9), "b": constant_video([1] * 9)})
    run = make_run(tmp_path / "hybrid", "hybrid", {"a": constant_video([1] * 9)}, prompts_file=prompts)
    result = fidelity.evaluate(Run.open(run), Run.open(ref), metrics=("psnr",))
    assert [p["prompt"] for p in result.problems] == ["b"]
    assert result.problems[0]["problem"].startswith("video missing in the run")


def test_reference_with_other_settings_is_refused_naming_the_setting(tmp_path):
    ref = make_run(tmp_path / "bf16", "bf16", {"a": constant_video([1] * 9)}, settings={**SETTINGS, "flow_shift": 3.0})
    run = make_run(tmp_path / "mxfp8", "mxfp8", {"a": constant_video([1] * 9)})
    with pytest.raises(FsbenchError, match=r"flow_shift 12.0 vs 3.0"):
        fidelity.evaluate(Run.open(run), Run.open(ref), metrics=("psnr",))


def test_evaluate_resumes_finished_prompts_and_redoes_changed_videos(runs):
    run, ref = runs
    fidelity.evaluate(run, ref, metrics=("psnr",))
    record_path = run.eval_dir / "fidelity" / "grey.json"
    record = json.loads(record_path.read_text())
    record["psnr"] = 999.0
    record_path.write_text(json.dumps(record))
    resumed = fidelity.evaluate(run, ref, metrics=("psnr",))
    assert {r["prompt"]: r["psnr"] for r in resumed.rows}["grey"] == 999.0
    assert {r["prompt"]: r["psnr"] for r in resumed.rows}["same"] == math.inf  # read back as a number, not "inf"
    added = fidelity.evaluate(run, ref, metrics=("psnr", "ssim"))  # only the new metric is computed
    assert {r["prompt"]: r for r in added.rows}["grey"]["psnr"] == 999.0
    assert {r["prompt"]: r for r in added.rows}["grey"]["ssim"] == pytest.approx(ssim_of_constants(100, 110), abs=0.01)
    os.utime(run.video("grey"), ns=(1, 1))  # a touched file is the same video: its scores stand
    touched = fidelity.evaluate(run, ref, metrics=("psnr",))
    assert {r["prompt"]: r["psnr"] for r in touched.rows}["grey"] == 999.0
    write_video(run.video("grey"), constant_video(range(120, 129)), lossless=True)  # another video, same name
    redone = fidelity.evaluate(run, ref, metrics=("psnr",))
    assert {r["prompt"]: r["psnr"] for r in redone.rows}["grey"] == pytest.approx(10 * math.log10(255**2 / 400))


@pytest.mark.slow
def test_process_pool_gives_the_same_rows_as_one_process(runs, tmp_path):
    run, ref = runs
    serial = fidelity.evaluate(run, ref, metrics=("psnr", "ssim", "lpips"), lpips=random_lpips)
    for path in (run.eval_dir / "fidelity").iterdir():
        path.unlink()
    pooled = fidelity.evaluate(run, ref, metrics=("psnr", "ssim", "lpips"), workers=2, lpips=random_lpips)
    for a, b in zip(pooled.rows, serial.rows):  # LPIPS sums in another order with one thread per worker
        assert a == {**b, "lpips": pytest.approx(b["lpips"], rel=1e-6, abs=1e-9)}


def test_missing_alexnet_weights_skip_lpips_with_exact_path(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    run, ref = runs
    result = fidelity.evaluate(run, ref, metrics=("psnr", "ssim", "lpips"))
    message = result.not_computed["lpips"]
    assert str(tmp_path / "torch_home" / "hub" / "checkpoints" / "alexnet-owt-7be5be79.pth") in message
    assert message.startswith("LPIPS not computed, weights missing")
    psnr = result.summary["metrics"]["psnr"]
    assert psnr["prompts"] + psnr["identical"] == 2 and "lpips" not in result.summary["metrics"]


def test_a_sweep_with_identical_prompts_and_frames_has_a_finite_mean_and_counts_them(tmp_path):
    """As in a 248-prompt sweep: some prompts are byte-identical to BF16 on frame 0 only, some on every frame."""
    from fsbench.harness.tune import budget, validate

    ref_videos, run_videos = {}, {}
    for i in range(12):
        base = [60 + i] * 9
        ref_videos[f"p{i}"] = constant_video(base)
        if i < 2:  # identical prompts
            run_videos[f"p{i}"] = constant_video(base)
        else:  # frame 0 identical, the others off by i
            run_videos[f"p{i}"] = constant_video([base[0]] + [v + i for v in base[1:]])
    ref = Run.open(make_run(tmp_path / "runs" / validate.REFERENCE, "bf16", ref_videos))
    run = Run.open(make_run(tmp_path / "runs" / "mxfp8", "mxfp8", run_videos))
    result = fidelity.evaluate(run, ref, metrics=("psnr", "ssim"))
    rows = {r["prompt"]: r for r in result.rows}
    # frames 0, 4, 8 compared; MSE pooled over them: two of three frames off by i
    assert rows["p5"]["psnr"] == pytest.approx(10 * math.log10(255**2 / (2 / 3 * 25)), abs=1e-9)
    psnr = result.summary["metrics"]["psnr"]
    finite = [10 * math.log10(255**2 / (2 / 3 * i * i)) for i in range(2, 12)]
    assert psnr["identical"] == 2 and psnr["prompts"] == 10 and psnr["mean"] == pytest.approx(np.mean(finite))
    low, high = psnr["ci95"]
    assert low < psnr["mean"] < high and math.isfinite(high)
    assert result.summary["interval"]["seed"] == 0
    # tune: a PSNR budget above every prompt that differs is missed, not passed by the identical ones
    measured = validate.score(tmp_path, ["mxfp8"], ("psnr",))["mxfp8"]["psnr"]
    assert measured == pytest.approx(np.mean(finite))
    assert budget.Budget("psnr", ">=", max(finite) + 1).met(measured) is False


def test_bootstrap_interval_covers_a_known_mean_at_its_nominal_rate():
    from fsbench.eval import intervals

    rng = np.random.default_rng(7)
    trials, n = 400, 60
    covered = 0
    for trial in range(trials):
        sample = rng.lognormal(0.0, 0.5, n)  # skewed, as per-prompt PSNRs are; true mean exp(0.125)
        low, high = intervals.interval(sample, seed=trial, resamples=2000)
        covered += low <= math.exp(0.125) <= high
    rate = covered / trials
    sd = math.sqrt(0.95 * 0.05 / trials)
    assert abs(rate - 0.95) < 3 * sd + 0.015, rate  # the percentile bootstrap runs a little narrow at n=60
