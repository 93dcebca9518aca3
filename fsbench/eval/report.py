"""The tables of `fsbench compare`: one table per set of runs like the paper's Tables 6 and 7 (Markdown, CSV, JSON).
`eval.figures` draws the speedup plot and the frame grid; `eval.comparison` checks the runs and writes both.

Each run contributes what its manifest and RUN/eval/summary.json hold. A value a run lacks stays an empty cell
with a numbered footnote saying why, so a reader never mistakes a gap for a zero. Runs of several configurations
(`--gemm`, `--compile`, `--vae`) are told apart by it, each speedup is over the BF16 run of its own configuration,
and a second table puts each schedule's configurations side by side (the latency columns of Table 6).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from fsbench import rundir
from fsbench.errors import FsbenchError
from fsbench.eval import intervals, store
from fsbench.eval.runs import Run
from fsbench.eval.vbench_adapter import CUSTOM, DIMENSIONS, PASS_MARK

DIMENSION_HEADERS = {
    "subject_consistency": "Subject consistency",
    "background_consistency": "Background consistency",
    "motion_smoothness": "Motion smoothness",
    "dynamic_degree": "Dynamic degree",
    "appearance_style": "Appearance style",
    "scene": "Scene",
}
# (key, header, format) in table order; VBench on the 0-100 scale as in the paper.
COLUMNS = [(d, DIMENSION_HEADERS[d] + " ↑", "{:.2f}") for d in DIMENSIONS] + [
    ("vbench", "VBench overall ↑", "{:.2f}"),
    ("psnr", "PSNR (dB) ↑", "{:.2f}"),
    ("ssim", "SSIM ↑", "{:.3f}"),
    ("lpips", "LPIPS ↓", "{:.3f}"),
    ("latency_p50_s", "SingleStream p50 latency (s) ↓", "{:.3f}"),
    ("latency_s", "SingleStream p90 latency (s) ↓", "{:.3f}"),
    ("queries", "SingleStream queries", "{:.0f}"),
    ("speedup", "Speedup vs BF16 ↑", "{:.2f}×"),
    ("joules", "Energy per video (J) ↓", "{:.0f}"),
    ("offline_sps", "Offline (samples/s) ↑", "{:.4g}"),
]
FIDELITY = ("psnr", "ssim", "lpips")
NOT_VALID = "not a figure: LoadGen did not mark both SingleStream runs VALID (the ratio is shown in parentheses)"
STALE = ("scores left out: the run's videos are not the ones `fsbench eval` scored (or it predates that record); "
         "rerun it")
FORMAT_LABELS = {"bf16": "BF16", "mxfp8": "MXFP8", "mxfp6": "MXFP6", "mxfp4": "MXFP4"}


@dataclass
class Row:
    label: str
    run: Run
    values: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)  # column key -> footnote text
    reference: bool = False
    configuration: str | None = None  # what sets its configuration apart; None where all runs share one
    schedule: str = ""  # the label without the configuration
    intervals: dict = field(default_factory=dict)  # column key -> [low, high], its 95 % interval
    invalid: set = field(default_factory=set)  # column keys whose value is shown greyed, not as a figure
    codec_floor: dict = field(default_factory=dict)  # the reference's: metric -> its kept frames vs its own mp4


def _describe(configuration: dict, keys: list[str]) -> str:
    """`keys` of a configuration as a reader says them: "FP8 GEMMs, compiled, bf16 VAE, host offload"."""
    words = {"gemm": lambda v: f"{str(v).upper()} GEMMs", "compile": lambda v: "compiled" if v else "eager",
             "vae": lambda v: f"{v} VAE", "offload": lambda v: "host offload" if v else "weights on the GPU"}
    return ", ".join(f"{k} not recorded" if configuration.get(k) is None else words[k](configuration[k])
                     for k in keys)


def configuration_names(runs: list[Run]) -> list[str | None]:
    """What sets each run's configuration apart from the others' (only the options that differ); all None where
    the runs share one configuration."""
    configurations = [r.configuration() for r in runs]
    if len(set(configurations)) < 2:
        return [None] * len(runs)
    recorded = [dict(c) for c in configurations if c is not None]
    keys = [k for k in rundir.SPEED_KEYS if len({c.get(k) for c in recorded}) > 1] or list(rundir.SPEED_KEYS)
    return [_describe(dict(c), keys) if c is not None else "configuration not recorded" for c in configurations]


def _told_apart(names: list[str], runs: list[Run], keys: list | None = None) -> list[str]:
    """The folder name added where two runs share a name (or the key given for each); where the folders share a
    name too (the same schedule in two sweeps), as many of their parents as tell them apart."""
    keys = names if keys is None else keys
    told = []
    for n, k, r in zip(names, keys, runs):
        twins = [other for other, key in zip(runs, keys) if key == k and other is not r]
        if not twins:
            told.append(n)
            continue
        depth = 1
        while depth < len(r.path.parts) and any(other.path.parts[-depth:] == r.path.parts[-depth:] for other in twins):
            depth += 1
        told.append(f"{n} ({'/'.join(r.path.parts[-depth:])})")
    return told


def _names(runs: list[Run]) -> tuple[list[str], list[str | None], list[str]]:
    """Each run's label, configuration name and schedule name (unique within its configuration)."""
    names = [FORMAT_LABELS.get(r.schedule, r.schedule) for r in runs]
    configurations = configuration_names(runs)
    labelled = _told_apart([f"{n} · {c}" if c else n for n, c in zip(names, configurations)], runs)
    return labelled, configurations, _told_apart(names, runs, keys=list(zip(names, configurations)))


