"""The report of a profile (`fsbench run --profile`): what `harness.measure.profile.Profiler` recorded of each
video, summarized over the videos (mean phases, the step split per attention format, clock and energy) and written
as RUN/profile.json and the tables of RUN/profile.md."""
from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from fsbench.files import atomic_write_text
from fsbench.harness.measure.profile import CLOCK_PARTS, CLOCK_SAMPLE_MS, MEMORY_PHASES, PARTS, Profiler

JSON_NAME, TABLE_NAME = "profile.json", "profile.md"


def summarize(profiler: Profiler, loadgen: dict[str, Any] | None = None) -> dict[str, Any]:
    """Mean over videos of every phase, the step split per format, and the harness overhead."""
    if not profiler.videos:
        return {"videos": 0}
    phases = ("text_encode_s", "denoise_s", "vae_decode_s", "postprocess_s", "video_encode_s", "wall_s")
    out: dict[str, Any] = {"videos": len(profiler.videos), "timing": "cuda events" if profiler.clock.cuda else
                           "perf_counter (cpu)", "fine_split": profiler.fine}
    out.update({p: statistics.fmean(v.get(p, 0.0) for v in profiler.videos) for p in phases})
    parts = [f"{p}_s" for p in (PARTS if profiler.fine else PARTS[:1])] + ["rest_s"]
    by_fmt: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for video in profiler.videos:
        for row in video["steps"]:
            by_fmt[row["fmt"]].append(row)
    out["step_by_format"] = {
        fmt: {"steps": len(rows), "total_s": statistics.fmean(r["total_s"] for r in rows),
              **{p: statistics.fmean(r[p] for r in rows) for p in parts},
              "self_attention_share": statistics.fmean(r["self_attention_s"] / r["total_s"] for r in rows)}
        for fmt, rows in sorted(by_fmt.items())}
    for fmt, rows in by_fmt.items():
        calls = [r["self_attention_s"] / r["self_attention_calls"] for r in rows if r["self_attention_calls"]]
        out["step_by_format"][fmt]["self_attention_call_ms"] = 1000 * statistics.fmean(calls) if calls else None
    out["clock"] = clock_summary(profiler.videos)
    out["energy"] = energy_summary(profiler.videos, profiler.energy.describe())
    out["peak_gpu_memory_bytes"] = profiler.peak.bytes
    out["gpu_memory_held_bytes"] = profiler.peak.held
    out["peak_gpu_memory_by_phase_bytes"] = {p: profiler.peak.phases[p] for p in MEMORY_PHASES
                                             if p in profiler.peak.phases}
    named = sum(out[p] for p in phases[:-1])
    out["unattributed_s"] = out["wall_s"] - named
    if loadgen and "latency_mean_ns" in loadgen:
        latency = loadgen["latency_mean_ns"] / 1e9
        out["loadgen_latency_mean_s"] = latency
        out["loadgen_overhead_s"] = latency - out["wall_s"]
        out["harness_overhead_share"] = (latency - named + out["video_encode_s"]) / latency
    return out


def write(run: Path, profiler: Profiler, loadgen: dict[str, Any] | None = None) -> dict[str, Any]:
    """RUN/profile.json (every video, every step) and RUN/profile.md (the table); returns the summary."""
    summary = summarize(profiler, loadgen)
    atomic_write_text(run / JSON_NAME, json.dumps({"summary": summary, "videos": profiler.videos}, indent=2) + "\n")
    atomic_write_text(run / TABLE_NAME, format_table(summary) + "\n")
    return summary


def format_table(summary: dict[str, Any]) -> str:
    """Markdown: one row per phase (mean seconds per video, share of the video), then the step split."""
    if not summary.get("videos"):
        return "no video was generated"
    wall = summary["wall_s"]
    lines = [f"Latency breakdown, mean of {summary['videos']} video(s), {summary['timing']}", "",
             "| phase | s | share |", "|---|---|---|"]
    for name in ("text_encode", "denoise", "vae_decode", "postprocess", "video_encode", "unattributed"):
        value = summary[f"{name}_s"]
        lines.append(f"| {name} | {value:.4f} | {value / wall:.1%} |")
    lines.append(f"| video (wall) | {wall:.4f} | 100% |")
    if summary.get("peak_gpu_memory_bytes") is not None:
        lines += ["", f"Peak GPU memory of one video: {summary['peak_gpu_memory_bytes'] / 2**30:.2f} GiB "
                      "(torch.cuda.max_memory_allocated)" + _memory_split(summary)]
    if "loadgen_overhead_s" in summary:
        lines.append(f"| LoadGen overhead (latency - wall) | {summary['loadgen_overhead_s']:.4f} | "
                     f"{summary['loadgen_overhead_s'] / summary['loadgen_latency_mean_s']:.2%} |")
        lines.append(f"| harness overhead (LoadGen + mp4 + unattributed) | | "
                     f"{summary['harness_overhead_share']:.2%} |")
    parts = [p for p in (*PARTS, "rest") if f"{p}_s" in next(iter(summary["step_by_format"].values()))]
    lines += ["", "Denoising step (both CFG passes), mean per format:", "",
              "| format | steps | step s | " + " | ".join(parts) + " | self-attention share | ms per call |",
              "|---" * (len(parts) + 5) + "|"]
    for fmt, row in summary["step_by_format"].items():
        cells = " | ".join(f"{row[f'{p}_s']:.4f}" for p in parts)
        call = row.get("self_attention_call_ms")
        lines.append(f"| {fmt} | {row['steps']} | {row['total_s']:.4f} | {cells} | {row['self_attention_share']:.1%} | "
                     f"{'' if call is None else f'{call:.2f}'} |")
    return "\n".join(lines + [""] + _clock_lines(summary.get("clock")) + _energy_lines(summary["energy"]))


