"""VBench adapter: naming, dimension filtering, aggregation, accuracy.txt, weight checks; and (with the vbench
environment) the real VBench code path end to end on tiny videos with test-only random weights."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fsbench.errors import FsbenchError
from fsbench.eval import vbench_adapter
from fsbench.eval.runs import Run
from fsbench.harness.cli import main

from eval_runs import constant_video, make_run

CHECKER_REGEX = r".*'vbench_score':\s([\d.]+).*"  # MLPerf submission checker, matched one line at a time
VBENCH_PYTHON = Path(os.environ.get("FSBENCH_VBENCH_PYTHON")
                     or Path(__file__).resolve().parents[1] / ".venv-vbench" / "bin" / "python")
STANDINS = Path(__file__).resolve().with_name("eval_vbench_standins.py")


@pytest.fixture
def empty_caches(tmp_path, monkeypatch):
    """Weight caches with nothing in them, so the presence check is deterministic on any machine."""
    caches = {"VBENCH_CACHE_DIR": tmp_path / "vbench_cache", "TORCH_HOME": tmp_path / "torch_home",
              "HF_HOME": tmp_path / "hf_home"}
    for name, path in caches.items():
        monkeypatch.setenv(name, str(path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return caches


def test_six_dimensions_cover_the_248_mlperf_prompts(shared_data):
    full_info = json.loads((shared_data / "VBench_full_info.json").read_text())
    per_dim = vbench_adapter.dimension_prompts(full_info)
    counts = {d: len(p) for d, p in per_dim.items()}
    assert counts == {"subject_consistency": 72, "background_consistency": 86, "motion_smoothness": 72,
                      "dynamic_degree": 72, "appearance_style": 90, "scene": 86}
    prompts = set((shared_data / "vbench_prompts.txt").read_text().splitlines())
    assert {p for ps in per_dim.values() for p in ps} == prompts
    assert "temporal_flickering" not in per_dim


def test_staging_links_only_vbench_prompts_under_standard_names(tmp_path):
    run = make_run(tmp_path / "run", "bf16", {"alley": constant_video([1] * 2), "not a vbench prompt":
                                              constant_video([1] * 2)})
    (tmp_path / "run" / "videos" / ".tmp-half.mp4").write_bytes(b"")
    staged = vbench_adapter.stage_videos(Run.open(run), ["alley", "a person swimming in ocean"], tmp_path / "s")
    assert staged == ["alley"]
    assert sorted(os.listdir(tmp_path / "s")) == ["alley-0.mp4"]
    assert (tmp_path / "s" / "alley-0.mp4").resolve() == (run / "videos" / "alley-0.mp4").resolve()


def test_overall_is_the_plain_mean_of_six_times_100():
    scores = dict(zip(vbench_adapter.DIMENSIONS, [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]))
    assert vbench_adapter.overall(scores) == pytest.approx(65.0)
    assert vbench_adapter.overall({**scores, "scene": None}) is None
    assert vbench_adapter.overall({k: v for k, v in scores.items() if k != "scene"}) is None


@pytest.mark.parametrize("score, verdict", [(71.83, "PASS"), (69.7752, "PASS"), (69.7751, "FAIL")])
def test_accuracy_txt_is_parsed_by_the_checker_regex(score, verdict):
    text = vbench_adapter.accuracy_text(np.float64(score))
    matches = [re.match(CHECKER_REGEX, line) for line in text.splitlines()]
    found = [float(m.group(1)) for m in matches if m]
    assert found == [score]
    assert "np.float64" not in text
    assert text.splitlines()[1].startswith(f"{verdict}: threshold 69.7752")


def _audit_run(tmp_path, shared_data, skip: str | None = None) -> Run:
    pairs = vbench_adapter.audit_videos(shared_data)
    videos = {p: constant_video([i] * 2) for i, (p, _) in enumerate(pairs) if p != skip}
    run = make_run(tmp_path / "run", "bf16", videos, preset="mlperf")
    (run / "test_system" / "wan-2.2-t2v-a14b" / "Offline" / "accuracy").mkdir(parents=True)
    return Run.open(run)


def test_mlperf_files_hold_score_and_the_ten_audit_videos_by_index(tmp_path, shared_data):
    run = _audit_run(tmp_path, shared_data)
    out = vbench_adapter.write_submission_files(run, 70.5, shared_data)
    accuracy = run.path / "test_system" / "wan-2.2-t2v-a14b" / "Offline" / "accuracy"
    assert re.match(CHECKER_REGEX, (accuracy / "accuracy.txt").read_text().splitlines()[0]).group(1) == "70.5"
    ids = sorted(p.stem for p in (accuracy / "videos").iterdir())
    assert ids == sorted(["130", "106", "84", "59", "12", "123", "43", "22", "238", "32"])
    boat = "A boat sailing leisurely along the Seine River with the Eiffel Tower in background, pixel art"
    assert (accuracy / "videos" / "130.mp4").read_bytes() == run.video(boat).read_bytes()
    assert out["audit_videos_missing"] == []


def test_missing_audit_video_is_reported(tmp_path, shared_data):
    run = _audit_run(tmp_path, shared_data, skip="indoor swimming pool")
    out = vbench_adapter.write_submission_files(run, None, shared_data)
    assert out["audit_videos_missing"] == [str(run.video("indoor swimming pool"))]
    assert not (run.path / "eval" / "vbench" / "accuracy.txt").exists()


def test_missing_weights_name_every_file_and_where_it_goes(tmp_path, shared_data, empty_caches, monkeypatch):
    monkeypatch.setenv("FSBENCH_DATA", str(shared_data))
    run = _audit_run(tmp_path, shared_data)
    summary = vbench_adapter.evaluate(run)
    cache, torch_home, hf = (str(empty_caches[k]) for k in ("VBENCH_CACHE_DIR", "TORCH_HOME", "HF_HOME"))
    expected = {
        "subject_consistency": [f"{cache}/dino_model/facebookresearch_dino_main/hubconf.py",
                                f"{cache}/dino_model/dino_vitbase16_pretrain.pth",
                                f"{torch_home}/hub/checkpoints/dino_vitbase16_pretrain.pth"],
        "background_consistency": [f"{cache}/clip_model/ViT-B-32.pt"],
        "motion_smoothness": [f"{cache}/amt_model/amt-s.pth"],
        "dynamic_degree": [f"{cache}/raft_model/models/raft-things.pth"],
        "appearance_style": [f"{cache}/clip_model/ViT-B-32.pt"],
        "scene": [f"{cache}/caption_model/tag2text_swin_14m.pth", f"{hf}/hub/models--bert-base-uncased"],
    }
    for dim, paths in expected.items():
        message = summary["not_computed"][dim]
        assert all(p in message for p in paths), message
    assert summary["overall"] is None and summary["accuracy"]["vbench_score"] is None
    assert not (run.path / "eval" / "vbench" / "accuracy.txt").exists()


def test_absent_vbench_environment_says_how_to_create_it(monkeypatch, tmp_path):
    monkeypatch.setenv("FSBENCH_VBENCH_PYTHON", str(tmp_path / "nowhere" / "python"))
    with pytest.raises(FsbenchError, match="scripts/setup_vbench_env.sh"):
        vbench_adapter.vbench_python()


def _stage_empty(files) -> None:
    """Put an empty file at every weight path (presence is all the check looks at)."""
    for weight in files:
        if weight.kind == "hf-snapshot":
            (weight.path / "refs").mkdir(parents=True, exist_ok=True)
            (weight.path / "refs" / "main").write_text("abc")
            (weight.path / "snapshots" / "abc").mkdir(parents=True, exist_ok=True)
            for name in weight.files:
                (weight.path / "snapshots" / "abc" / name).touch()
        else:
            weight.path.parent.mkdir(parents=True, exist_ok=True)
            weight.path.touch()


@pytest.mark.slow
def test_fetch_script_finds_every_weight_in_place_without_network(tmp_path, empty_caches):
    """The fetch script's presence logic agrees with eval/weights.py (all files staged empty: nothing to fetch)."""
    from fsbench.eval import weights

    _stage_empty(weights.lpips_weights() + [w for ws in weights.vbench_weights().values() for w in ws])
    script = Path(__file__).resolve().parents[1] / "scripts" / "fetch_eval_weights.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=os.environ)
    assert done.returncode == 0, done.stderr
    assert "all evaluation weights in place" in done.stdout and "downloading" not in done.stdout