def labels(runs: list[Run]) -> list[str]:
    """Schedule names as the paper writes them; the configuration added where the runs differ in it
    ("MXFP8 · BF16 GEMMs"), and the folder name where two runs still share a label."""
    return _names(runs)[0]


def build_rows(runs: list[Run]) -> list[Row]:
    summaries = [_read_summary(r) for r in runs]
    references = {str(Path(s["fidelity"]["reference"])) for s in summaries if s.get("fidelity", {}).get("reference")}
    rows = [Row(label, run, configuration=c, schedule=s) for label, c, s, run in zip(*_names(runs), runs)]
    for row, summary in zip(rows, summaries):
        row.reference = str(row.run.path) in references or (row.run.schedule == "bf16" and "fidelity" not in summary)
        digest = row.run.videos_digest(row.run.prompts())
        for name, cells, keys in (("vbench", _vbench_cells, (*DIMENSIONS, "vbench")), ("fidelity", _fidelity_cells,
                                                                                      FIDELITY)):
            section = summary.get(name)
            if section and not row.reference and section.get("videos_sha256") != digest:
                row.notes.update({key: STALE for key in keys})  # scores of other videos are no scores of these
            else:
                cells(row, section)
        _performance_cells(row)
    _speedups(rows)
    _codec_floors(rows, summaries)
    return rows


def _read_summary(run: Run) -> dict:
    path = run.eval_dir / "summary.json"
    if not path.exists():
        return {}
    summary = store.read_json(path)
    if not isinstance(summary, dict):
        raise FsbenchError(f"{path} is not valid JSON: rerun `fsbench eval {run.path}`")
    return summary



def _vbench_cells(row: Row, vbench: dict | None) -> None:
    if not vbench:
        for key in (*DIMENSIONS, "vbench"):
            row.notes[key] = "VBench not run: `fsbench eval RUN --metrics vbench`"
        return
    for dim in DIMENSIONS:
        entry = (vbench.get("dimensions") or {}).get(dim) or {}
        score = store.number(entry.get("score"))
        row.values[dim] = None if score is None else 100 * score
        if score is None:
            reason = entry.get("not_computed") or ""
            row.notes[dim] = ("VBench dimension not computed: weights missing (`fsbench eval` lists the files, "
                              "scripts/fetch_eval_weights.py fetches them)" if "weights missing" in reason
                              else reason or "VBench dimension not computed")
    overall = store.number(vbench.get("overall"))
    row.values["vbench"] = overall
    in_overall = vbench.get("dimensions_in_overall") or list(DIMENSIONS)
    if vbench.get("mode") == CUSTOM:
        row.notes["vbench"] = (f"custom prompts, VBench's custom-input mode: overall = mean of "
                               f"{', '.join(DIMENSION_HEADERS[d].lower() for d in in_overall)}"
                               + ("" if overall is not None else " (not all computed)")
                               + "; not MLPerf's six-dimension score")
    elif overall is None:
        row.notes["vbench"] = "overall needs all six dimensions"
    elif vbench.get("prompts_scored", 0) < vbench.get("prompts_expected", 0):
        row.notes["vbench"] = (f"over {vbench['prompts_scored']} of the {vbench['prompts_expected']} VBench prompts "
                               "(the benchmark score needs all)")


