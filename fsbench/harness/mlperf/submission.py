"""`fsbench submission`: turns fsbench runs into an MLPerf Inference v6.1 submission tree for wan-2.2-t2v-a14b.

    ROOT/<division>/<submitter>/systems/<system>.json
    ROOT/<division>/<submitter>/src/wan-2.2-t2v-a14b/README.md
    ROOT/<division>/<submitter>/results/<system>/wan-2.2-t2v-a14b/<Scenario>/
        README.md  user.conf  measurements.json
        performance/run_1/mlperf_log_{summary,detail}.txt
        accuracy/mlperf_log_{summary,detail}.txt  mlperf_log_accuracy.json (truncated)  accuracy.txt (+hash=)
        accuracy/videos/<idx>.mp4 (the ten audit videos) + captions.txt
        accuracy/made_with/<idx>.mp4.json  accuracy/fsbench.sha256 (the tree's proof: `harness.mlperf.proof`)
        TEST04/verify_performance.txt  TEST04/performance/run_1/mlperf_log_{summary,detail}.txt  (when run)

The tree is built in a staging folder next to its destination and checked with every rule of
`harness.mlperf.rules`; only a tree without errors replaces `ROOT/<division>/<submitter>`, so a refused
package never leaves a half-written or stale submission behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsbench import files, mllog
from fsbench.errors import FsbenchError
from fsbench.files import atomic_write_text
from fsbench.folders import claim
from fsbench.harness.mlperf import (
    accuracy_log,
    compliance,
    evidence,
    official as official_checker,
    proof,
    system as system_desc,
)
from fsbench.harness.mlperf.rules import SCENARIOS, Problem, check
from fsbench.harness.run import made_with
from fsbench.harness.run.dataset import LATENT_FILE, LATENT_GIT_BLOB
from fsbench.rundir import BENCHMARK, VIDEOS, load_manifest, loadgen_dir, video_name

DIVISIONS = ("open", "closed")
LOG_FILES = ("mlperf_log_summary.txt", "mlperf_log_detail.txt")
STAGING_PREFIX = ".fsbench-staging-"  # then the PID of the job that builds in it
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # a submitter or system: one folder name
_FLAGS = {"count": "count", "time_s": "time", "target_latency_ms": "target-latency", "target_qps": "target-qps"}


@dataclass
class Sources:
    """Where one scenario's pieces come from: the run folder and its LoadGen log folders."""

    scenario: str
    performance: tuple[Path, dict[str, Any]] | None = None
    accuracy: tuple[Path, dict[str, Any]] | None = None
    test04: tuple[Path, dict[str, Any]] | None = None

    def piece(self, mode: str) -> tuple[Path, dict[str, Any]]:
        """The run and manifest of `mode` (performance or accuracy), which every chosen scenario has."""
        found: tuple[Path, dict[str, Any]] | None = getattr(self, mode)
        if found is None:
            raise FsbenchError(f"{self.scenario} has no {mode} run in --runs")
        return found


@dataclass
class Report:
    """What `assemble` did: the submitter folder, every problem found, the official checker's verdict when asked,
    and whether the tree was written."""

    path: Path
    problems: list[Problem] = field(default_factory=list)
    written: bool = False
    official: official_checker.Verdict | None = None  # with --official-checker: MLCommons' checker on the same tree


def test04_dir(run: Path, system: str, scenario: str) -> Path:
    """Where a TEST04 run keeps its LoadGen logs inside a run folder (the layout `fsbench run --audit TEST04`
    is asked to write)."""
    return loadgen_dir(run, system, scenario, "performance", audit="TEST04")