@pytest.mark.slow
def test_fetch_script_refuses_an_unknown_weight_name_in_one_line():
    script = Path(__file__).resolve().parents[1] / "scripts" / "fetch_eval_weights.py"
    done = subprocess.run([sys.executable, str(script), "--only", "lpips,subject_consistncy"], capture_output=True,
                          text=True, env=os.environ)
    assert done.returncode == 2 and "subject_consistncy" in done.stderr and "subject_consistency" in done.stderr
    assert "downloading" not in done.stdout


needs_vbench = pytest.mark.skipif(not VBENCH_PYTHON.is_file(),
                                  reason=f"no vbench environment at {VBENCH_PYTHON}: run scripts/setup_vbench_env.sh")

STATIC_PROMPTS = ["a person swimming in ocean", "alley",
                  "A beautiful coastal beach in spring, waves lapping on sand, Van Gogh style"]


@pytest.fixture(scope="module")
def vbench_standin_eval(tmp_path_factory, shared_data):
    """`fsbench eval --metrics vbench` on static tiny videos, VBench loading test-only random checkpoints."""
    root = tmp_path_factory.mktemp("vbench")
    env = {"VBENCH_CACHE_DIR": str(root / "cache"), "TORCH_HOME": str(root / "torch"), "HF_HOME": str(root / "hf"),
           "FSBENCH_DATA": str(shared_data), "OMP_NUM_THREADS": "2"}
    subprocess.run([str(VBENCH_PYTHON), str(STANDINS), env["VBENCH_CACHE_DIR"], env["TORCH_HOME"]], check=True,
                   capture_output=True, env={**os.environ, **env})
    texture = np.random.default_rng(0).integers(0, 256, (1, 64, 64, 3), dtype=np.uint8)
    run = make_run(root / "run", "bf16", {p: np.repeat(texture, 4, axis=0) for p in STATIC_PROMPTS}, preset="mlperf")
    result = CliRunner().invoke(main, ["eval", str(run), "--metrics", "vbench"], env=env)
    return run, env, result, json.loads((run / "eval" / "summary.json").read_text())["vbench"]