def _fidelity_cells(row: Row, fidelity: dict | None) -> None:
    if row.reference:
        for key in FIDELITY:
            row.values[key] = "reference"
        return
    if not fidelity:
        for key in FIDELITY:
            row.notes[key] = "not evaluated against BF16: `fsbench eval RUN --reference BF16_RUN`"
        return
    metrics = fidelity.get("metrics") or {}
    source = fidelity.get("source") or {"kind": "mp4"}  # scores from before kept frames read the mp4s
    for key in FIDELITY:
        entry = metrics.get(key) or {}
        mean = store.number(entry.get("mean"))
        row.values[key] = mean
        if isinstance(entry.get("ci95"), list):
            row.intervals[key] = [float(v) for v in entry["ci95"]]
        if key in (fidelity.get("not_computed") or {}):
            row.notes[key] = (f"{key.upper()} not computed: weights missing (`fsbench eval` lists the files, "
                              "scripts/fetch_eval_weights.py fetches them)")
        elif mean is None:
            row.notes[key] = f"{key.upper()} not computed for this run"
        elif key == "psnr" and entry.get("identical"):
            row.notes[key] = (f"{entry['identical']} prompt(s) identical to the reference (no finite PSNR): counted, "
                              f"left out of the mean over the other {entry.get('prompts')}")
        elif fidelity.get("prompts_compared", 0) < fidelity.get("prompts_expected", 0):
            row.notes[key] = (f"mean over {fidelity['prompts_compared']} of {fidelity['prompts_expected']} prompts; "
                              "the others are listed in RUN/eval/summary.json")
        elif source.get("kind") != "frames" and mean is not None:
            row.notes[key] = ("scored on the mp4 files (lossy: the codec's error is in the score); the runs kept no "
                              "lossless frames" if source.get("kind") == "mp4" else
                              f"{source.get('mp4')} of {fidelity.get('prompts_compared')} prompts scored on the mp4 "
                              "files (lossy), the others on the kept lossless frames")


def _codec_floors(rows: list[Row], summaries: list[dict]) -> None:
    """The reference row's codec floor: its kept frames against its own mp4, as a run scored against it found."""
    for summary in summaries:
        fidelity = summary.get("fidelity") or {}
        floor = fidelity.get("codec_floor")
        base = next((r for r in rows if r.reference and str(r.run.path) == str(Path(fidelity.get("reference") or "."))),
                    None)
        if base is not None and isinstance(floor, dict) and not base.codec_floor:
            base.codec_floor = {k: v for k, v in floor.items() if isinstance(v, dict) and v.get("mean") is not None}


def _performance_cells(row: Row) -> None:
    single = row.run.performance("SingleStream")
    offline = row.run.performance("Offline")
    row.values["latency_s"] = single.latency_p90_s
    row.values["latency_p50_s"] = single.latency_p50_s
    row.values["queries"] = single.query_count
    latencies = single.query_latencies_s
    if latencies:
        row.intervals["latency_s"] = intervals.interval(latencies, intervals.percentile(90))
        row.intervals["latency_p50_s"] = intervals.interval(latencies, intervals.percentile(50))
    elif single.latency_p90_s is not None:
        row.notes["queries"] = "the run predates per-query latencies: no interval on its latencies"
    row.values["offline_sps"] = offline.samples_per_second
    row.values["joules"] = single.joules_per_video
    if single.joules_per_video is None:
        row.notes["joules"] = single.energy_note or "no SingleStream performance result in the run"
    if single.latency_p90_s is None:
        row.notes["latency_s"] = "no SingleStream performance result in the run"
    elif single.valid is False:
        row.notes["latency_s"] = "LoadGen marked the SingleStream run INVALID"
    if offline.samples_per_second is None:
        row.notes["offline_sps"] = "no Offline performance result in the run"
    elif offline.valid is False:
        row.notes["offline_sps"] = "LoadGen marked the Offline run INVALID"