def _memory_split(summary: dict[str, Any]) -> str:
    """What the video's peak is made of: the memory held when it started, and the peak of each phase."""
    phases = summary.get("peak_gpu_memory_by_phase_bytes") or {}
    if summary.get("gpu_memory_held_bytes") is None or not phases:
        return ""
    peaks = ", ".join(f"{name} {value / 2**30:.2f}" for name, value in phases.items())
    held = summary["gpu_memory_held_bytes"] / 2**30
    return f"; held when the video starts {held:.2f} GiB, peak by phase: {peaks} GiB"


def clock_summary(videos: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per part of the loop (`CLOCK_PARTS`): the median over videos of the median SM clock and power, the hottest
    temperature and the samples counted; None where no video was sampled."""
    sampled = [v["clock"] for v in videos if v.get("clock")]
    if not sampled:
        return None
    out: dict[str, Any] = {"source": f"nvidia-smi every {CLOCK_SAMPLE_MS} ms"}
    for part in CLOCK_PARTS:
        rows = [c[part] for c in sampled if c.get(part)]
        out[part] = {"clock_mhz": statistics.median(r["clock_mhz"] for r in rows),
                     "power_w": statistics.median(r["power_w"] for r in rows),
                     "temp_c": max(r["temp_c"] for r in rows), "samples": sum(r["samples"] for r in rows),
                     "power_cap_share": statistics.fmean(r["power_cap_share"] for r in rows)} if rows else None
    return out


def _clock_lines(clock: dict[str, Any] | None) -> list[str]:
    """Markdown lines of the clock section (none where the GPU was not sampled)."""
    if not clock:
        return []
    lines = [f"SM clock and board power, median of the samples ({clock['source']}):", "",
             "| part | MHz | W | hottest °C | samples | under the power cap |", "|---|---|---|---|---|---|"]
    for part in CLOCK_PARTS:
        row = clock.get(part)
        if row:
            lines.append(f"| {part.replace('_', ' ')} | {row['clock_mhz']:.0f} | {row['power_w']:.0f} | "
                         f"{row['temp_c']:.0f} | {row['samples']} | {row['power_cap_share']:.0%} |")
    return lines + [""]


def energy_summary(videos: list[dict[str, Any]], meter: dict[str, Any]) -> dict[str, Any]:
    """Mean joules per video and per denoising loop (measured), per step and per self-attention call by format
    (split by device time); every figure None where the meter had no source."""
    out: dict[str, Any] = {**meter, "joules_per_video": None, "denoise_joules": None, "mean_power_w": None,
                           "by_format": {},
                           "split": "step and self-attention joules: the denoising loop's joules split by device time"}
    measured = [v for v in videos if v.get("joules") is not None]
    if not measured:
        return out
    out["joules_per_video"] = statistics.fmean(v["joules"] for v in measured)
    out["mean_power_w"] = statistics.fmean(v["joules"] / v["wall_s"] for v in measured)
    loops = [v["denoise_joules"] for v in measured if v.get("denoise_joules") is not None]
    out["denoise_joules"] = statistics.fmean(loops) if loops else None
    by_fmt: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for video in measured:
        for row in video["steps"]:
            if row.get("joules") is not None:
                by_fmt[row["fmt"]].append(row)
    out["by_format"] = {fmt: {
        "joules_per_step": statistics.fmean(r["joules"] for r in rows),
        "joules_per_self_attention_call": statistics.fmean(
            r["self_attention_joules"] / r["self_attention_calls"] for r in rows if r["self_attention_calls"])
        if any(r["self_attention_calls"] for r in rows) else None,
    } for fmt, rows in sorted(by_fmt.items())}
    return out


def _energy_lines(energy: dict[str, Any]) -> list[str]:
    """Markdown lines of the energy section: measured per video, split per step and per attention call."""
    if energy.get("joules_per_video") is None:
        return [f"Energy: not measured ({energy.get('reason') or 'no reading'})."]
    loop = energy["denoise_joules"]
    lines = [f"Energy ({energy['source']}): {energy['joules_per_video']:.1f} J per video "
             f"(mean {energy['mean_power_w']:.0f} W over the video)"
             + (f", {loop:.1f} J in the denoising loop." if loop is not None else "."),
             "", "| format | J per step (split by device time) | J per self-attention call |", "|---|---|---|"]
    for fmt, row in energy["by_format"].items():
        call = row["joules_per_self_attention_call"]
        lines.append(f"| {fmt} | {row['joules_per_step']:.2f} | {'' if call is None else f'{call:.3f}'} |")
    return lines
