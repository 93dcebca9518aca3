"""A campaign plan (`fsbench campaign PLAN.toml`): what a user comes for, in one file. It is read and checked
whole before anything runs; a bad field is named in one line (`PLAN: field: what is wrong`).

    description = "..."                 # optional
    model = "tiny"                      # as `fsbench run --model`
    preset = "mlperf"                   # a name or a .toml file
    schedules = ["bf16", "mxfp8", "hybrid"]   # names, .toml files or spec strings
    reference = "bf16"                  # the schedule the others are scored against [default: bf16]
    out = "results/runs/campaigns/NAME" # [default: results/runs/campaigns/<plan's stem>]
    impl = "auto"                       # and device = "auto" | "cpu" | "cuda"
    accuracy = true                     # the accuracy sweep (Offline AccuracyOnly) of every schedule
    metrics = ["psnr", "ssim"]          # `fsbench eval` of every schedule but the reference ([] for none)
    html = true                         # `fsbench compare --html`
    [prompts]      file = "...", count = N
    [settings]     height, width, frames, steps     (override the preset)
    [speed]        compile, gemm, vae, offload      (as the `fsbench run` flags)
    [performance.SingleStream]  count, time, target_latency_ms
    [performance.Offline]       count, time, target_qps
    [submission]   division = "open", submitter = "ORG", system = "NAME", checker = "PATH"
                   (package every schedule's run with `fsbench submission`; the accuracy sweep then runs in every
                   scenario of [performance.*])

Files the plan names (preset, schedules, prompts) are found relative to the plan's folder (a prompt file also in
the data folder, $FSBENCH_DATA); `out` is relative to where the command runs, as every `--out` is. A campaign runs
in one process on one device; on several GPUs, run its stages as `fsbench run` / `sweep` / `eval` with `--gpus N`
into the same folders. docs/campaigns.md describes every field.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (setup.cfg installs tomli there)
    import tomli as tomllib

from fsbench import paths, userfiles
from fsbench.errors import FsbenchError
from fsbench.harness.mlperf import loadgen
from fsbench.harness.mlperf.submission import DIVISIONS as SUBMISSION_DIVISIONS, NAME as SUBMISSION_NAME
from fsbench.harness.model import options as speed_options
from fsbench.harness.precision import schedule as schedules
from fsbench.harness.run import presets
from fsbench.kernels import registry
from fsbench.rundir import EVAL_METRICS

OUT_ROOT = Path("results/runs/campaigns")
_DEVICES = ("auto", "cpu", "cuda")
_TOP = {"description": str, "model": str, "preset": str, "schedules": list, "reference": str, "out": str,
        "impl": str, "device": str, "accuracy": bool, "metrics": list, "html": bool, "prompts": dict,
        "settings": dict, "speed": dict, "performance": dict, "submission": dict}
_PROMPTS = {"file": str, "count": int}
_SETTINGS = {"height": int, "width": int, "frames": int, "steps": int}
_SPEED = {"compile": bool, "gemm": str, "vae": str, "offload": bool}
_LOADGEN = {"SingleStream": {"count": int, "time": (int, float), "target_latency_ms": (int, float)},
            "Offline": {"count": int, "time": (int, float), "target_qps": (int, float)}}
_SUBMISSION = {"division": str, "submitter": str, "system": str, "checker": str}
_LIMITS = {"count": loadgen.MAX_COUNT, "time": loadgen.MAX_TIME_S, "target_latency_ms": loadgen.MAX_TARGET_LATENCY_MS,
           "target_qps": loadgen.MAX_TARGET_QPS}  # `fsbench run`'s bounds of the same overrides


class PlanError(FsbenchError):
    """A plan field that cannot be used; the message names the plan and the field."""


@dataclass(frozen=True)
class Submission:
    """What `fsbench submission` is asked for each schedule's run: the tree goes to <out>/submission/<schedule>/."""

    division: str
    submitter: str
    system: str | None  # [default: the run's system, e.g. cpu-tiny]; the schedule's name is appended
    checker: Path | None  # tools/submission of an mlcommons/inference checkout: its verdict must pass too