def _speedups(rows: list[Row]) -> None:
    """Over the BF16 run of the row's own configuration (Table 6: over BF16 attention in the same configuration)."""
    for row in rows:
        same = [r for r in rows if r.configuration == row.configuration]
        base = next((r for r in same if r.reference and r.values.get("latency_s")), None)
        base = base or next((r for r in same if r.run.schedule == "bf16" and r.values.get("latency_s")), None)
        latency = row.values.get("latency_s")
        if base is None:
            row.values["speedup"] = None
            row.notes["speedup"] = ("no BF16 run with a SingleStream latency in this comparison"
                                    if row.configuration is None else
                                    f"no BF16 run of this configuration ({row.configuration}) with a SingleStream "
                                    "latency in this comparison")
        elif latency is None:
            row.values["speedup"] = None
            row.notes.setdefault("speedup", "no SingleStream latency")
        else:
            row.values["speedup"] = base.values["latency_s"] / latency
            mine, theirs = row.run.performance("SingleStream"), base.run.performance("SingleStream")
            if row is base:
                continue  # 1 by definition: no interval, nothing to mark
            if mine.query_latencies_s and theirs.query_latencies_s:
                row.intervals["speedup"] = intervals.ratio_interval(theirs.query_latencies_s, mine.query_latencies_s,
                                                                    intervals.percentile(90))
            if not (mine.valid and theirs.valid):
                row.invalid.add("speedup")
                row.notes["speedup"] = NOT_VALID


def _cell(value, fmt: str, interval: list[float] | None = None, invalid: bool = False) -> str:
    """A value as the tables print it: its 95 % interval after it in brackets, in parentheses where it is not a
    figure (`invalid`: a speedup of runs LoadGen did not mark VALID)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if math.isinf(value):
        return "inf"
    text = fmt.format(value)
    if interval:
        text += f" [{fmt.format(interval[0])}, {fmt.format(interval[1])}]"
    return f"({text})" if invalid else text


def cell(row: Row, key: str, fmt: str) -> str:
    """Row `row`'s cell of column `key`: the reference's fidelity cells name its codec floor where one was found."""
    if row.reference and key in FIDELITY and key in row.codec_floor:
        floor = row.codec_floor[key]
        return f"reference (codec floor {_cell(floor['mean'], fmt, floor.get('ci95'))})"
    return _cell(row.values.get(key), fmt, row.intervals.get(key), key in row.invalid)


def _footnotes(rows: list[Row], columns: list = COLUMNS) -> tuple[dict[str, int], dict[tuple[int, str], int]]:
    """Number each distinct note of `columns` once; map every (row, column) with a note to its number."""
    numbers: dict[str, int] = {}
    marks: dict[tuple[int, str], int] = {}
    for i, row in enumerate(rows):
        for key, _, _ in columns:
            note = row.notes.get(key)
            if note:
                numbers.setdefault(note, len(numbers) + 1)
                marks[(i, key)] = numbers[note]
    return numbers, marks


def markdown(rows: list[Row], caption: str) -> str:
    numbers, marks = _footnotes(rows)
    header = ["Schedule"] + [h for _, h, _ in COLUMNS]
    lines = [caption, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for i, row in enumerate(rows):
        cells = [row.label]
        for key, _, fmt in COLUMNS:
            text = cell(row, key, fmt)
            if (i, key) in marks:
                text = f"{text} [{marks[(i, key)]}]".strip()
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    if numbers:
        lines.append("")
        lines += [f"[{n}] {note}" for note, n in numbers.items()]
    if any(row.configuration for row in rows):
        header, body = configuration_table(rows, marks)
        lines += ["", CONFIGURATION_CAPTION, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines) + "\n"


def configuration_columns(rows: list[Row]) -> tuple[list[str], dict[str, dict[str, int]]]:
    """The configurations in order of first appearance, and for each schedule the row index of its run in each."""
    columns = list(dict.fromkeys(r.configuration for r in rows if r.configuration))
    cells: dict[str, dict[str, int]] = {}
    for i, row in enumerate(rows):
        if row.configuration:
            cells.setdefault(row.schedule, {})[row.configuration] = i
    return columns, cells


CONFIGURATION_CAPTION = ("Each configuration side by side: SingleStream p90 latency, in parentheses the speedup over "
                         "the BF16 run of the same configuration, and the GPU's joules per video (notes as numbered "
                         "above).")


def configuration_table(rows: list[Row], marks: dict[tuple[int, str], int]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the side-by-side table: a schedule per row, latency and energy per configuration."""
    columns, cells = configuration_columns(rows)

    def cell(i: int | None, key: str, fmt: str) -> str:
        if i is None:
            return "no run"
        text = _cell(rows[i].values.get(key), fmt)
        if key == "latency_s" and rows[i].values.get("speedup") is not None:
            text += f" ({rows[i].values['speedup']:.2f}×)"
        notes = [marks[(i, k)] for k in ((key, "speedup") if key == "latency_s" else (key,)) if (i, k) in marks]
        return " ".join([text, *(f"[{n}]" for n in notes)]).strip()

    header = ["Schedule"] + [f"{c}: {h}" for c in columns for h in ("latency (s)", "energy (J)")]
    body = [[schedule, *(cell(runs.get(c), key, fmt) for c in columns
                         for key, fmt in (("latency_s", "{:.3f}"), ("joules", "{:.0f}")))]
            for schedule, runs in cells.items()]
    return header, body