@needs_vbench
@pytest.mark.slow
def test_static_video_has_subject_and_background_consistency_one(vbench_standin_eval):
    _, _, _, summary = vbench_standin_eval
    assert summary["dimensions"]["subject_consistency"]["score"] == pytest.approx(1.0, abs=1e-5)
    assert summary["dimensions"]["background_consistency"]["score"] == pytest.approx(1.0, abs=1e-5)


@needs_vbench
@pytest.mark.slow
def test_other_shipped_dimensions_run_and_stay_in_their_ranges(vbench_standin_eval):
    run, _, _, summary = vbench_standin_eval
    dims = summary["dimensions"]
    assert 0.0 <= dims["motion_smoothness"]["score"] <= 1.0
    per_video = json.loads((run / "eval" / "vbench" / "dynamic_degree.json").read_text())["videos"]
    assert [v["video"] for v in per_video] == ["a person swimming in ocean-0.mp4"]
    assert per_video[0]["score"] in (True, False)
    assert math.isfinite(dims["appearance_style"]["score"])
    assert all(dims[d]["prompts_scored"] == 1 for d in vbench_adapter.DIMENSIONS)


@needs_vbench
@pytest.mark.slow
def test_missing_scene_weights_leave_overall_empty_and_exit_2(vbench_standin_eval):
    run, env, result, summary = vbench_standin_eval
    assert result.exit_code == 2
    assert f"{env['VBENCH_CACHE_DIR']}/caption_model/tag2text_swin_14m.pth" in result.stderr
    assert "fsbench: error: evaluation incomplete" in result.stderr
    assert "scripts/fetch_eval_weights.py" in result.stderr
    assert summary["dimensions"]["scene"]["score"] is None and summary["overall"] is None
    assert not (run / "eval" / "vbench" / "accuracy.txt").exists()


@needs_vbench
@pytest.mark.slow
def test_rerun_reads_finished_dimensions_back_without_vbench(vbench_standin_eval, tmp_path):
    run, env, _, summary = vbench_standin_eval
    env = {**env, "FSBENCH_VBENCH_PYTHON": str(tmp_path / "absent" / "python")}
    again = CliRunner().invoke(main, ["eval", str(run), "--metrics", "vbench"], env=env)
    assert "vbench environment not found" not in again.stderr
    assert json.loads((run / "eval" / "summary.json").read_text())["vbench"]["dimensions"] == summary["dimensions"]


