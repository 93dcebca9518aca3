"""`fsbench tune` as numbered steps: check everything -> calibrate (sensitivity) -> cost -> search -> validate ->
choose -> record. The tune folder's manifest (`tune.json`) is rewritten after every step, so a second tune into
the same folder takes up where the first stopped and regenerates nothing it finished."""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fsbench import files
from fsbench.errors import FsbenchError
from fsbench.eval import store
from fsbench.harness.model import pipeline
from fsbench.harness.precision.schedule import load_file, parse_spec
from fsbench.harness.run import dataset, lock, orchestrator, preflight, writer
from fsbench.harness.tune import budget as budgets_, costs as costs_, report, schedule_file, search, validate
from fsbench.harness.tune.sensitivity import calibrate
from fsbench.kernels.constants import MX_FORMATS

MANIFEST = "tune.json"
CHOSEN = "chosen.toml"
# What makes a tune folder's calibration, costs and candidates its own: a tune of other values is refused there.
# Granularity and the number of candidates may change between tunes of one folder: runs are named by their
# schedule, so a schedule two tunes share is generated once.
IDENTITY = ("model", "settings", "prompts", "formats", "impl", "costs_from")


@dataclass(frozen=True)
class Request:
    """Everything `fsbench tune` was asked, checked (`check`) before any work."""

    model: str
    preset: str
    prompts_file: Path | None
    calibration: int
    validation: int
    budgets: tuple[budgets_.Budget, ...]
    formats: tuple[str, ...]
    granularity: str
    candidates: int
    out: Path
    costs_file: Path | None
    profile_file: Path | None
    impl: str
    device: torch.device
    overrides: dict[str, Any]


def parse_formats(text: str) -> tuple[str, ...]:
    formats = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [f for f in formats if f not in MX_FORMATS]
    if unknown or not formats:
        raise FsbenchError(f"bad --formats {text!r}: expected some of {', '.join(MX_FORMATS)}"
                           f"{' (unknown: ' + ', '.join(unknown) + ')' if unknown else ''}")
    return formats


def run(req: Request, echo: Callable[[str], None]) -> dict[str, Any]:
    """The whole tune; returns the manifest. Raises FsbenchError for anything wrong before work starts."""
    base = orchestrator.prepare(req.model, req.preset, parse_spec("bf16:*", "bf16"), req.prompts_file, 1, None,
                                req.overrides)
    settings = base.settings
    layers = pipeline.num_layers(req.model)
    shape = costs_.call_shape(req.model, settings)
    every = (search.REFERENCE, *req.formats)
    cost = costs_.load(req.costs_file, shape, every) if req.costs_file else None
    rest = costs_.rest_from_profile(req.profile_file) if req.profile_file else None
    preflight.refuse_unscorable(tuple(dict.fromkeys(b.metric for b in req.budgets)), "tune")
    calib_texts, valid_texts = _split(req)
    manifest_path = req.out / MANIFEST
    loaded: list[Any] = []

    def pipe() -> Any:
        """One pipeline for calibration and validation alike, loaded when first needed."""
        if not loaded:
            loaded.append(orchestrator.load_pipeline(base, req.device))
        return loaded[0]

    identity = {"model": req.model, "settings": settings.as_dict(),
                "prompts": {"calibration": calib_texts, "validation": valid_texts}, "formats": list(req.formats),
                "impl": req.impl, "costs_from": cost.source if cost else "measured here"}
    manifest = _reopen(manifest_path, identity)  # before anything is written there
    with lock.hold(req.out, kind="tune"):
        prompt_files = {"calibration": _write_prompts(req.out / "prompts" / "calibration.txt", calib_texts),
                        "validation": _write_prompts(req.out / "prompts" / "validation.txt", valid_texts)}
        for stale in ("candidates", "chosen", "verdict", "report"):  # this tune's own, written at its end
            manifest.pop(stale, None)
        files.remove(req.out / CHOSEN)
        manifest.update(identity, budgets=[str(b) for b in req.budgets], granularity=req.granularity,
                        candidates_wanted=req.candidates, git_commit=writer.git_commit(), versions=writer.versions(),
                        prompt_files={k: str(p.relative_to(req.out)) for k, p in prompt_files.items()})
        # 1. Sensitivity: one BF16 pass over the calibration prompts.
        if "sensitivity" not in manifest:
            echo(f"calibrating: {len(calib_texts)} prompt(s), formats {', '.join(req.formats)}")
            spec = orchestrator.prepare(req.model, req.preset, parse_spec("bf16:*", "bf16"),
                                        prompt_files["calibration"], None, None, req.overrides)
            start = time.perf_counter()
            manifest["sensitivity"] = calibrate(pipe(), spec, req.formats, req.impl)
            manifest["calibration_seconds"] = time.perf_counter() - start
            _save(manifest_path, manifest)
        # 2. Cost: from the file, else the folder's own earlier bench, else a quick bench now.
        if cost is None:
            cost = (costs_.Costs(shape, manifest["costs"]["ms_per_call"], manifest["costs"]["source"])
                    if "costs" in manifest else costs_.bench_here(shape, every, req.device, req.impl))
        manifest["costs"] = cost.as_dict()
        manifest["rest_of_query"] = rest  # None: predictions cover self-attention only
        # 3. Search.
        grouped = search.groups(manifest["sensitivity"], cost.ms, req.formats, req.granularity)
        steps = settings.steps
        front = search.front(grouped, steps, layers)
        singles = [search.single(fmt, grouped, steps, layers) for fmt in every]
        candidates = [*search.pick(front, req.candidates, {c.table for c in singles}), *singles]
        manifest["front_size"] = len(front)
        jobs = []
        for cand in candidates:
            path = schedule_file.write(req.out / "schedules" / f"{_run_name(cand)}.toml", cand.table,
                                       f"fsbench tune candidate {cand.name}: predicted attention "
                                       f"{cand.predicted_ms:.4g} ms per query, relative L2 {cand.predicted_error:.3g}")
            jobs.append(validate.Job(_run_name(cand), path))
        _save(manifest_path, manifest)
        # 4. Validate on the held-out prompts.
        specs = validate.specs(jobs, req.model, req.preset, prompt_files["validation"], req.overrides)
        generated = validate.generate(jobs, specs, req.out, req.device, req.impl, pipe, echo)
        metrics = tuple(dict.fromkeys(b.metric for b in req.budgets))
        scores = validate.score(req.out, [job.name for job in jobs], metrics)
        manifest["candidates"] = [
            _row(req, cand, job, "single" if cand in singles else "front", scores[job.name], generated[job.name], rest)
            for cand, job in zip(candidates, jobs)]
        # 5. Choose and record.
        _choose(req, manifest, candidates)
        manifest["report"] = report.write(req.out, manifest, req.budgets)
        _save(manifest_path, manifest)
    return manifest