def caption(rows: list[Row]) -> str:
    base = next((r.label for r in rows if r.reference), "BF16")
    speedup = ("latency of the BF16 run of the same configuration / latency" if any(r.configuration for r in rows)
               else f"{base} latency / latency")
    return (f"VBench per dimension and overall on the 0-100 scale (overall = mean of the six; MLPerf pass mark "
            f"{PASS_MARK}). PSNR, SSIM and LPIPS compare every 4th frame with the same frame of the {base} video of "
            "the same prompt (the paper's Tables 6 and 7), on the frames each run kept losslessly (else on the mp4s, "
            "as the notes say); per prompt, PSNR from the MSE pooled over its frames (prompts identical to the "
            "reference are counted, not averaged), SSIM with scikit-image's 7x7 window on RGB, LPIPS with AlexNet "
            f"v0.1, each the mean over its frames; then the mean over prompts. The {base} row's codec floor is its "
            "kept frames against its own mp4: the codec's share of any score read from mp4s. [low, high]: 95 % "
            f"percentile-bootstrap interval ({intervals.RESAMPLES} resamples, seed {intervals.SEED}) over prompts, "
            "for latencies over queries. Latency: LoadGen SingleStream 50th and 90th percentiles; speedup = "
            f"{speedup} at the 90th percentile, in parentheses where LoadGen did not mark both runs VALID. Energy: "
            "the GPU's joules per video (NVML's counter, else nvidia-smi power integrated), mean over the profiled "
            "videos. Empty cells: see the numbered notes below the table.")


def relative_to(path: Path, out: Path) -> str:
    """`path` (a run folder or one of its videos) as seen from the comparison's folder, so a committed or copied
    comparison still points at it."""
    return Path(os.path.relpath(path.resolve(), out.resolve())).as_posix()


def write_tables(rows: list[Row], out: Path) -> dict[str, Path]:
    numbers, marks = _footnotes(rows)
    keys = [k for k, _, _ in COLUMNS]
    bounds = [f"{k}_{end}" for k in keys for end in ("low", "high")]
    csv_rows = [{"schedule": r.label, "run": relative_to(r.run.path, out),
                 "role": "reference" if r.reference else "", "configuration": r.configuration,
                 **{k: (None if isinstance(r.values.get(k), str) else r.values.get(k)) for k in keys},
                 **{f"{k}_{end}": r.intervals[k][j] for k in keys if r.intervals.get(k)
                    for j, end in enumerate(("low", "high"))},
                 "speedup_valid": None if r.values.get("speedup") is None else "speedup" not in r.invalid}
                for r in rows]
    columns, cells = configuration_columns(rows)
    paths = {"md": out / "compare.md", "csv": out / "compare.csv", "json": out / "compare.json"}
    store.write_text(paths["md"], markdown(rows, caption(rows)))
    store.write_csv(paths["csv"], csv_rows, ["schedule", "run", "role", "configuration", *keys, "speedup_valid",
                                             *(b for b in bounds if any(c.get(b) is not None for c in csv_rows))])
    store.write_json(paths["json"], {
        "caption": caption(rows),
        "columns": {k: h for k, h, _ in COLUMNS},
        "interval": intervals.METHOD,
        "rows": [{**c, "cells": {k: cell(r, k, f) for k, _, f in COLUMNS},
                  "ci95": {k: r.intervals[k] for k in keys if r.intervals.get(k)},
                  "codec_floor": r.codec_floor or None,
                  "notes": {k: marks[(i, k)] for k in keys if (i, k) in marks}}
                 for i, (c, r) in enumerate(zip(csv_rows, rows))],
        "footnotes": {str(n): note for note, n in numbers.items()},
        "configurations": columns,  # each schedule's row (an index into rows) per configuration
        "by_configuration": {schedule: {c: runs.get(c) for c in columns} for schedule, runs in cells.items()}
                            if columns else {},
    })
    return paths
