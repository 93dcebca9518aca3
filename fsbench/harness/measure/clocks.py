"""The GPU's SM clock, power and clock-event reasons, sampled by `nvidia-smi` in the background and summarised
per time window. Under the GPU's power cap a kernel's speed is also the clock its power draw allows
(results/log/), so timings are published with the clock they ran at. NVML's Python binding is
not among our dependencies; `nvidia-smi` ships with every driver.
"""
from __future__ import annotations

import datetime as dt
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

FIELDS = ("timestamp", "clocks.sm", "power.draw", "temperature.gpu", "clocks_event_reasons.sw_power_cap",
          "clocks_event_reasons.sw_thermal_slowdown", "clocks_event_reasons.hw_slowdown")


def parse_sample(line: str) -> dict[str, Any] | None:
    """One nvidia-smi CSV sample (`t` in seconds since the epoch, like time.time()); None for a line that is
    not one (header, partial write, a field the GPU does not report)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(FIELDS):
        return None
    try:
        when = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        return {"t": when, "clock_mhz": float(parts[1]), "power_w": float(parts[2]), "temp_c": float(parts[3]),
                "power_cap": parts[4] == "Active", "thermal": parts[5] == "Active" or parts[6] == "Active"}
    except ValueError:
        return None


def nvml_index(device: torch.device | None = None) -> int | None:
    """The number NVML and nvidia-smi give the CUDA `device` (default: the current one), which numbers every GPU
    of the host where torch numbers the visible ones (CUDA_VISIBLE_DEVICES); None for a CPU device, or where
    this process sees no GPU."""
    import torch

    if device is not None and device.type != "cuda":
        return None
    if device is None or device.index is None:
        if not torch.cuda.is_available():
            return None
        index = torch.cuda.current_device()
    else:
        index = device.index
    try:
        return torch.cuda._get_nvml_device_index(index)
    except Exception:  # noqa: BLE001 - a private helper of torch; the plain index is right without a mask
        return index


@contextmanager
def sampling(interval_ms: int = 50, device: torch.device | None = None) -> Iterator[list[dict[str, Any]]]:
    """Samples of the GPU `device` (default: the current CUDA device) every `interval_ms` while the block runs;
    the list yielded is filled when the block ends (and stays empty where there is no nvidia-smi). Without
    `--id`, nvidia-smi would print a line for every GPU of the host, so a busy GPU's median would mix with idle
    ones'."""
    samples: list[dict[str, Any]] = []
    smi = shutil.which("nvidia-smi")
    if smi is None:
        yield samples
        return
    index = nvml_index(device)
    with tempfile.TemporaryFile("w+") as log:
        sampler = subprocess.Popen([smi, f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits",
                                    "-lms", str(interval_ms), *([] if index is None else ["--id", str(index)])],
                                   stdout=log, stderr=subprocess.DEVNULL)
        try:
            yield samples
        finally:
            sampler.terminate()
            sampler.wait()
            log.seek(0)
            samples.extend(s for s in map(parse_sample, log) if s)


def summarize(samples: list[dict[str, Any]], start: float = -float("inf"),
              end: float = float("inf")) -> dict[str, Any] | None:
    """Median clock and power, hottest temperature and the shares of samples under the power cap and under a
    thermal slowdown, over the samples taken in [start, end] (time.time() seconds); None when there are none."""
    inside = [s for s in samples if start <= s["t"] <= end]
    if not inside:
        return None
    return {"samples": len(inside), "clock_mhz": statistics.median(s["clock_mhz"] for s in inside),
            "power_w": statistics.median(s["power_w"] for s in inside), "temp_c": max(s["temp_c"] for s in inside),
            "power_cap_share": sum(s["power_cap"] for s in inside) / len(inside),
            "thermal_share": sum(s["thermal"] for s in inside) / len(inside)}


def in_spans(samples: list[dict[str, Any]], spans: list[tuple[float, float]]) -> list[bool]:
    """Whether each sample was taken inside one of the (start, end) spans (time.time() seconds, not overlapping):
    one binary search per sample, as a video's samples meet thousands of attention calls."""
    import numpy as np

    ordered = sorted(spans) or [(np.inf, np.inf)]
    starts, ends = np.array([a for a, _ in ordered]), np.array([b for _, b in ordered])
    t = np.array([sample["t"] for sample in samples])
    last = np.searchsorted(starts, t, side="right") - 1
    return ((last >= 0) & (t <= ends[np.maximum(last, 0)])).tolist()


def back_to_back(fn: Callable[..., Any], args: tuple, seconds: float, flops: int) -> dict[str, Any]:
    """TFLOP/s of `fn(*args)` called back to back for `seconds`, with the clock and power sampled over the calls
    (the first second, the clock's ramp, left out): a kernel's speed at the clock its own power draw allows."""
    from fsbench.kernels.tools.bench import time_ms

    time_ms(fn, [args], 2, 0)
    with sampling(50) as samples:
        start, times = time.time(), []
        while time.time() - start < seconds:
            times += time_ms(fn, [args], 0, 1)
        end = time.time()
    return {"tflops": round(flops / statistics.median(times) / 1e9, 1), "calls": len(times),
            **(summarize(samples, start + 1.0, end) or {})}
