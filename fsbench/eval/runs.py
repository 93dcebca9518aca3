"""Reading a run folder (manifest, videos, LoadGen logs) for eval; the layout and schema are `fsbench.rundir`'s."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from fsbench import rundir


@dataclass(frozen=True)
class Performance:
    """LoadGen results of one scenario; None where the run has none."""

    latency_p50_s: float | None = None
    latency_p90_s: float | None = None
    samples_per_second: float | None = None
    valid: bool | None = None
    joules_per_video: float | None = None
    energy_note: str | None = None  # why there is no energy figure


@dataclass(frozen=True)
class Run:
    """A run folder and its manifest."""

    path: Path
    manifest: dict

    @classmethod
    def open(cls, path: str | Path) -> "Run":
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

    def videos_present(self) -> list[str]:
        """Prompts with a finished video (temp files of an interrupted write start with a dot and are skipped)."""
        if not self.videos_dir.is_dir():
            return []
        names = (p.name for p in self.videos_dir.iterdir() if p.is_file() and not p.name.startswith("."))
        suffix = rundir.VIDEO_SUFFIX
        return sorted(n[: -len(suffix)] for n in names if n.endswith(suffix))

    def prompts(self) -> list[str]:
        """The prompts the run was asked to generate (manifest prompts file and count), else the videos present."""
        info = self.manifest.get("prompts") or {}
        file = info.get("file") if isinstance(info, dict) else None
        if file:
            for candidate in (Path(file), self.path / file):
                if candidate.is_file():
                    lines = [line for line in candidate.read_text().splitlines() if line.strip()]
                    count = info.get("count")
                    return lines[:count] if isinstance(count, int) else lines
        return self.videos_present()

    def performance(self, scenario: str) -> Performance:
        """Manifest results for `scenario` (performance mode), else the LoadGen detail or summary log."""
        found = _from_manifest(self.manifest, scenario)
        if found is None:
            found = _from_loadgen_logs(self.path, scenario)
        return found or Performance()


def _from_manifest(manifest: dict, scenario: str) -> Performance | None:
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
    return Performance(_ns_to_s(p50), _ns_to_s(p90), sps, valid, *_energy(entry))


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
        values = _parse_detail(detail) if detail.is_file() else {}
        summary = folder / "mlperf_log_summary.txt"
        if not values and summary.is_file():
            values = _parse_summary(summary)
        found = _from_manifest({"results": {scenario: values}}, scenario)
        if found is not None:
            return found
    return None


def _parse_detail(path: Path) -> dict:
    """`:::MLLOG {json}` lines; the last value of each key wins."""
    values = {}
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(":::MLLOG"):
            try:
                record = json.loads(line[len(":::MLLOG"):])
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "key" in record:
                values[record["key"]] = record.get("value")
    return values


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