@pytest.mark.slow
def test_complete_mlperf_run_gets_accuracy_txt_with_the_mean_of_six(tmp_path, shared_data, empty_caches,
                                                                    monkeypatch):
    """All 248 prompts and all weights present: the six dimension scores (from a fake runner) become accuracy.txt."""
    from fsbench.eval import weights

    monkeypatch.setenv("FSBENCH_DATA", str(shared_data))
    _stage_empty([w for ws in weights.vbench_weights().values() for w in ws])
    run = make_run(tmp_path / "run", "bf16", {"seed": constant_video([7] * 2)}, preset="mlperf")
    for prompt in (shared_data / "vbench_prompts.txt").read_text().splitlines():
        os.link(run / "videos" / "seed-0.mp4", run / "videos" / f"{prompt}-0.mp4")
    accuracy = run / "sys" / "wan-2.2-t2v-a14b" / "Offline" / "accuracy"
    accuracy.mkdir(parents=True)
    fake = dict(zip(vbench_adapter.DIMENSIONS, [0.93, 0.94, 0.97, 0.93, 0.21, 0.34]))
    seen = {}

    def fake_runner(work, full_info, dimensions, device, mode):
        seen["videos"] = sorted(os.listdir(work / "videos"))
        for dim in dimensions:
            yield dim, {"dimension": dim, "score": fake[dim], "videos": []}

    monkeypatch.setattr(vbench_adapter, "_run_runner", fake_runner)
    summary = vbench_adapter.evaluate(Run.open(run))
    assert len(seen["videos"]) == 248 and "seed-0.mp4" not in seen["videos"]
    expected = 100 * (0.93 + 0.94 + 0.97 + 0.93 + 0.21 + 0.34) / 6  # 72.0
    assert summary["overall"] == pytest.approx(expected)
    assert summary["accuracy"]["passed"] is True
    line = (accuracy / "accuracy.txt").read_text().splitlines()[0]
    assert float(re.match(CHECKER_REGEX, line).group(1)) == pytest.approx(expected, abs=1e-4)
    assert len(list((accuracy / "videos").iterdir())) == 10


RECORDING_RUNNER = '''"""Stands in for vbench_runner.py: records the GPU and process of each dimension, score 0.5."""
import json, os, sys
job = json.load(open(sys.argv[1]))
os.makedirs(job["results_dir"], exist_ok=True)
for dim in job["dimensions"]:
    path = os.path.join(job["results_dir"], dim + ".json")
    json.dump({"dimension": dim, "score": 0.5, "videos": [], "gpu": os.environ["CUDA_VISIBLE_DEVICES"],
               "pid": os.getpid()}, open(path, "w"))
    print(json.dumps({"dimension": dim, "result": path}), flush=True)
'''


def _recording_run(tmp_path, shared_data, monkeypatch, visible: str | None) -> Path:
    """A run with a video for every VBench prompt, the recording runner in VBench's place, all weights staged and
    CUDA_VISIBLE_DEVICES set to `visible` (None: unset)."""
    from fsbench.eval import weights

    runner = tmp_path / "recording_runner.py"
    runner.write_text(RECORDING_RUNNER)
    monkeypatch.setattr(vbench_adapter, "RUNNER", runner)
    monkeypatch.setenv("FSBENCH_VBENCH_PYTHON", sys.executable)
    monkeypatch.setenv("FSBENCH_DATA", str(shared_data))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    _stage_empty([w for ws in weights.vbench_weights().values() for w in ws])
    run = make_run(tmp_path / "run", "bf16", {"seed": constant_video([7] * 2)})
    for prompt in (shared_data / "vbench_prompts.txt").read_text().splitlines():
        os.link(run / "videos" / "seed-0.mp4", run / "videos" / f"{prompt}-0.mp4")
    return run


@pytest.mark.parametrize("visible, children", [(None, ("0", "1")), ("GPU-5e1f, 3,6", ("GPU-5e1f", "3"))],
                         ids=["unset", "uuid-and-number"])
