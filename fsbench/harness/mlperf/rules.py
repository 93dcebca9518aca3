"""The pre-flight of an MLPerf Inference v6.1 submission tree for wan-2.2-t2v-a14b: every rule of the official
submission checker that applies to this benchmark (mlcommons/inference's tools/submission), run in one
pass so the user sees all problems at once instead of one crash or one error per checker run.

A problem is an `error` when the official checker fails (or crashes) on it in that division, and a `warning`
when it only logs it or when the result would pass the checker but not be publishable (INVALID LoadGen runs).
For the closed division fsbench is stricter than the checker on one point: INVALID LoadGen results are errors.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsbench import mllog
from fsbench.harness.mlperf import proof
from fsbench.harness.run import made_with
from fsbench.rundir import BENCHMARK

DIVISIONS = ("closed", "open", "network")
SCENARIOS = ("Offline", "SingleStream")
SEEDS = {"effective_qsl_rng_seed": 2085463073848966840,
         "effective_sample_index_rng_seed": 2747215439041700203,
         "effective_schedule_rng_seed": 16159082839903944936}
MIN_DURATION_MS = 600_000
MIN_PERFORMANCE_SAMPLES = 50
OFFLINE_MIN_SAMPLES_PER_QUERY = 50   # closed and network only
EARLY_STOPPING_MIN_QUERIES = 64      # p90 at 99% confidence: fewer queries can never meet early stopping
ACCURACY_SAMPLES = 248
VBENCH_TARGET = 70.48 * 0.99         # the checker's threshold, 69.7752
VBENCH_LINE = re.compile(r".*'vbench_score':\s([\d.]+).*")
HASH_LINE = re.compile(r"^hash=([\w\d]+)$")
MAX_ACCURACY_LOG = 10 * 1024
AUDIT_VIDEOS = ("130", "106", "84", "59", "12", "123", "43", "22", "238", "32")
MEASUREMENT_KEYS = ("input_data_types", "retraining", "starting_weights_filename", "weight_data_types",
                    "weight_transformations")
SYSTEM_KEYS = (
    "division", "submitter", "status", "system_name", "system_type", "system_type_detail",
    "number_of_nodes", "host_processor_model_name", "host_processors_per_node", "host_processor_core_count",
    "host_processor_frequency", "host_processor_caches", "host_processor_interconnect",
    "host_memory_capacity", "host_memory_configuration", "host_storage_capacity", "host_storage_type",
    "host_networking", "host_networking_topology", "host_network_card_count",
    "accelerators_per_node", "accelerator_model_name", "accelerator_memory_capacity",
    "accelerator_memory_configuration", "accelerator_frequency", "accelerator_host_interconnect",
    "accelerator_interconnect", "accelerator_interconnect_topology", "accelerator_on-chip_memories",
    "framework", "operating_system", "other_software_stack", "cooling", "hw_notes", "sw_notes",
)
SYSTEM_TRUTHY = (
    "division", "submitter", "system_type", "status", "system_name",
    "number_of_nodes", "host_processor_model_name", "host_processors_per_node", "host_processor_core_count",
    "host_memory_capacity", "host_memory_configuration", "host_storage_capacity", "host_storage_type",
    "host_networking", "host_network_card_count", "host_networking_topology",
    "accelerators_per_node", "accelerator_model_name", "accelerator_memory_capacity",
    "accelerator_host_interconnect", "accelerator_memory_configuration", "accelerator_interconnect",
    "cooling", "framework", "operating_system", "other_software_stack",
)
STATUSES = ("available", "preview", "rdi")
SYSTEM_TYPES = ("datacenter", "edge", "datacenter,edge", "edge,datacenter")
TEST04_FILES = {"mlperf_log_detail.txt", "mlperf_log_summary.txt", "mlperf_log_accuracy.json",
                "mlperf_log_trace.json", "results.json", ".gitkeep"}
TEST04_TOLERATED_ERROR = "Multiple conf files are used"


@dataclass(frozen=True)
class Problem:
    """One broken rule: where (relative to the submission root), what, and whether the checker fails on it."""

    where: str
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        return f"{self.severity}: {self.where}: {self.message}"


def check(root: Path) -> list[Problem]:
    """Every problem of the submission tree at `root` (ROOT/<division>/<submitter>/...), errors and warnings."""
    root = Path(root)
    checker = _Checker(root)
    divisions = [d for d in sorted(root.iterdir()) if d.is_dir() and d.name in DIVISIONS] if root.is_dir() else []
    if not divisions:
        return [Problem(".", "no open/, closed/ or network/ folder: build one with `fsbench submission --runs RUN "
                             "--out ROOT ...`")]
    for division in divisions:
        for submitter in sorted(p for p in division.iterdir() if p.is_dir()):
            checker.submitter(submitter, division.name)
    return checker.problems


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]


class _Checker:
    """Walks the tree once, collecting problems; each method checks one level of it."""

    def __init__(self, root: Path):
        self.root = root
        self.problems: list[Problem] = []

    def add(self, path: Path, message: str, severity: str = "error") -> None:
        self.problems.append(Problem(str(path.relative_to(self.root)), message, severity))

    def submitter(self, folder: Path, division: str) -> None:
        if not (folder / "src").is_dir():
            self.add(folder, "src/ is missing: add src/ with the code (or a README pointing to it)")
        results = folder / "results"
        if not results.is_dir():
            self.add(folder, "results/ is missing: package runs with `fsbench submission --runs RUN ...`")
            return
        for system in sorted(p for p in results.iterdir() if p.is_dir()):
            desc = folder / "systems" / f"{system.name}.json"
            if not desc.is_file():
                self.add(desc, f"missing: every results/{system.name}/ needs systems/{system.name}.json "
                               "(the official checker crashes without it)")
            else:
                self.system_json(desc, division, folder.name)
            for model in sorted(p for p in system.iterdir() if p.is_dir()):
                if model.name != BENCHMARK:
                    self.add(model, f"not {BENCHMARK}: fsbench checks only that benchmark", "warning")
                    continue
                self.model(model, division, self._system_type(desc))

    def system_json(self, path: Path, division: str, submitter: str) -> None:
        try:
            desc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            self.add(path, f"not valid JSON ({exc}): regenerate it with `fsbench submission`")
            return
        for key in SYSTEM_KEYS:
            if key not in desc:
                self.add(path, f"field {key} is missing: add it (an --system-toml override or regenerate)")
        for key in SYSTEM_TRUTHY:
            if key in desc and not desc[key]:
                hint = ' (write the string "0" for a CPU-only system)' if key == "accelerators_per_node" else ""
                self.add(path, f"field {key} needs a meaningful value, found {desc[key]!r}{hint}")
        if desc.get("status") and desc["status"] not in STATUSES:
            self.add(path, f"status {desc['status']!r} is not one of {', '.join(STATUSES)}")
        if desc.get("system_type") and desc["system_type"] not in SYSTEM_TYPES:
            self.add(path, f"system_type {desc['system_type']!r} is not one of {', '.join(SYSTEM_TYPES)}")
        if desc.get("division") and desc["division"] != division:
            self.add(path, f"division is {desc['division']!r} but the folder is {division}/")
        if desc.get("submitter") and str(desc["submitter"]).lower() != submitter.lower():
            self.add(path, f"submitter is {desc['submitter']!r} but the folder is {submitter}/")
        network = str(desc.get("is_network", "false")).lower() in ("true", "1")
        if division == "closed" and network:
            self.add(path, "is_network must be absent or false in the closed division")

    @staticmethod
    def _system_type(desc: Path) -> str:
        try:
            return str(json.loads(desc.read_text(encoding="utf-8")).get("system_type", "datacenter"))
        except (OSError, json.JSONDecodeError):
            return "datacenter"

    def model(self, folder: Path, division: str, system_type: str) -> None:
        scenarios: dict[str, Path] = {}
        for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
            name = next((s for s in SCENARIOS if s.lower() == sub.name.lower()), None)
            if name is None:
                self.add(sub, "stray folder: every folder under the model folder is read as a scenario "
                              "(the checker crashes); remove it")
            else:
                scenarios[name] = sub
        if division != "open" and "datacenter" in system_type:
            for missing in sorted(set(SCENARIOS) - set(scenarios)):
                self.add(folder, f"scenario {missing} is missing: {division} datacenter needs Offline and "
                                 f"SingleStream; run `fsbench run --scenario {missing}` for both modes")
        for name, sub in scenarios.items():
            self.scenario(sub, name, division)

    def scenario(self, folder: Path, scenario: str, division: str) -> None:
        for name in ("README.md", "user.conf"):
            path = folder / name
            if not path.is_file():
                self.add(path, "missing: repackage with `fsbench submission`")
            elif not path.read_text(encoding="utf-8", errors="replace").strip():
                self.add(path, "is empty: it must describe the run")
        self.measurements(folder / "measurements.json")
        self.performance_log(folder / "performance" / "run_1", scenario, division)
        self.accuracy(folder / "accuracy", scenario, division)
        if division != "open":
            self.test04(folder / "TEST04", scenario, division)

    def measurements(self, path: Path) -> None:
        if not path.is_file():
            self.add(path, "measurements json file not found: repackage with `fsbench submission`")
            return
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            self.add(path, f"not valid JSON ({exc})")
            return
        for key in MEASUREMENT_KEYS:
            if not found.get(key):
                self.add(path, f"field {key} is missing or empty")

    def _detail(self, folder: Path) -> tuple[Path, dict[str, Any], list[str]] | None:
        path = folder / "mlperf_log_detail.txt"
        if not path.is_file():
            self.add(path, "missing (the official checker crashes without it): copy the LoadGen logs of the run")
            return None
        log = mllog.read(path)
        if not log.marked:
            self.add(path, f"does not start with '{mllog.MARKER}': not a LoadGen detail log")
            return None
        return path, log.values, log.errors

    def performance_log(self, folder: Path, scenario: str, division: str, test04: bool = False) -> None:
        found = self._detail(folder)
        if found is None:
            return
        path, values, errs = found
        got = values.get("effective_scenario")
        if got != scenario:
            self.add(path, f"effective_scenario is {got!r}, expected {scenario}: the log is from another scenario")
        count = values.get("effective_performance_sample_count") or 0
        if count < MIN_PERFORMANCE_SAMPLES:
            self.add(path, f"performance sample count {count} < {MIN_PERFORMANCE_SAMPLES}: keep mlperf.conf's "
                           "performance_sample_count_override (248)")
        for key, expected in SEEDS.items():
            if values.get(key) != expected:
                self.add(path, f"{key[len('effective_'):]} is {values.get(key)}, expected {expected}: "
                               "run with mlcommons-loadgen 6.0.17 or later (v6.1 seeds)")
        duration = values.get("effective_min_duration_ms") or 0
        if duration < MIN_DURATION_MS:
            self.add(path, f"min_duration is {duration} ms, needs >= {MIN_DURATION_MS}: never lower it (no --time); "
                           "shorten runs with max_duration or --count instead (open division only)")
        if scenario == "SingleStream" and values.get("early_stopping_met") is not True:
            queries = values.get("result_query_count")
            self.add(path, f"early stopping not met with {queries} queries: SingleStream needs at least "
                           f"{EARLY_STOPPING_MIN_QUERIES} (run with --count {EARLY_STOPPING_MIN_QUERIES} or more)")
        if scenario == "Offline":
            if (values.get("effective_min_query_count") or 0) < 1:
                self.add(path, "min_query_count must be at least 1")
            spq = values.get("effective_samples_per_query") or 0
            if division != "open" and spq < OFFLINE_MIN_SAMPLES_PER_QUERY:
                self.add(path, f"samples per query {spq} < {OFFLINE_MIN_SAMPLES_PER_QUERY}: keep mlperf.conf's "
                               "Offline.min_query_count (248)")
        validity = values.get("result_validity")
        if validity != "VALID":
            severity = "warning" if division == "open" else "error"
            self.add(path, f"LoadGen result is {validity}: not publishable; closed needs VALID 600 s runs",
                     severity)
        real = [e for e in errs if not (test04 and TEST04_TOLERATED_ERROR in e)]
        if real:
            self.add(path, f"LoadGen logged {len(real)} error(s), fatal with --submission-exceptions: "
                           f"{real[0][:120]}", "warning")

    def accuracy(self, folder: Path, scenario: str, division: str) -> None:
        strict = division != "open"
        found = self._detail(folder)
        if found is not None:
            path, values, errs = found
            if errs:
                self.add(path, f"the accuracy run logged errors ({errs[0][:120]}): rerun it")
            count = values.get("effective_accuracy_sample_count") or values.get("qsl_reported_total_count") or 0
            if count != ACCURACY_SAMPLES:
                self.add(path, f"accuracy run covers {count} samples, the dataset has {ACCURACY_SAMPLES}: run "
                               "`fsbench run --mode accuracy` over all 248 prompts (--prompts vbench_prompts.txt)")
        log = folder / "mlperf_log_accuracy.json"
        if not log.is_file():
            self.add(log, "missing: copy the accuracy run's log")
        elif log.stat().st_size > MAX_ACCURACY_LOG:
            self.add(log, f"is not truncated ({log.stat().st_size} bytes > {MAX_ACCURACY_LOG}): package with "
                          "`fsbench submission`, which truncates it and writes the hash line")
        self.accuracy_txt(folder / "accuracy.txt", strict)
        videos = folder / "videos"
        present = {p.name.split(".")[0] for p in videos.iterdir() if p.is_file()} if videos.is_dir() else set()
        missing = [v for v in AUDIT_VIDEOS if v not in present]
        if missing:
            self.add(videos, f"audit video(s) missing: {', '.join(m + '.mp4' for m in missing)} (QSL indices into "
                             "vbench_prompts.txt); the accuracy run must cover those prompts")
        for name in sorted(v for v in AUDIT_VIDEOS if v in present):
            video = videos / f"{name}.mp4"
            try:
                made_with.probe(video)
            except ValueError as exc:
                self.add(video, f"{exc}: package again from a run whose videos are intact (a resumed run "
                                "regenerates damaged ones)")
        if videos.is_dir() and not (videos / "captions.txt").is_file():
            self.add(videos, "captions.txt is missing (expected by convention, not enforced)", "warning")
        differ = proof.differences(folder)
        if differ:
            more = f" ({len(differ) - 1} more file(s) differ)" if len(differ) > 1 else ""
            self.add(folder / differ[0][0], f"{differ[0][1]}{more}: package the tree again from its runs")

    def accuracy_txt(self, path: Path, strict: bool) -> None:
        if not path.is_file():
            self.add(path, "missing: run `fsbench eval RUN --metrics vbench`, then package again")
            return
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        scores = [float(m.group(1)) for m in map(VBENCH_LINE.match, lines) if m and _is_number(m.group(1))]
        if not scores:
            self.add(path, "no line matches 'vbench_score': X (single quotes, one space): run `fsbench eval RUN "
                           "--metrics vbench`", "error" if strict else "warning")
        elif scores[0] < VBENCH_TARGET:
            self.add(path, f"accuracy not met: vbench_score {scores[0]} < {VBENCH_TARGET:.4f} (99% of 70.48)",
                     "error" if strict else "warning")
        if not any(HASH_LINE.match(line) for line in lines):
            self.add(path, "no hash= line: package with `fsbench submission`, which truncates the accuracy log "
                           "and appends it", "error" if strict else "warning")

    def test04(self, folder: Path, scenario: str, division: str) -> None:
        if not folder.is_dir():
            self.add(folder, "missing: closed needs a TEST04 run (`fsbench run --audit TEST04`) for every scenario")
            return
        verify = folder / "verify_performance.txt"
        if not verify.is_file():
            self.add(verify, "missing: package with `fsbench submission`, which writes it from the TEST04 run")
        elif "TEST PASS" not in verify.read_text(encoding="utf-8", errors="replace"):
            line = verify.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or ["(empty)"]
            self.add(verify, f"TEST04 performance check failed: {line[0]}")
        run = folder / "performance" / "run_1"
        if run.is_dir():
            extra = sorted(p.name for p in run.iterdir() if p.name not in TEST04_FILES)
            if extra:
                self.add(run, f"unexpected file(s) {', '.join(extra)}: TEST04 run_1 holds only the LoadGen logs")
            if not (run / "mlperf_log_summary.txt").is_file():
                self.add(run / "mlperf_log_summary.txt", "missing: copy the TEST04 run's summary")
        self.performance_log(run, scenario, division, test04=True)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