@dataclass(frozen=True)
class Plan:
    """A checked plan: everything `harness.run.campaign` needs, with defaults filled in."""

    path: Path
    description: str
    model: str
    preset: str
    schedules: tuple[schedules.Schedule, ...]
    reference: int  # index into `schedules`
    out: Path
    impl: str
    device: str
    prompts_file: Path | None
    num_prompts: int | None
    overrides: dict[str, int | None]  # height, width, num_frames, steps
    speed: speed_options.SpeedOptions
    performance: tuple[loadgen.LoadgenOptions, ...]
    accuracy: bool
    metrics: tuple[str, ...]
    html: bool
    submission: Submission | None = None


def load(path: Path) -> Plan:
    """Read and check the plan at `path`; PlanError names the first bad field."""
    try:
        data = tomllib.loads(userfiles.read_text(path, "plan"))
    except OSError as exc:
        raise FsbenchError(f"cannot read plan {path}: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PlanError(f"{path}: not valid TOML: {exc}") from exc
    return _Reader(path, data).plan()


class _Reader:
    def __init__(self, path: Path, data: dict[str, Any]):
        self.path, self.data, self.base = path, data, path.parent

    def fail(self, field: str, problem: str) -> PlanError:
        return PlanError(f"{self.path}: {field}: {problem}")

    def table(self, field: str, value: Any, shape: dict[str, Any]) -> dict[str, Any]:
        """`value` as a table whose keys are in `shape` and whose values have the types it gives."""
        if not isinstance(value, dict):
            raise self.fail(field, f"expected a table, got {type(value).__name__}")
        for key, item in value.items():
            name = f"{field}.{key}" if field else key
            if key not in shape:
                raise self.fail(name, f"unknown field; expected one of {', '.join(shape)}")
            kind = shape[key]
            if isinstance(kind, dict):
                continue
            if isinstance(item, bool) and kind is not bool or not isinstance(item, kind):
                names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
                raise self.fail(name, f"expected {names}, got {type(item).__name__} {item!r}")
        return value

    def file(self, field: str, text: str) -> Path:
        path = self.base / text if not Path(text).is_absolute() else Path(text)
        if not path.is_file():
            raise self.fail(field, f"no file {path}")
        return path

    def prompts_file(self, text: str) -> Path:
        """A prompt file beside the plan, else in the data folder (`vbench_prompts.txt`: MLPerf's 248 prompts)."""
        beside = self.base / text
        if not beside.is_file() and not Path(text).is_absolute() and (paths.data_dir() / text).is_file():
            return paths.data_dir() / text
        return self.file("prompts.file", text)

    def strings(self, field: str, value: list[Any], choices: tuple[str, ...] | None = None) -> tuple[str, ...]:
        if not all(isinstance(v, str) and v.strip() for v in value):
            raise self.fail(field, "expected a list of non-empty strings")
        if len(set(value)) != len(value):
            raise self.fail(field, "names an item twice")
        unknown = [v for v in value if choices is not None and v not in choices]
        if unknown:
            raise self.fail(field, f"unknown {', '.join(unknown)}; choose from {', '.join(choices or ())}")
        return tuple(value)

    def schedule(self, field: str, text: str) -> schedules.Schedule:
        local = self.base / text
        try:
            return schedules.load(str(local) if text.endswith(".toml") and local.is_file() else text)
        except FsbenchError as exc:
            raise self.fail(field, str(exc)) from exc

    def plan(self) -> Plan:
        d = self.table("", self.data, _TOP)
        for key in ("model", "schedules"):
            if key not in d:
                raise self.fail(key, "missing; a plan names at least the model and its schedules")
        preset = d.get("preset", "mlperf")
        try:
            presets.preset_path(str(self.base / preset) if preset.endswith(".toml") else preset)
        except FsbenchError as exc:
            raise self.fail("preset", str(exc)) from exc
        if preset.endswith(".toml"):
            preset = str(self.file("preset", preset))
        parsed = tuple(self.schedule(f"schedules[{i}]", s) for i, s in enumerate(self.strings("schedules",
                                                                                             d["schedules"])))
        if not parsed:
            raise self.fail("schedules", "is empty; name at least one, e.g. [\"bf16\", \"mxfp8\"]")
        schedules.refuse_repeats(parsed, f"{self.path}: schedules")
        names = [s.name for s in parsed]
        reference = d.get("reference", "bf16")
        metrics = self.strings("metrics", d.get("metrics", ["psnr", "ssim"]), EVAL_METRICS)
        if metrics and not d.get("accuracy", True):
            raise self.fail("metrics", "scores the accuracy sweep's videos: set accuracy = true, or metrics = []")
        fidelity = [m for m in metrics if m != "vbench"]
        if fidelity and reference not in names:
            raise self.fail("reference", f"{reference!r} is not among the schedules ({', '.join(names)}); "
                                         f"{', '.join(fidelity)} score every schedule against it")
        impl, device = d.get("impl", registry.AUTO), d.get("device", "auto")
        if impl not in registry.RUN_CHOICES:
            raise self.fail("impl", f"{impl!r}; choose from {', '.join(registry.RUN_CHOICES)}")
        if device not in _DEVICES:
            raise self.fail("device", f"{device!r}; choose from {', '.join(_DEVICES)}")
        prompts = self.table("prompts", d.get("prompts", {}), _PROMPTS)
        if prompts.get("count", 1) < 1:
            raise self.fail("prompts.count", "must be at least 1")
        settings = self.table("settings", d.get("settings", {}), _SETTINGS)
        overrides = {"height": settings.get("height"), "width": settings.get("width"),
                     "num_frames": settings.get("frames"), "steps": settings.get("steps")}
        try:
            presets.build_settings(preset, d["model"], **overrides)
        except FsbenchError as exc:
            raise self.fail("settings", str(exc)) from exc
        try:
            speed = speed_options.SpeedOptions(**self.table("speed", d.get("speed", {}), _SPEED))
        except FsbenchError as exc:
            raise self.fail("speed", str(exc)) from exc
        performance = self.performance(d.get("performance", {}))
        if not performance and not d.get("accuracy", True):
            raise self.fail("accuracy", "is false and no [performance.*] table is given: the plan makes no run")
        out = d.get("out", str(OUT_ROOT / self.path.stem))
        if not out.strip() or "\0" in out:
            raise self.fail("out", "an empty path names nothing" if not out.strip() else "a path holds no NUL byte")
        return Plan(self.path, d.get("description", ""), d["model"], preset, parsed, names.index(reference)
                    if reference in names else 0, Path(out), impl, device,
                    self.prompts_file(prompts["file"]) if "file" in prompts else None,
                    prompts.get("count"), overrides, speed, performance,
                    d.get("accuracy", True), metrics, d.get("html", True), self.submission(d.get("submission")))

    def submission(self, value: Any) -> Submission | None:
        if value is None:
            return None
        table = self.table("submission", value, _SUBMISSION)
        division = table.get("division", "open")
        if division not in SUBMISSION_DIVISIONS:
            raise self.fail("submission.division", f"{division!r}; choose from {', '.join(SUBMISSION_DIVISIONS)}")
        for key in ("submitter", "system"):
            if key in table and not SUBMISSION_NAME.match(table[key]):
                raise self.fail(f"submission.{key}", f"{table[key]!r} must be a folder name: letters, digits, "
                                                     "'_', '-', '.', '+'")
        if "submitter" not in table:
            raise self.fail("submission.submitter", "missing; name the organisation the tree is filed under")
        checker = table.get("checker")
        if checker is not None:
            checker = self.base / checker if not Path(checker).is_absolute() else Path(checker)
            if not checker.is_dir():
                raise self.fail("submission.checker", f"no folder {checker}")
        return Submission(division, table["submitter"], table.get("system"), checker)

    def performance(self, value: Any) -> tuple[loadgen.LoadgenOptions, ...]:
        scenarios = self.table("performance", value, _LOADGEN)
        found = []
        for scenario in loadgen.SCENARIOS:
            if scenario not in scenarios:
                continue
            field = f"performance.{scenario}"
            table = self.table(field, scenarios[scenario], _LOADGEN[scenario])
            for key, item in table.items():
                if not (item >= 0 if key == "time" else item > 0) or not item <= _LIMITS[key]:  # nan fails both
                    raise self.fail(f"{field}.{key}", f"must be {'at least 0' if key == 'time' else 'positive'} "
                                                      f"and at most {_LIMITS[key]:.0f}, got {item!r}")
            found.append(loadgen.LoadgenOptions(
                scenario, "performance", count=table.get("count"),
                time_s=None if "time" not in table else float(table["time"]),
                target_latency_ms=table.get("target_latency_ms"), target_qps=table.get("target_qps")))
        return tuple(found)
