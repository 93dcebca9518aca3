"""MLPerf defaults that cannot produce a wrong submission: the mlperf preset's initial latent is MLPerf's
fixed_latent.pt (seeded, and said so, where it is absent), every run records the digests of the latent file it
read, a closed package refuses a run that did not start from the official file, and the TEST04 audit.config
fsbench writes is the official one's lines for this benchmark."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from fsbench.errors import FsbenchError
from fsbench.harness.cli import main
from fsbench.harness.mlperf import compliance as test04
from fsbench.harness.mlperf.loadgen import SCENARIOS
from fsbench.harness.run import dataset
from fsbench.harness.run.presets import build_settings
from fsbench.rundir import BENCHMARK, load_manifest

REPO = Path(__file__).resolve().parents[1]
MLPERF_INFERENCE = Path(os.environ.get("FSBENCH_MLPERF_INFERENCE") or REPO.parent / "shared/external/mlperf-inference")
SMALL = ["--model", "tiny", "--height", "16", "--width", "16", "--frames", "1", "--steps", "1"]


def fsbench(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def config_lines(text: str) -> dict[str, str]:
    """`model.scenario.key = value` lines as {key: value}, comments and blanks left out."""
    pairs = (line.split("#")[0].split("=", 1) for line in text.splitlines())
    return {key.strip(): value.strip() for key, *rest in pairs if rest for value in rest}


def test_our_test04_audit_config_is_the_official_one_for_this_benchmark_key_by_key():
    official_file = MLPERF_INFERENCE / "compliance" / "TEST04" / "audit.config"
    if not official_file.is_file():
        reason = f"no {official_file}: set FSBENCH_MLPERF_INFERENCE to an mlcommons/inference checkout"
        (pytest.fail if os.environ.get("CI") else pytest.skip)(reason)
    official = config_lines(official_file.read_text())
    ours = config_lines(test04.AUDIT_CONFIG)
    applies = {key: value for key, value in official.items()  # model.scenario.key; the model name has dots
               if key.rsplit(".", 2)[0] in ("*", BENCHMARK) and key.rsplit(".", 2)[1] in (*SCENARIOS, "*")}
    for key in sorted(applies.keys() | ours.keys()):
        assert ours.get(key) == applies.get(key), key
    assert ours[f"{BENCHMARK}.SingleStream.min_query_count"] == "20"
    assert ours[f"{BENCHMARK}.Offline.min_query_count"] == "20"


def test_the_mlperf_preset_starts_from_fixed_latent_pt_in_fsbench_data(tmp_path, monkeypatch):
    settings = build_settings("mlperf", "a14b-synthetic")
    tensor = torch.randn(settings.latent_shape, generator=torch.Generator().manual_seed(7))
    torch.save(tensor, tmp_path / "fixed_latent.pt")
    monkeypatch.setenv("FSBENCH_DATA", str(tmp_path))
    latent = dataset.load_latent(settings)
    data = (tmp_path / "fixed_latent.pt").read_bytes()
    git = subprocess.run(["git", "hash-object", str(tmp_path / "fixed_latent.pt")], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert torch.equal(latent.tensor, tensor)
    assert latent.as_dict() == {"source": str(tmp_path / "fixed_latent.pt"), "shape": [1, 16, 21, 90, 160],
                                "file_sha256": hashlib.sha256(data).hexdigest(), "git_blob": git,
                                "official": False}


def test_without_fsbench_data_the_data_folder_is_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("FSBENCH_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "fsbench").mkdir()
    (tmp_path / "fsbench" / "vbench_prompts.txt").write_text("a cat\na dog\n")
    prompts = dataset.load_prompts(None, "a14b-synthetic")
    assert prompts.texts == ("a cat", "a dog") and prompts.source == str(tmp_path / "fsbench" / "vbench_prompts.txt")
    assert dataset.default_latent_file(build_settings("mlperf", "a14b-synthetic")) == tmp_path / "fsbench" / \
        "fixed_latent.pt"
    monkeypatch.setenv("FSBENCH_DATA", str(tmp_path / "elsewhere"))
    with pytest.raises(FsbenchError, match="elsewhere/vbench_prompts.txt not found"):
        dataset.load_prompts(None, "a14b-synthetic")


def test_without_the_file_the_mlperf_preset_says_so_once_and_records_the_seed(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("FSBENCH_DATA", str(tmp_path))
    settings = build_settings("mlperf", "a14b-synthetic")
    with caplog.at_level(logging.WARNING, logger="fsbench"):
        latent = dataset.load_latent(settings)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no MLPerf fixed_latent.pt" in warnings[0] and "seed 42" in warnings[0]
    assert latent.as_dict()["source"] == "seed 42" and latent.git_blob is None and not latent.official
    assert torch.equal(latent.tensor, dataset.fixed_latent(settings))


def test_a_small_video_is_seeded_without_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("FSBENCH_DATA", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="fsbench"):
        latent = dataset.load_latent(build_settings("mlperf", "tiny"))
    assert latent.source == "seed 42" and not caplog.records


@pytest.fixture(scope="module")
def seeded_and_file_runs(tmp_path_factory):
    """One-query tiny runs: one from the seeded latent (with its accuracy pass, to package), one from a file."""
    root = tmp_path_factory.mktemp("runs")
    latent_file = root / "mine.pt"
    torch.save(torch.ones(1, 16, 1, 2, 2), latent_file)
    runs = {"seeded": root / "seeded", "file": root / "file"}
    for args in (["--count", 1, "--time", 0, "--out", runs["seeded"]], ["--mode", "accuracy", "--out", runs["seeded"]],
                 ["--count", 1, "--time", 0, "--out", runs["file"], "--latent", latent_file]):
        result = fsbench("run", *SMALL, *args)
        assert result.exit_code == 0, result.output + result.stderr
    return runs, latent_file


def test_every_run_records_the_digests_of_the_latent_file_it_read(seeded_and_file_runs):
    runs, latent_file = seeded_and_file_runs
    data = latent_file.read_bytes()
    recorded = load_manifest(runs["file"])["latent"]
    assert recorded["source"] == str(latent_file)
    assert recorded["file_sha256"] == hashlib.sha256(data).hexdigest()
    assert recorded["git_blob"] == dataset.git_blob_id(data) and recorded["official"] is False
    seeded = load_manifest(runs["seeded"])["latent"]
    assert (seeded["source"], seeded["file_sha256"], seeded["git_blob"]) == ("seed 42", None, None)


def test_a_closed_preflight_fails_a_seeded_run_with_one_line_naming_the_latent(seeded_and_file_runs, tmp_path,
                                                                               shared_data):
    runs, _ = seeded_and_file_runs
    result = CliRunner().invoke(main, ["submission", "--runs", str(runs["seeded"]), "--out", str(tmp_path),
                                       "--division", "closed", "--submitter", "Org", "--system", "cpu-tiny"],
                                env={"FSBENCH_DATA": str(shared_data)})
    assert result.exit_code == 2 and "submission not written" in result.stderr
    naming = [line for line in result.stderr.splitlines() if "latent" in line]
    assert naming == [f"error: {runs['seeded']}: started from the latent 'seed 42', not MLPerf's fixed_latent.pt "
                      f"(git blob {dataset.LATENT_GIT_BLOB}) that the closed division needs: fetch it with "
                      "scripts/fetch_dataset.py, set FSBENCH_DATA and run again"]
    assert not (tmp_path / "closed").exists()


def test_an_open_package_accepts_the_seeded_latent(seeded_and_file_runs, tmp_path, shared_data):
    runs, _ = seeded_and_file_runs
    result = CliRunner().invoke(main, ["submission", "--runs", str(runs["seeded"]), "--out", str(tmp_path),
                                       "--division", "open", "--submitter", "Org", "--system", "cpu-tiny"],
                                env={"FSBENCH_DATA": str(shared_data)})
    assert "latent" not in result.output + result.stderr


def test_the_manifest_schema_names_the_latent_record():
    from fsbench import rundir

    recorded = json.loads(json.dumps(dataset.Latent(torch.zeros(1), "seed 1").as_dict()))
    assert set(recorded) <= set(rundir.Latent.__annotations__) and {"file_sha256", "git_blob"} <= set(recorded)
    assert recorded["official"] is False
