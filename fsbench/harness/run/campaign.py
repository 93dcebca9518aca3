"""`fsbench campaign PLAN.toml`: a plan's stages in order, each skipped when its verified records exist.

Stages: the performance runs of every schedule (per scenario of the plan), the accuracy sweep, eval of every
schedule against the reference, then compare (with its page) and, if the plan asks, a submission tree per
schedule. Every schedule has one run folder, <out>/<schedule>/, which holds its performance results, its videos and
its scores, so compare finds latency, speedup and fidelity in one place. A stage is done when the records it would
write are there and were made with the plan's settings:

- performance: the manifest's header matches the plan (model, settings and latent, schedule, prompts), it holds
  the scenario's result with the plan's LoadGen overrides and speed options, and LoadGen's summary log exists;
- accuracy: the same header, the accuracy result and its log, and every video reusable (`made_with` sidecar of
  these settings, file unchanged); it runs again after a performance run of its schedule, which rewrites videos;
- eval: RUN/eval/summary.json holds every metric asked for, over every prompt, for these very videos (their
  digest) against this reference;
- compare: <out>/compare/inputs.json records the digest of the manifests and scores it was drawn from;
- submission (a plan's [submission]): <out>/submission/<schedule>.json records the digest of the run's manifest and
  the submission asked for, and the tree `fsbench submission` wrote is there.

A killed campaign therefore resumes where it stopped: a finished stage is not run again, and an interrupted
accuracy sweep or eval keeps what it finished (videos by their sidecars, scores by their per-prompt records).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click
import torch

from fsbench import files, rundir
from fsbench.errors import FsbenchError
from fsbench.harness.mlperf import loadgen, rules
from fsbench.harness.parallel import team
from fsbench.harness.precision.schedule import Schedule
from fsbench.harness.run import dataset, estimate, lock, logs, made_with, orchestrator, progress
from fsbench.harness.run.plan import Plan, PlanError, Submission

COMPARE = "compare"
STAMP = "inputs.json"  # in <out>/compare/: what the comparison was drawn from
ACCURACY = loadgen.LoadgenOptions("Offline", "accuracy")

_GENERATION = ("performance", "accuracy")
Evaluate = Callable[[Path, Path | None, tuple[str, ...]], None]
Compare = Callable[[list[Path], Path, Path | None], None]
Package = Callable[[Path, Path, Submission, str], None]


@dataclass(frozen=True)
class Stage:
    """One step of the plan: what it runs on, and how many videos it makes or scores."""

    kind: str  # performance | accuracy | eval | compare | submission
    title: str
    index: int = -1  # the schedule's position in the plan (compare has none)
    opts: loadgen.LoadgenOptions = ACCURACY  # the LoadGen test of a generation stage
    videos: int | None = 0


class Campaign:
    """A checked plan with its run specs: `stages()` lists the work, `pending()` what is not yet verified."""

    def __init__(self, plan: Plan):
        self.plan = plan
        try:
            dataset.load_prompts(plan.prompts_file, plan.model, plan.num_prompts)
        except FsbenchError as exc:
            raise PlanError(f"{plan.path}: prompts: {exc}") from exc
        self.specs = [self._spec(i, schedule) for i, schedule in enumerate(plan.schedules)]
        slugs = [orchestrator.schedule_slug(spec.schedule) for spec in self.specs]
        if len(set(slugs)) != len(slugs):
            raise PlanError(f"{plan.path}: schedules: two schedules share the folder name ({', '.join(slugs)})")
        self.runs = [plan.out / slug for slug in slugs]
        self.compare_dir = plan.out / COMPARE
        self.layouts = {scenario: team.plan(scenario, plan.model, self.specs[0].settings, 1, None, None, plan.device)
                        for scenario in loadgen.SCENARIOS}  # one process: the same device for every scenario
        self.device = torch.device(self.layouts["Offline"].device)
        try:
            plan.speed.check_device(self.device)
        except FsbenchError as exc:
            raise PlanError(f"{plan.path}: speed: {exc}") from exc
        for opts in plan.performance:  # a bad user.conf or override fails before any work
            loadgen.build_test_settings(opts, len(self.specs[0].prompts.texts))
        self.pixels = asdict(plan.speed)  # what made_with reads of the speed record
        self.system = orchestrator.default_system(self.specs[0].model_tag, self.device)

    def _spec(self, index: int, schedule: Schedule) -> orchestrator.RunSpec:
        p = self.plan
        try:
            return orchestrator.prepare(p.model, p.preset, schedule, p.prompts_file, p.num_prompts, None,
                                        p.overrides)
        except FsbenchError as exc:
            raise PlanError(f"{p.path}: schedules[{index}]: {exc}") from exc

    # -- the work ------------------------------------------------------------------------------------------------

    def stages(self) -> list[Stage]:
        plan, stages = self.plan, []
        prompts = len(self.specs[0].prompts.texts)
        for opts in plan.performance:
            for i, spec in enumerate(self.specs):
                stages.append(Stage("performance", f"{opts.scenario} performance [{spec.schedule.name}]", i, opts,
                                    opts.count))
        for scenario in self.accuracy_scenarios():
            opts = loadgen.LoadgenOptions(scenario, "accuracy")
            stages += [Stage("accuracy", f"{scenario} accuracy [{spec.schedule.name}]", i, opts, prompts)
                       for i, spec in enumerate(self.specs)]
        if plan.metrics:
            stages += [Stage("eval", f"eval {','.join(self._metrics(i))} [{spec.schedule.name}]", i, videos=prompts)
                       for i, spec in enumerate(self.specs) if self._metrics(i)]
        stages.append(Stage("compare", f"compare{' --html' if plan.html else ''}"))
        if plan.submission is not None:
            stages += [Stage("submission", f"submission --division {plan.submission.division} "
                                           f"[{spec.schedule.name}]", i) for i, spec in enumerate(self.specs)]
        return stages

    def accuracy_scenarios(self) -> tuple[str, ...]:
        """Where the accuracy sweep runs: Offline (the videos eval scores), and for a submission every scenario of
        the performance runs too (the later passes reuse the videos, so each is generated once)."""
        if not self.plan.accuracy:
            return ()
        asked = {opts.scenario for opts in self.plan.performance} if self.plan.submission is not None else set()
        return tuple(s for s in loadgen.SCENARIOS if s == ACCURACY.scenario or s in asked)

    def packaging(self) -> list[str]:
        """Why this plan's runs could not become a submission tree (`fsbench submission`), by the checker's rules
        that a plan decides; empty when they can."""
        plan = self.plan
        division = plan.submission.division if plan.submission is not None else "open"
        prompts = len(self.specs[0].prompts.texts)
        performance = {opts.scenario: opts for opts in plan.performance}
        accuracy = set(self.accuracy_scenarios())
        found = []
        if not performance and not accuracy:
            found.append("the plan makes no LoadGen run")
        for scenario in loadgen.SCENARIOS:
            if scenario in accuracy and scenario not in performance:
                found.append(f"{scenario} has no performance run: add [performance.{scenario}]")
            if scenario in performance and scenario not in accuracy:
                found.append(f"{scenario} has no accuracy run: "
                             + ("set accuracy = true" if not plan.accuracy else "add a [submission] table"))
        for scenario, opts in performance.items():
            test = loadgen.build_test_settings(opts, prompts)
            if test.min_duration_ms < rules.MIN_DURATION_MS:
                found.append(f"performance.{scenario}.time: min_duration is {test.min_duration_ms} ms, needs >= "
                             f"{rules.MIN_DURATION_MS}: drop `time` (`count` stops a run early, in the open division)")
            if scenario == "SingleStream" and test.min_query_count < rules.EARLY_STOPPING_MIN_QUERIES:
                found.append(f"performance.SingleStream.count: {test.min_query_count} queries cannot meet early "
                             f"stopping, which needs at least {rules.EARLY_STOPPING_MIN_QUERIES}")
            if division == "closed" and opts.count is not None:
                found.append(f"performance.{scenario}.count: stops the run early, which the closed division "
                             "refuses (it needs VALID runs): drop `count`")
        if prompts != rules.ACCURACY_SAMPLES:
            found.append(f"prompts: {prompts} prompts; the accuracy run needs MLPerf's {rules.ACCURACY_SAMPLES} "
                         "(prompts.file = vbench_prompts.txt, no count)")
        return found

    def pending(self) -> list[tuple[Stage, str | None]]:
        """Every stage with None where it must run, else why it is skipped."""
        found: list[tuple[Stage, str | None]] = []
        rerun: set[int] = set()
        for stage in self.stages():
            why = self._verified(stage) if not (stage.kind == "accuracy" and stage.index in rerun) else None
            if why is None and stage.kind == "performance":
                rerun.add(stage.index)
            found.append((stage, why))
        return found

    def metrics_to_score(self) -> tuple[str, ...]:
        """The metrics of the eval stages still to run (what must be scorable here before any video is made)."""
        pending = [self._metrics(stage.index) for stage, why in self.pending() if stage.kind == "eval" and why is None]
        return tuple(m for m in rundir.EVAL_METRICS if any(m in chosen for chosen in pending))

    def execute(self, evaluate: Evaluate, compare: Compare, package: Package) -> None:
        """Run the pending stages in order under one plan bar, each weighed by its estimated seconds; `evaluate`,
        `compare` and `package` are the CLI's commands. Every generation stage to run goes to the orchestrator at
        once, so the pipeline loads once. Lines of a stage go to its run's log, the others to the campaign's only."""
        steps = self.pending()
        queue = [(f"[{number}/{len(steps)}] {stage.title}", stage, why)
                 for number, (stage, why) in enumerate(steps, start=1)]
        seconds = self.seconds([stage for _, stage, why in queue if why is None])

        def advance() -> Stage | None:
            """Announce the skipped stages up to the next one that runs, and that one; return it."""
            while queue:
                head, stage, why = queue.pop(0)
                if why is None:
                    progress.stage(head, seconds[stage], *self._units(stage))
                    return stage
                progress.note(f"{head}: skipped, {why}")
            return None

        after_jobs: list[Stage | None] = [None]  # the stage announced when the last job finished

        def done(job: orchestrator.Job, summary: dict[str, Any]) -> None:
            click.echo(f"[{job.spec.schedule.name}] {orchestrator.describe(summary)}")
            after_jobs[0] = advance()

        with logs.scope(None):
            if self.plan.description:
                progress.note(f"{self.plan.path}: {self.plan.description}")
            with progress.plan(sum(seconds.values())):
                current = advance()
                while current is not None:
                    if current.kind in _GENERATION:
                        stages = [current] + [s for _, s, why in queue if why is None and s.kind in _GENERATION]
                        jobs = [self._job(stage) for stage in stages]
                        with lock.hold(*{job.run for job in jobs}):
                            orchestrator.run(jobs, done)
                        current = after_jobs[0]
                    elif current.kind == "eval":
                        run = self.runs[current.index]
                        logs.attach(run)  # its scores' lines in its log, whether or not this command generated it
                        with logs.scope(run):
                            evaluate(run, self._reference(current.index), self._metrics(current.index))
                        current = advance()
                    elif current.kind == "submission":
                        root = self.submission_root(current.index)
                        assert self.plan.submission is not None  # a submission stage is planned with one
                        package(self.runs[current.index], root, self.plan.submission,
                                self.submission_system(current.index))
                        files.atomic_write_text(root.with_suffix(".json"),
                                                json.dumps(self._packaged(current.index), indent=1) + "\n")
                        current = advance()
                    else:
                        html = self.compare_dir / "html" if self.plan.html else None
                        compare(self.runs, self.compare_dir, html)
                        files.atomic_write_text(self.compare_dir / STAMP, json.dumps(self._inputs(), indent=1) + "\n")
                        current = advance()

    def seconds(self, stages: list[Stage]) -> dict[Stage, float]:
        """Each stage's estimated seconds on this device (harness.run.estimate): the plan bar's weights."""
        spec = self.specs[0]
        rate = estimate.device_rate(self.device) if stages else 0.0
        prompts = len(spec.prompts.texts)
        found = {}
        for stage in stages:
            if stage.kind in _GENERATION:
                test = loadgen.build_test_settings(stage.opts, prompts)
                videos = stage.videos or (prompts if stage.opts.mode == "accuracy" else test.min_query_count)
                least = test.min_duration_ms / 1000 if stage.opts.mode == "performance" else 0.0
                found[stage] = estimate.generation_s(spec.model, spec.settings, videos, rate, least)
            elif stage.kind == "eval":
                found[stage] = estimate.eval_s(spec.settings, prompts)
            elif stage.kind == "submission":
                found[stage] = estimate.page_s(spec.settings, len(loadgen.SCENARIOS) * 10)  # ten audit videos
            else:
                found[stage] = estimate.page_s(spec.settings, prompts * len(self.specs) * (2 if self.plan.html else 0))
        return found

    @staticmethod
    def _units(stage: Stage) -> tuple[int | None, str]:
        """What the stage's inner bars count, which advance the plan bar within the stage."""
        if stage.kind in _GENERATION:
            return stage.videos, "video"
        return (stage.videos, "prompt") if stage.kind == "eval" else (None, "")

    def _job(self, stage: Stage) -> orchestrator.Job:
        """A campaign resumes as a sweep does: its accuracy pass keeps the intact videos of the same settings."""
        return orchestrator.Job(self.specs[stage.index], stage.opts, self.runs[stage.index], self.system,
                                self.plan.impl, self.layouts[stage.opts.scenario], self.plan.speed, reuse=True)

    def _metrics(self, index: int) -> tuple[str, ...]:
        """The reference is scored by VBench only: fidelity against itself says nothing."""
        return tuple(m for m in self.plan.metrics if m == "vbench" or index != self.plan.reference)

    def _reference(self, index: int) -> Path | None:
        return None if index == self.plan.reference else self.runs[self.plan.reference]

    # -- verified records ----------------------------------------------------------------------------------------

    def _verified(self, stage: Stage) -> str | None:
        """Why `stage`'s records can stand (a short phrase), or None when it must run."""
        if stage.kind == "compare":
            return "the comparison of these results is written" if self._compared() else None
        if stage.kind == "submission":
            stamp = _read_json(self.submission_root(stage.index).with_suffix(".json"))
            return "the tree of these runs is written" if stamp and stamp == self._packaged(stage.index) else None
        run, spec = self.runs[stage.index], self.specs[stage.index]
        manifest = self._manifest(run, spec)
        if manifest is None:
            return None
        if stage.kind == "eval":
            return "scores of these videos are recorded" if self._scored(stage.index) else None
        result = manifest.get("results", {}).get(stage.opts.scenario, {}).get(stage.opts.mode)
        if not isinstance(result, dict) or not (run / str(result.get("log_dir", "-"))).is_dir():
            return None
        speed = result.get("speed") or {}
        if any(speed.get(k) != self.pixels.get(k) for k in rundir.SPEED_KEYS):
            return None
        if stage.kind == "performance":
            if result.get("overrides") != stage.opts.overrides():
                return None
            if not (run / result["log_dir"] / "mlperf_log_summary.txt").is_file():
                return None
            return "its LoadGen result is recorded"
        if not (run / str(result.get("accuracy_log", "-"))).is_file():
            return None
        digest = spec.made_with(self.plan.impl, self.pixels)
        folder = rundir.videos_dir(run)
        if all(made_with.reusable(folder / rundir.video_name(p), digest) and rundir.kept_frames(run, p).is_file()
               for p in spec.prompts.texts):
            return "every video is there, made with these settings, with its kept frames"
        return None

    @staticmethod
    def _manifest(run: Path, spec: orchestrator.RunSpec) -> rundir.Manifest | None:
        """The run's manifest when its header is this spec's, else None."""
        try:
            manifest = rundir.load_manifest(run)
        except (FsbenchError, OSError, ValueError):
            return None
        expected = {"model": spec.model, "settings": {**spec.settings.as_dict(),
                                                     "latent_sha256": dataset.latent_sha256(spec.latent)}}
        if any(manifest.get(k) != v for k, v in expected.items()):
            return None
        if manifest.get("schedule", {}).get("spec") != spec.schedule.spec:
            return None
        return manifest if (manifest.get("prompts") or {}).get("sha256") == spec.prompts.sha256 else None

    def _scored(self, index: int) -> bool:
        from fsbench.eval.fidelity import METHOD
        from fsbench.eval.runs import Run

        run = Run.open(self.runs[index])
        summary = _read_json(run.eval_dir / "summary.json")
        prompts = run.prompts()
        digest = run.videos_digest(prompts)
        metrics = self._metrics(index)
        fidelity = summary.get("fidelity") or {}
        if any(m != "vbench" for m in metrics):
            reference = self._reference(index)
            if (reference is None or fidelity.get("videos_sha256") != digest or not fidelity.get("reference")
                    or Path(fidelity["reference"]).resolve() != reference.resolve()
                    or fidelity.get("prompts_compared") != len(prompts)):
                return False
            if fidelity.get("method_version") != METHOD:  # scores of an earlier method are computed again
                return False
            means = fidelity.get("metrics") or {}
            if any((means.get(m) or {}).get("mean") is None and (means.get(m) or {}).get("identical") != len(prompts)
                   for m in metrics if m != "vbench"):
                return False
        if "vbench" in metrics:
            vbench = summary.get("vbench") or {}
            if vbench.get("videos_sha256") != digest or vbench.get("overall") is None:
                return False
        return True

    def submission_root(self, index: int) -> Path:
        return self.plan.out / rundir.CAMPAIGN_SUBMISSION / self.runs[index].name

    def submission_system(self, index: int) -> str:
        """The system's name in the tree: the plan's, or the run's (cpu-tiny), with the schedule's folder name."""
        asked = self.plan.submission.system if self.plan.submission is not None else None
        return f"{asked or self.system}-{self.runs[index].name}"

    def _packaged(self, index: int) -> dict[str, Any]:
        """What a schedule's tree was made from: its run's manifest (by digest) and the submission asked for."""
        manifest = self.runs[index] / rundir.MANIFEST
        digest = hashlib.sha256(manifest.read_bytes()).hexdigest() if manifest.is_file() else None
        asked = asdict(self.plan.submission) if self.plan.submission is not None else {}
        tree = self.submission_root(index) / asked.get("division", "") / asked.get("submitter", "")
        return {"manifest": digest, "submission": {k: None if v is None else str(v) for k, v in asked.items()},
                "system": self.submission_system(index), "written": tree.is_dir()}

    def _inputs(self) -> dict[str, Any]:
        """What the comparison reads: every run's manifest and scores, by digest, and whether a page is drawn."""
        files = {}
        for run in self.runs:
            for path in (run / rundir.MANIFEST, run / rundir.EVAL / "summary.json"):
                files[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        return {"files": files, "html": self.plan.html}

    def _compared(self) -> bool:
        outputs = [self.compare_dir / "compare.json"] + ([self.compare_dir / "html" / "index.html"]
                                                         if self.plan.html else [])
        return all(p.is_file() for p in outputs) and _read_json(self.compare_dir / STAMP) == self._inputs()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