def assemble(runs: list[Path], out: Path, division: str, submitter: str, system: str,
             system_toml: Path | None = None, checker: Path | None = None) -> Report:
    """Build and check the tree; write it only when no rule fails (see `Report`). `checker`: the tools/submission
    folder of an mlcommons/inference checkout (`official.tools_dir`), whose verdict must pass too."""
    if division not in DIVISIONS:
        raise FsbenchError(f"--division must be one of {', '.join(DIVISIONS)}, got {division!r}")
    for label, name in (("--submitter", submitter), ("--system", system)):
        if not NAME.match(name):
            raise FsbenchError(f"{label} {name!r} must be a folder name: letters, digits, '_', '-', '.', '+'")
    manifests = [(Path(r), dict(load_manifest(r))) for r in runs]
    _same_system_under_test(manifests)
    sources = _collect(manifests)
    evidence.verify_videos([(s.scenario, *s.piece("accuracy")) for s in sources])
    data = _data_dir()
    out = claim(Path(out), "submission")
    final = out / division / submitter
    _clean_stale_staging(out)
    staging = Path(tempfile.mkdtemp(dir=files.guard(files.staging_of(out)), prefix=f"{STAGING_PREFIX}{os.getpid()}-"))
    try:
        tree = staging / division / submitter
        problems = _latent_problems(manifests) if division == "closed" else []
        problems += _build(tree, sources, manifests, division, submitter, system, system_toml, data)
        problems += check(staging)
        report = Report(final, problems)
        if checker is not None:
            report.official = official_checker.check(checker, staging)
        if not any(p.severity == "error" for p in problems) and (report.official is None or report.official.ok):
            _replace(tree, final)
            report.written = True
        return report
    finally:
        files.remove(staging)


