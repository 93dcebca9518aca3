"""`fsbench campaign PLAN.toml`: a plan's stages in order, each skipped when its verified records exist.

Stages: the performance runs of every schedule (per scenario of the plan), the accuracy sweep, eval of every
schedule against the reference, then compare (with its page). Every schedule has one run folder, <out>/<schedule>/,
which holds its performance results, its videos and its scores, so compare finds latency, speedup and fidelity in
one place. A stage is done when the records it would write are there and were made with the plan's settings:

- performance: the manifest's header matches the plan (model, settings and latent, schedule, prompts), it holds
  the scenario's result with the plan's LoadGen overrides and speed options, and LoadGen's summary log exists;
- accuracy: the same header, the accuracy result and its log, and every video reusable (`made_with` sidecar of
  these settings, file unchanged); it runs again after a performance run of its schedule, which rewrites videos;
- eval: RUN/eval/summary.json holds every metric asked for, over every prompt, for these very videos (their
  digest) against this reference;
- compare: <out>/compare/inputs.json records the digest of the manifests and scores it was drawn from.

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
from fsbench.harness.mlperf import loadgen
from fsbench.harness.parallel import team
from fsbench.harness.precision.schedule import Schedule
from fsbench.harness.run import dataset, lock, made_with, orchestrator, progress
from fsbench.harness.run.plan import Plan, PlanError

COMPARE = "compare"
STAMP = "inputs.json"  # in <out>/compare/: what the comparison was drawn from
ACCURACY = loadgen.LoadgenOptions("Offline", "accuracy")

_GENERATION = ("performance", "accuracy")
Evaluate = Callable[[Path, Path | None, tuple[str, ...]], None]
Compare = Callable[[list[Path], Path, Path | None], None]


@dataclass(frozen=True)
class Stage:
    """One step of the plan: what it runs on, and how many videos it makes (the plan bar's unit)."""

    kind: str  # performance | accuracy | eval | compare
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
        if plan.accuracy:
            stages += [Stage("accuracy", f"Offline accuracy [{spec.schedule.name}]", i, videos=prompts)
                       for i, spec in enumerate(self.specs)]
        if plan.metrics:
            stages += [Stage("eval", f"eval {','.join(self._metrics(i))} [{spec.schedule.name}]", i)
                       for i, spec in enumerate(self.specs) if self._metrics(i)]
        stages.append(Stage("compare", f"compare{' --html' if plan.html else ''}"))
        return stages

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

    def execute(self, evaluate: Evaluate, compare: Compare) -> None:
        """Run the pending stages in order under one plan bar; `evaluate` and `compare` are the CLI's commands.
        Every generation stage to run goes to the orchestrator at once, so the pipeline loads once."""
        steps = self.pending()
        queue = [(f"[{number}/{len(steps)}] {stage.title}", stage, why)
                 for number, (stage, why) in enumerate(steps, start=1)]
        units = [stage.videos for _, stage, why in queue if why is None and stage.kind in _GENERATION]
        total = None if None in units else sum(u for u in units if u is not None)

        def advance() -> Stage | None:
            """Announce the skipped stages up to the next one that runs, and that one; return it."""
            while queue:
                head, stage, why = queue.pop(0)
                if why is None:
                    progress.stage(head)
                    return stage
                progress.note(f"{head}: skipped, {why}")
            return None

        after_jobs: list[Stage | None] = [None]  # the stage announced when the last job finished

        def done(job: orchestrator.Job, summary: dict[str, Any]) -> None:
            click.echo(f"[{job.spec.schedule.name}] {orchestrator.describe(summary)}")
            after_jobs[0] = advance()

        if self.plan.description:
            progress.note(f"{self.plan.path}: {self.plan.description}")
        with progress.plan(total, "video"):
            current = advance()
            while current is not None:
                if current.kind in _GENERATION:
                    stages = [current] + [s for _, s, why in queue if why is None and s.kind in _GENERATION]
                    jobs = [self._job(stage) for stage in stages]
                    with lock.hold(*{job.run for job in jobs}):
                        orchestrator.run(jobs, done)
                    current = after_jobs[0]
                elif current.kind == "eval":
                    evaluate(self.runs[current.index], self._reference(current.index), self._metrics(current.index))
                    current = advance()
                else:
                    html = self.compare_dir / "html" if self.plan.html else None
                    compare(self.runs, self.compare_dir, html)
                    files.atomic_write_text(self.compare_dir / STAMP, json.dumps(self._inputs(), indent=1) + "\n")
                    current = advance()

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
