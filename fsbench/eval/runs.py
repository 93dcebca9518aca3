"""Reading a run folder (manifest, videos, LoadGen logs) for eval; the layout and schema are `fsbench.rundir`'s."""
from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsbench import mllog, rundir
from fsbench.errors import FsbenchError


@dataclass(frozen=True)
class Performance:
    """LoadGen results of one scenario; None where the run has none."""

    latency_p50_s: float | None = None
    latency_p90_s: float | None = None
    samples_per_second: float | None = None
    valid: bool | None = None
    joules_per_video: float | None = None
    energy_note: str | None = None  # why there is no energy figure
    query_count: int | None = None
    query_latencies_s: tuple[float, ...] = ()  # each query's, as the SUT timed it (runs from before have none)


@dataclass(frozen=True)
class Run:
    """A run folder and its manifest."""

    path: Path
    manifest: rundir.Manifest

    @classmethod
    def open(cls, path: str | Path) -> Run:
        path = Path(path).resolve()
        return cls(path, rundir.load_manifest(path))

    @property
    def schedule(self) -> str:
        schedule = self.manifest.get("schedule")
        if isinstance(schedule, dict) and schedule.get("name"):
            return str(schedule["name"])
        if isinstance(schedule, str) and schedule:
            return schedule
        return self.path.name

    @property
    def settings(self) -> dict:
        return dict(self.manifest.get("settings") or {})

    @property
    def preset(self) -> str | None:
        return self.manifest.get("preset")

    @property
    def videos_dir(self) -> Path:
        return rundir.videos_dir(self.path)

    @property
    def eval_dir(self) -> Path:
        return rundir.eval_dir(self.path)

    def video(self, prompt: str) -> Path:
        return self.videos_dir / rundir.video_name(prompt)

    def kept_frames(self, prompt: str) -> Path:
        """The losslessly kept frames of `prompt`'s video (`rundir.kept_frames`); a run from before may have none."""
        return rundir.kept_frames(self.path, prompt)

    def kept_frames_sha256(self, prompt: str) -> str | None:
        return _sha256_of(self.kept_frames(prompt))

    def videos_present(self) -> list[str]:
        """Prompts with a finished video (temp files of an interrupted write start with a dot and are skipped)."""
        if not self.videos_dir.is_dir():
            return []
        names = (p.name for p in self.videos_dir.iterdir() if p.is_file() and not p.name.startswith("."))
        suffix = rundir.VIDEO_SUFFIX
        return sorted(n[: -len(suffix)] for n in names if n.endswith(suffix))

    def prompts(self) -> list[str]:
        """The prompts the run generated: the manifest's texts; for a run recorded before it kept them, its prompts
        file (a path inside the run: a record never names a file elsewhere) read as `run` reads it (stripped lines)
        and refused unless it still has the recorded sha256; else the videos present."""
        info = self.manifest.get("prompts") or {}
        if not isinstance(info, dict):
            return self.videos_present()
        texts = info.get("texts")
        if isinstance(texts, list) and all(isinstance(t, str) for t in texts):
            return list(texts)
        file, count = info.get("file"), info.get("count")
        if isinstance(file, str) and file and not file.startswith("builtin:"):
            candidate = rundir.inside(self.path, file, "prompts.file")  # never a file outside the run
            if candidate.is_file():
                return self._prompts_from(candidate, count if isinstance(count, int) else None, info.get("sha256"))
        return self.videos_present()

    def _prompts_from(self, file: Path, count: int | None, sha256: str | None) -> list[str]:
        try:
            lines = [line.strip() for line in file.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise FsbenchError(f"cannot read {file}, the prompts file of {self.path}: {exc}") from exc
        texts = lines[:count] if count is not None else lines
        if sha256 and hashlib.sha256("".join(t + "\n" for t in texts).encode()).hexdigest() != sha256:
            raise FsbenchError(f"{file} changed after {self.path} was generated (its prompts no longer have the "
                               "sha256 the manifest recorded): restore the file or rerun the run")
        return texts

    def video_sha256(self, prompt: str) -> str | None:
        """The sha256 of `prompt`'s video (None when there is none): what a cached score is keyed to."""
        return _sha256_of(self.video(prompt))

    def videos_digest(self, prompts: list[str]) -> str:
        """One digest of the videos of `prompts` (and of which are missing): scores record it, compare checks it."""
        lines = "".join(f"{p}\t{self.video_sha256(p) or '-'}\n" for p in prompts)
        return hashlib.sha256(lines.encode()).hexdigest()

    def configuration(self) -> tuple[tuple[str, object], ...] | None:
        """The run's `--compile --gemm --vae --offload` as (key, value) pairs of `rundir.SPEED_KEYS`: from its
        SingleStream performance summary (where the latency comes from), else the first other summary that records
        them; None where none does. A record without `offload` kept every weight on the GPU."""
        results = self.manifest.get("results") or {}
        summaries = [(scenario, mode, summary) for scenario, modes in results.items() if isinstance(modes, dict)
                     for mode, summary in modes.items() if isinstance(summary, dict)]
        summaries.sort(key=lambda s: (s[0] != "SingleStream", s[1] != "performance"))
        for _, _, summary in summaries:
            speed = summary.get("speed")
            if isinstance(speed, dict):
                values = {"offload": False, **speed}
                return tuple((key, values.get(key)) for key in rundir.SPEED_KEYS)
        return None

    def performance(self, scenario: str) -> Performance:
        """Manifest results for `scenario` (performance mode), else the LoadGen detail or summary log."""
        found = _from_manifest(self.manifest, scenario)
        if found is None:
            found = _from_loadgen_logs(self.path, scenario)
        return found or Performance()


def _sha256_of(path: Path) -> str | None:
    if not path.is_file():
        return None
    stat = path.stat()
    return _file_sha256(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """Content hash, remembered per (path, size, mtime) within one process only."""
    return rundir.file_sha256(path)


def _from_manifest(manifest: Mapping[str, Any], scenario: str) -> Performance | None:
    results = manifest.get("results") or {}
    entry = results.get(scenario) or results.get(scenario.lower()) or {}
    if isinstance(entry, dict) and isinstance(entry.get("performance"), dict):
        entry = entry["performance"]
    if not isinstance(entry, dict) or not entry:
        return None
    # LoadGen 6.0 writes result_90.00_percentile_latency_ns; older releases one decimal
    p50 = _first(entry, "latency_p50_ns", "result_50.00_percentile_latency_ns", "result_50.0_percentile_latency_ns")
    p90 = _first(entry, "latency_p90_ns", "result_90.00_percentile_latency_ns", "result_90.0_percentile_latency_ns")
    sps = _first(entry, "samples_per_second", "result_samples_per_second")
    valid = entry.get("valid", entry.get("result_validity"))
    if isinstance(valid, str):
        valid = valid.upper() == "VALID"
    if p50 is None and p90 is None and sps is None:
        return None
    count = _first(entry, "query_count", "result_query_count")
    latencies = entry.get("query_latencies_ns")
    per_query = tuple(v / 1e9 for v in latencies if isinstance(v, (int, float))) if isinstance(latencies, list) else ()
    return Performance(_ns_to_s(p50), _ns_to_s(p90), sps, valid, *_energy(entry),
                       query_count=None if count is None else int(count), query_latencies_s=per_query)


def _energy(entry: dict) -> tuple[float | None, str | None]:
    """Joules per video from the run's profile summary (`--profile`), or why there are none."""
    profile = entry.get("profile")
    if not isinstance(profile, dict):
        return None, "energy is measured with --profile; this run has no profile"
    energy = profile.get("energy") or {}
    joules = _first(energy, "joules_per_video")
    if joules is None:
        return None, f"energy not measured: {energy.get('reason') or 'the profile predates energy'}"
    return joules, None


def _from_loadgen_logs(path: Path, scenario: str) -> Performance | None:
    for folder in sorted(path.glob(f"*/{rundir.BENCHMARK}/{scenario}/performance/run_1")):
        detail = folder / "mlperf_log_detail.txt"
        values = mllog.read(detail).values if detail.is_file() else {}
        summary = folder / "mlperf_log_summary.txt"
        if not values and summary.is_file():
            values = _parse_summary(summary)
        found = _from_manifest({"results": {scenario: values}}, scenario)
        if found is not None:
            return found
    return None


_SUMMARY_KEYS = {
    r"^50\.0+ percentile latency \(ns\)\s*:\s*([\d.eE+]+)": "result_50.0_percentile_latency_ns",
    r"^90\.0+ percentile latency \(ns\)\s*:\s*([\d.eE+]+)": "result_90.0_percentile_latency_ns",
    r"^Samples per second\s*:\s*([\d.eE+]+)": "result_samples_per_second",
    r"^Result is\s*:\s*(\w+)": "result_validity",
}


def _parse_summary(path: Path) -> dict:
    values = {}
    for line in path.read_text(errors="replace").splitlines():
        for pattern, key in _SUMMARY_KEYS.items():
            match = re.match(pattern, line.strip())
            if match:
                text = match.group(1)
                values[key] = text if key == "result_validity" else float(text)
    return values


def _first(entry: dict, *keys: str) -> float | None:
    for key in keys:
        value = entry.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _ns_to_s(value: float | None) -> float | None:
    return None if value is None else value / 1e9