def _clean_stale_staging(out: Path) -> None:
    """Remove the staging folders that killed packaging jobs left in `out`'s staging place: each names its job's
    PID, so a folder whose job still runs (another packaging into the same root) is left alone."""
    for entry in files.staging_of(out).glob(f"{STAGING_PREFIX}*"):
        pid = entry.name[len(STAGING_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            files.remove(entry)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _data_dir() -> Path:
    """vbench_prompts.txt and samples_filename_ids.txt, found where the evaluation finds them."""
    from fsbench.eval.vbench_adapter import data_dir

    return data_dir()


def _same_system_under_test(manifests: list[tuple[Path, dict[str, Any]]]) -> None:
    """One submission result = one model, one schedule, one set of settings; refuse mixing runs."""
    first_path, first = manifests[0]
    for path, manifest in manifests[1:]:
        for key in ("model", "preset", "settings"):
            if manifest.get(key) != first.get(key):
                raise FsbenchError(f"{path} and {first_path} differ in {key}: package runs of one configuration")
        if (manifest.get("schedule") or {}).get("spec") != (first.get("schedule") or {}).get("spec"):
            raise FsbenchError(f"{path} and {first_path} use different schedules: package one schedule at a time")


def _latent_problems(manifests: list[tuple[Path, dict[str, Any]]]) -> list[Problem]:
    """A closed result starts every video from MLPerf's fixed_latent.pt: one error for each run that did not."""
    problems = []
    for path, manifest in manifests:
        latent = manifest.get("latent") or {}
        if latent.get("git_blob") != LATENT_GIT_BLOB:
            problems.append(Problem(str(path), f"started from the latent {latent.get('source', '(not recorded)')!r}, "
                                    f"not MLPerf's {LATENT_FILE} (git blob {LATENT_GIT_BLOB}) that the closed "
                                    "division needs: fetch it with scripts/fetch_dataset.py, set FSBENCH_DATA and run "
                                    "again"))
    return problems


def _collect(manifests: list[tuple[Path, dict[str, Any]]]) -> list[Sources]:
    """Each scenario's performance, accuracy and TEST04 logs; each piece must come from exactly one run."""
    found = {s: Sources(s) for s in SCENARIOS}
    for run, manifest in manifests:
        system = manifest.get("system", "")
        for scenario in SCENARIOS:
            folders = {"performance": loadgen_dir(run, system, scenario, "performance"),
                       "accuracy": loadgen_dir(run, system, scenario, "accuracy"),
                       "test04": test04_dir(run, system, scenario)}
            for piece, folder in folders.items():
                if not (folder / "mlperf_log_detail.txt").is_file():
                    continue
                if piece == "accuracy" and not (folder / "mlperf_log_accuracy.json").is_file():
                    raise FsbenchError(f"{folder / 'mlperf_log_accuracy.json'} is missing: rerun the accuracy pass "
                                       f"(`fsbench run --scenario {scenario} --mode accuracy --out {run}`)")
                if getattr(found[scenario], piece) is not None:
                    raise FsbenchError(f"two runs hold a {scenario} {piece} result ({run} and "
                                       f"{getattr(found[scenario], piece)[0]}): pass only one of them to --runs")
                setattr(found[scenario], piece, (run, manifest))
    chosen = [s for s in found.values() if s.performance or s.accuracy]
    if not chosen:
        raise FsbenchError("the runs hold no LoadGen results: run `fsbench run --scenario Offline --out RUN` first")
    for sources in chosen:
        for mode in ("performance", "accuracy"):
            if getattr(sources, mode) is None:
                raise FsbenchError(f"{sources.scenario} has no {mode} run in --runs: run `fsbench run --scenario "
                                   f"{sources.scenario} --mode {mode} --out RUN` and pass that RUN too")
    return chosen


def _build(tree: Path, sources: list[Sources], manifests: list[tuple[Path, dict[str, Any]]], division: str,
           submitter: str, system: str, system_toml: Path | None, data: Path) -> list[Problem]:
    manifest = manifests[0][1]
    devices = {(m.get("device") or {}).get("type"): (m.get("device") or {}).get("name") for _, m in manifests}
    desc = system_desc.describe(division, submitter, system, software=manifest.get("versions"),
                                notes=_sw_notes(manifest), toml_file=system_toml,
                                with_accelerators=set(devices) != {"cpu"})
    problems = _device_matches(desc, devices.get("cuda"), system_toml)
    atomic_write_text(tree / "systems" / f"{system}.json", json.dumps(desc, indent=2) + "\n")
    atomic_write_text(tree / "src" / BENCHMARK / "README.md", _src_readme(manifest))
    for src in sources:
        folder = tree / "results" / system / BENCHMARK / src.scenario
        problems += _scenario(folder, src, division, data)
    return problems


def _scenario(folder: Path, src: Sources, division: str, data: Path) -> list[Problem]:
    perf_run, manifest = src.piece("performance")
    perf_logs = loadgen_dir(perf_run, manifest["system"], src.scenario, "performance")
    _copy_logs(perf_logs, folder / "performance" / "run_1")
    values = mllog.read(perf_logs / "mlperf_log_detail.txt").values
    verdict = None
    if src.test04 is not None:
        test_run, test_manifest = src.test04
        test_logs = test04_dir(test_run, test_manifest["system"], src.scenario)
        _copy_logs(test_logs, folder / "TEST04" / "performance" / "run_1")
        verdict = compliance.verify_performance(perf_logs / "mlperf_log_summary.txt",
                                                test_logs / "mlperf_log_summary.txt")
        atomic_write_text(folder / "TEST04" / "verify_performance.txt", verdict)
    atomic_write_text(folder / "user.conf", _user_conf(src.scenario, values))
    findings = evidence.accuracy_findings(src.scenario, *src.piece("accuracy"))
    atomic_write_text(folder / "README.md", _scenario_readme(src, manifest, verdict, findings))
    atomic_write_text(folder / "measurements.json", json.dumps(_measurements(manifest), indent=2) + "\n")
    where = "/".join((folder / "accuracy").parts[-7:])
    severity = "warning" if division == "open" else "error"
    return [Problem(where, text, severity) for text in findings] + _accuracy(folder / "accuracy", src, division, data)


def _accuracy(folder: Path, src: Sources, division: str, data: Path) -> list[Problem]:
    from fsbench.eval.vbench_adapter import accuracy_text, audit_videos

    run, manifest = src.piece("accuracy")
    logs = loadgen_dir(run, manifest["system"], src.scenario, "accuracy")
    where = "/".join(folder.parts[-7:])
    problems = []
    _copy_logs(logs, folder)
    score = evidence.vbench_score(run)
    accuracy_log.write_truncated(logs / "mlperf_log_accuracy.json", folder,
                                 accuracy_text(score) if score is not None else "")
    if _prompts_sha(manifest) != _prompts_sha_of(data / "vbench_prompts.txt"):
        problems.append(Problem(where, f"{run} was not run over the 248 MLPerf prompts, so its videos do not match "
                                       "the audit indices: run with --prompts vbench_prompts.txt",
                                "warning" if division == "open" else "error"))
    captions = []
    for prompt, idx in audit_videos(data):
        video = run / VIDEOS / video_name(prompt)
        if not video.is_file():  # verified when present (evidence.verify_videos); absent for other prompts
            problems.append(Problem(where, f"audit video {idx}.mp4 needs {video}: the accuracy run did not "
                                           "generate it; rerun the accuracy pass over all 248 prompts"))
            continue
        target = folder / proof.VIDEOS / f"{idx}.mp4"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(video, target)
        (folder / proof.RECORDS).mkdir(exist_ok=True)
        shutil.copyfile(made_with.sidecar(video), folder / proof.RECORDS / f"{target.name}.json")
        captions.append(f"{idx}.mp4\t{prompt}\n")
    atomic_write_text(folder / proof.VIDEOS / "captions.txt", "".join(captions))
    proof.write(folder)
    return problems


def _copy_logs(source: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in LOG_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)


def _replace(tree: Path, final: Path) -> None:
    """Swap the checked tree into place; an older submission of the same submitter is removed after the swap."""
    files.guard(final).parent.mkdir(parents=True, exist_ok=True)
    old = None
    if os.path.lexists(final):
        old = files.guard(final.with_name(f".{final.name}.old-{os.getpid()}"))
        os.replace(final, old)
    os.replace(tree, final)
    if old is not None:
        files.remove(old)


def _device_matches(desc: dict[str, Any], gpu: str | None, system_toml: Path | None) -> list[Problem]:
    """The system description must describe the machine the runs were made on, not the one packaging them."""
    if gpu and gpu != desc.get("accelerator_model_name"):
        return [Problem(f"{desc['division']}/{desc['submitter']}/systems/{desc['system_name']}.json",
                        f"the runs used {gpu} but this machine reports {desc.get('accelerator_model_name')}: "
                        f"package on the machine that ran them or set the accelerator_* fields in "
                        f"{system_toml or '--system-toml'}")]
    return []


def _prompts_sha(manifest: dict[str, Any]) -> str | None:
    return (manifest.get("prompts") or {}).get("sha256")


def _prompts_sha_of(path: Path) -> str | None:
    if not path.is_file():
        return None
    texts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return hashlib.sha256("".join(t + "\n" for t in texts).encode()).hexdigest()


def _user_conf(scenario: str, values: dict[str, Any]) -> str:
    """The LoadGen settings in force for the performance run, as user.conf lines (read from the detail log)."""
    keys = [("min_duration", values.get("effective_min_duration_ms")),
            ("max_duration", values.get("effective_max_duration_ms")),
            ("min_query_count", values.get("effective_min_query_count")),
            ("max_query_count", values.get("effective_max_query_count")),
            ("performance_sample_count_override", values.get("effective_performance_sample_count"))]
    if scenario == "SingleStream" and values.get("effective_target_latency_ns"):
        keys.insert(0, ("target_latency", values["effective_target_latency_ns"] / 1e6))
    if scenario == "Offline" and values.get("effective_target_qps") is not None:
        keys.insert(0, ("target_qps", values["effective_target_qps"]))
    lines = [f"{BENCHMARK}.{scenario}.{key} = {_conf_value(v)}" for key, v in keys if v is not None]
    return ("# LoadGen settings in force for this performance run (effective values from its "
            "mlperf_log_detail.txt);\n# fsbench read LoadGen's built-in mlperf.conf, then scenarios/user.conf "
            "and the run's overrides.\n" + "\n".join(lines) + "\n")


def _conf_value(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _measurements(manifest: dict[str, Any]) -> dict[str, str]:
    model = str(manifest.get("model", ""))
    schedule = manifest.get("schedule") or {}
    weights = {"tiny": "none: fsbench's tiny test model with random weights (no checkpoint)",
               "a14b-synthetic": "none: random weights in the Wan2.2-T2V-A14B architecture (no checkpoint)"}
    quantized = schedule.get("spec") not in (None, "bf16:*")
    return {
        "input_data_types": "text prompt (UTF-8) and the fixed initial latent (float32)",
        "retraining": "No",
        "starting_weights_filename": weights.get(model, f"Wan2.2-T2V-A14B-Diffusers ({Path(model).name})"),
        "weight_data_types": (manifest.get("device") or {}).get("dtype") or "bfloat16",
        "weight_transformations": (f"none; self-attention activations quantized on the fly by the Fused-Softmax "
                                   f"kernels, schedule {schedule.get('name')} ({schedule.get('spec')})")
        if quantized else "none",
    }


def _sw_notes(manifest: dict[str, Any]) -> str:
    schedule = manifest.get("schedule") or {}
    return (f"fsbench {(manifest.get('versions') or {}).get('fsbench')} at commit {manifest.get('git_commit')}; "
            f"attention schedule {schedule.get('name')} ({schedule.get('spec')}); preset {manifest.get('preset')}")


def _settings_line(manifest: dict[str, Any]) -> str:
    s = manifest.get("settings") or {}
    return (f"{s.get('height')}x{s.get('width')}, {s.get('num_frames')} frames at {s.get('fps')} fps, "
            f"{s.get('steps')} steps, guidance {s.get('guidance_scale')}/{s.get('guidance_scale_2')}, "
            f"flow_shift {s.get('flow_shift')}, boundary_ratio {s.get('boundary_ratio')}")


def _scenario_readme(src: Sources, manifest: dict[str, Any], test04_verdict: str | None, notes: list[str]) -> str:
    schedule = manifest.get("schedule") or {}
    device = (manifest.get("device") or {}).get("name")
    lines = [f"# {BENCHMARK} {src.scenario}", "",
             f"Model `{manifest.get('model')}`, preset `{manifest.get('preset')}`, attention schedule "
             f"`{schedule.get('name')}` (`{schedule.get('spec')}`), device {device}.",
             f"Generation: {_settings_line(manifest)}.", "", "| run | result |", "|---|---|"]
    for piece, run in ((mode, src.piece(mode)) for mode in ("performance", "accuracy")):
        result = ((run[1].get("results") or {}).get(src.scenario) or {}).get(piece) or {}
        shown = result.get("validity") or f"{result.get('samples', '?')} samples"
        lines.append(f"| {piece} | {shown} (from `{run[0].name}`) |")
    if test04_verdict is not None and src.test04 is not None:
        lines.append(f"| TEST04 | {test04_verdict.strip().splitlines()[-1]} (from `{src.test04[0].name}`) |")
    overrides = ((manifest.get("results") or {}).get(src.scenario) or {}).get("performance", {}).get("overrides") or {}
    flags = " ".join(f"--{_FLAGS.get(k, k)} {v}" for k, v in overrides.items())
    lines += ["", "Reproduce:", "", "```",
              f"fsbench run --model {manifest.get('model')} --preset {manifest.get('preset')} "
              f"--schedule '{schedule.get('spec')}' --scenario {src.scenario} --mode performance {flags} --out RUN",
              f"fsbench run --model {manifest.get('model')} --preset {manifest.get('preset')} "
              f"--schedule '{schedule.get('spec')}' --scenario {src.scenario} --mode accuracy "
              "--prompts vbench_prompts.txt --out RUN",
              "fsbench eval RUN --metrics vbench", "```", ""]
    if notes:
        lines += ["## Notes", "", *(f"- {note}" for note in notes), ""]
    return "\n".join(lines)


def _src_readme(manifest: dict[str, Any]) -> str:
    return (f"# fsbench for {BENCHMARK}\n\n"
            "fsbench is an MLPerf-style harness for Wan2.2-T2V-A14B text-to-video with quantized Fused-Softmax "
            "attention (MX formats, Hadamard-rotated Q and K, a fused softmax with a frozen row maximum).\n\n"
            f"Version {(manifest.get('versions') or {}).get('fsbench')}, commit {manifest.get('git_commit')}.\n\n"
            "```\nfsbench run --scenario {Offline|SingleStream} --mode {performance|accuracy} ... --out RUN\n"
            "fsbench eval RUN --metrics vbench\n"
            "fsbench submission --runs RUN --out ROOT --division open --submitter ORG --system NAME\n"
            "fsbench submission --check ROOT\n```\n")