@pytest.mark.slow
def test_gpus_deal_the_dimensions_over_runners_that_each_see_one_gpu(tmp_path, shared_data, empty_caches,
                                                                     monkeypatch, visible, children):
    """`--gpus 2`: two runner processes at once, one per GPU, each scoring its dimensions over all their videos;
    each runner sees the GPU by the name this process's CUDA_VISIBLE_DEVICES gives it (a number or a UUID)."""
    run = _recording_run(tmp_path, shared_data, monkeypatch, visible)
    scored = []
    summary = vbench_adapter.evaluate(Run.open(run), on_dimension=scored.append, gpus=2)
    assert sorted(scored) == sorted(vbench_adapter.DIMENSIONS) and summary["overall"] == pytest.approx(50.0)
    raw = {d: json.loads((run / "eval" / "vbench" / f"{d}.json").read_text()) for d in vbench_adapter.DIMENSIONS}
    by_gpu = {gpu: {d for d, r in raw.items() if r["gpu"] == gpu} for gpu in children}
    first, second = (by_gpu[gpu] for gpu in children)
    assert first | second == set(vbench_adapter.DIMENSIONS) and len(first) == len(second) == 3
    assert len({r["pid"] for r in raw.values()}) == 2
    assert sorted(p.name for p in (run / "eval" / "vbench").glob("job*.json")) == ["job-gpu0.json", "job-gpu1.json"]


@pytest.mark.slow
def test_more_gpus_than_cuda_visible_devices_names_stops_before_any_runner(tmp_path, shared_data, empty_caches,
                                                                          monkeypatch):
    run = _recording_run(tmp_path, shared_data, monkeypatch, "5")
    with pytest.raises(FsbenchError, match=r"^--gpus 2: CUDA_VISIBLE_DEVICES=5 names 1$"):
        vbench_adapter.evaluate(Run.open(run), gpus=2)
    assert not list((run / "eval" / "vbench").glob("job*.json"))


def test_a_video_that_does_not_decode_is_refused_in_one_line_before_vbench_starts(tmp_path):
    run = make_run(tmp_path / "run", "bf16", {"alley": constant_video([1] * 2), "a cat": constant_video([2] * 2)})
    video = run / "videos" / "a cat-0.mp4"
    video.write_bytes(video.read_bytes()[:200])
    with pytest.raises(FsbenchError, match=r"1 video\(s\) of .* do not decode, first: .*a cat-0.mp4 does not decode"):
        vbench_adapter.stage_videos(Run.open(run), ["alley", "a cat"], tmp_path / "s")
    assert not (tmp_path / "s").exists()


@needs_vbench
@pytest.mark.slow
def test_custom_prompts_are_scored_in_custom_input_mode_on_its_four_dimensions(vbench_standin_eval, tmp_path):
    _, env, _, _ = vbench_standin_eval
    texture = np.random.default_rng(1).integers(0, 256, (1, 64, 64, 3), dtype=np.uint8)
    prompts = ["a red cube on a table", "a quiet empty room"]  # not VBench's prompts
    run = make_run(tmp_path / "run", "bf16", {p: np.repeat(texture, 4, axis=0) for p in prompts}, preset="mlperf")
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "prompts": {"texts": prompts}}))
    result = CliRunner().invoke(main, ["eval", str(run), "--metrics", "vbench"], env=env)
    summary = json.loads((run / "eval" / "summary.json").read_text())["vbench"]
    assert result.exit_code == 0, result.output
    assert "custom prompts: custom-input mode, overall of 4 dimensions" in result.stdout
    assert summary["mode"] == "custom_input" and summary["dimensions_in_overall"] == list(
        vbench_adapter.CUSTOM_DIMENSIONS)
    dims = summary["dimensions"]
    assert dims["subject_consistency"]["score"] == pytest.approx(1.0, abs=1e-5)  # a static video
    assert all(dims[d]["prompts_scored"] == 2 for d in vbench_adapter.CUSTOM_DIMENSIONS)
    assert dims["scene"]["score"] is None and "custom-input mode cannot score it" in dims["scene"]["not_computed"]
    assert summary["overall"] == pytest.approx(100 * np.mean([float(dims[d]["score"])
                                                              for d in vbench_adapter.CUSTOM_DIMENSIONS]))
    assert "accuracy" not in summary  # not the benchmark's score: no accuracy.txt