def _row(req: Request, cand: search.Candidate, job: validate.Job, kind: str, measured: dict[str, Any],
         generated: int, rest: dict[str, Any] | None) -> dict[str, Any]:
    """A candidate's record in the manifest: predicted and measured figures, where its schedule and run are."""
    return {**cand.as_dict(), "kind": kind, "spec": load_file(job.schedule_file).spec,
            "predicted_query_ms": None if rest is None else cand.predicted_ms + rest["ms"],
            "schedule_file": str(job.schedule_file.relative_to(req.out)), "run": f"runs/{job.name}",
            "videos_generated": generated, "measured": measured,
            "meets_budgets": all(b.met(measured.get(b.metric)) is True for b in req.budgets),
            "budget_margin": min(b.margin(measured.get(b.metric)) for b in req.budgets)}


def _choose(req: Request, manifest: dict[str, Any], candidates: list[search.Candidate]) -> None:
    """The fastest low-precision candidate meeting every budget (fewer low-precision cells on a tie) becomes
    DIR/chosen.toml; where none does, no chosen.toml is left and the closest is named."""
    rows = [r for r in manifest["candidates"] if r["low_precision_cells"]]
    meeting = sorted((r for r in rows if r["meets_budgets"]),
                     key=lambda r: (r["predicted_attention_ms"], r["low_precision_cells"], r["predicted_rel_l2"]))
    target = req.out / CHOSEN
    if meeting:
        best = meeting[0]
        table = next(c.table for c in candidates if c.name == best["name"])
        schedule_file.write(target, table, f"fsbench tune: fastest schedule meeting {', '.join(manifest['budgets'])} "
                                           f"on the validation prompts (candidate {best['name']})")
        manifest["chosen"] = {"name": best["name"], "file": CHOSEN}
        manifest["verdict"] = (f"{best['name']} meets {', '.join(manifest['budgets'])}: predicted attention "
                               f"{best['predicted_attention_ms']:.4g} ms per query; schedule {target}")
        return
    files.remove(target)
    closest = max(rows, key=lambda r: r["budget_margin"]) if rows else None
    manifest["chosen"] = None
    manifest["verdict"] = (f"no low-precision schedule meets {', '.join(manifest['budgets'])} on the validation "
                           "prompts"
                           + (f"; closest: {closest['name']} ("
                              + ", ".join(f"{m} {_fmt(v)}" for m, v in closest["measured"].items()
                                          if m in {b.metric for b in req.budgets}) + ")" if closest else ""))


def _run_name(cand: search.Candidate) -> str:
    """A single format's own name, else `mix-` and a digest of the table: one folder per schedule."""
    formats = {fmt for row in cand.table for fmt in row}
    if len(formats) == 1:
        return formats.pop()
    return "mix-" + hashlib.sha256(json.dumps(cand.table).encode()).hexdigest()[:10]


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _split(req: Request) -> tuple[list[str], list[str]]:
    texts = list(dataset.load_prompts(req.prompts_file, req.model).texts)
    need = req.calibration + req.validation
    if len(texts) < need:
        raise FsbenchError(f"{len(texts)} prompt(s) given; --calibration {req.calibration} and --validation "
                           f"{req.validation} need {need} (the two sets are disjoint)")
    return texts[:req.calibration], texts[req.calibration:need]


def _write_prompts(path: Path, texts: list[str]) -> Path:
    if not path.is_file() or path.read_text(encoding="utf-8").splitlines() != texts:
        files.atomic_write_text(path, "".join(t + "\n" for t in texts))
    return path


def _reopen(path: Path, identity: dict[str, Any]) -> dict[str, Any]:
    """The folder's manifest when it holds a tune of these settings, {} for a new folder; refuses any other."""
    if not path.is_file():
        return {}
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FsbenchError(f"{path} is not a tune manifest ({exc}); pass another --out") from exc
    differ = [key for key in IDENTITY if json.loads(json.dumps(identity[key])) != old.get(key)]
    if differ:
        raise FsbenchError(f"{path.parent} holds a tune with other {', '.join(differ)}; pass another --out")
    return old


def _save(path: Path, manifest: dict[str, Any]) -> None:
    files.atomic_write_text(path, json.dumps(store.encode(manifest), indent=1, default=str) + "\n")
