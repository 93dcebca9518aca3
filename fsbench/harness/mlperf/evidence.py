"""What a submission stands on, checked in the run folders before a tree is built: every video of an accuracy run
is the file its made_with sidecar records, and the accuracy run was scored and generated its own videos."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from fsbench.errors import FsbenchError
from fsbench.harness.run import made_with
from fsbench.rundir import MANIFEST, VIDEOS, video_name


def vbench_score(run: Path) -> float | None:
    """The run's MLPerf vbench_score as `fsbench eval` recorded it (RUN/eval/summary.json), never recomputed."""
    from fsbench.eval import store

    summary = store.read_json(Path(run) / "eval" / "summary.json") or {}
    accuracy = (summary.get("vbench") or {}).get("accuracy") or {}
    score = accuracy.get("vbench_score")
    return float(score) if isinstance(score, (int, float)) else None


def _accuracy_result(scenario: str, manifest: dict[str, Any]) -> dict[str, Any]:
    return ((manifest.get("results") or {}).get(scenario) or {}).get("accuracy") or {}


def verify_videos(accuracy_runs: list[tuple[str, Path, dict[str, Any]]]) -> None:
    """Every video of every accuracy run, the audit set and the rest alike, must be the file its made_with sidecar
    records (sha256, and the run's settings digest where the run recorded it); refused before anything is written,
    since the accuracy score and the audit both stand on them. `accuracy_runs`: (scenario, run, manifest)."""
    for scenario, run, manifest in accuracy_runs:
        texts = (manifest.get("prompts") or {}).get("texts")
        if not isinstance(texts, list) or not texts:
            raise FsbenchError(f"{run / MANIFEST} records no prompts: package a run written by `fsbench run`")
        digest = _accuracy_result(scenario, manifest).get("made_with")
        folder = (run / VIDEOS).resolve()
        bad = []
        for text in texts:
            video = run / VIDEOS / video_name(str(text))
            why = ("outside the run's videos/ folder" if video.resolve().parent != folder
                   else made_with.damaged(video, digest))
            if why:
                bad.append((video_name(str(text)), why))
        if bad:
            raise FsbenchError(f"{len(bad)} of {len(texts)} videos of {run} are missing or damaged (first: "
                               f"{bad[0][0]!r}: {bad[0][1]}): rerun `fsbench run --scenario {scenario} --mode "
                               f"accuracy --out {run}`, which generates them again, then package again")


def accuracy_findings(scenario: str, run: Path, manifest: dict[str, Any]) -> list[str]:
    """What keeps the accuracy run from standing as MLPerf's: no VBench score, or videos made before the run
    (--reuse). Errors in the closed division; warnings and README notes in the open one."""
    found = []
    if vbench_score(run) is None:
        found.append(f"{run} has no VBench score: run `fsbench eval {run} --metrics vbench` on the accuracy run "
                     "first (mlperf preset)")
    result = _accuracy_result(scenario, manifest)
    reused, samples = result.get("videos_reused"), result.get("samples", "?")
    if not isinstance(reused, int):
        found.append(f"{run}'s {scenario} accuracy run does not record how many videos it generated: rerun it "
                     f"(`fsbench run --scenario {scenario} --mode accuracy --out {run}`)")
    elif reused:
        found.append(f"{run}'s {scenario} accuracy run reused {reused} of {samples} videos made before it "
                     f"(--reuse), but MLPerf's accuracy run generates every one: rerun `fsbench run --scenario "
                     f"{scenario} --mode accuracy --out {run}` without --reuse")
    return found
