"""The GPU's energy over a window of a run, in joules: NVML's energy counter where the driver has one, else the
board power sampled by `nvidia-smi` (`harness.measure.clocks`) and integrated over time; none on a CPU.

NVML's `nvmlDeviceGetTotalEnergyConsumption` counts millijoules since the driver loaded (Volta and later), so a
window's energy is the difference of two readings. Readings are taken on the host, so `Window.mark()` first waits
for the device: a mark then stands for all the work queued before it. Under the GPU's power cap the whole
pipeline runs at nearly constant power, so the profiler can split a measured window's joules over its parts in
proportion to their device time (`harness.measure.profile` says which figures are measured and which are split).
"""
from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from fsbench.harness.measure import clocks as gpu_clock

NVML = "nvml energy counter"
SAMPLED = "nvidia-smi power samples"
SAMPLE_MS = 100


class EnergyUnavailable(Exception):
    """No energy source for this device; the message says why."""


def counter_joules(start_mj: int, end_mj: int) -> float:
    """Joules between two readings of NVML's millijoule counter."""
    if end_mj < start_mj:
        raise ValueError(f"energy counter went back from {start_mj} to {end_mj} mJ (driver reloaded?)")
    return (end_mj - start_mj) / 1000.0


def sampled_joules(samples: list[dict[str, Any]], start: float, end: float) -> float | None:
    """The integral of power over [start, end] (time.time() seconds) from `gpu_clock` samples: power is linear
    between samples and held at the nearest sample beyond the first and the last; None without samples."""
    samples = sorted(samples, key=lambda s: s["t"])
    if not samples or end < start:
        return None
    times = np.array([s["t"] for s in samples])
    power = np.array([s["power_w"] for s in samples])
    grid = np.concatenate(([start], times[(times > start) & (times < end)], [end]))
    return float(np.trapezoid(np.interp(grid, times, power), grid))


def nvml_handle(index: int) -> Any:
    """The NVML handle of GPU `index` with a working energy counter; EnergyUnavailable ("NVML unavailable: ...")
    where the library, the driver or the counter is missing."""
    try:
        import pynvml
    except ImportError as e:
        raise EnergyUnavailable(f"NVML unavailable: {e} (pip install nvidia-ml-py)") from e
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    except pynvml.NVMLError as e:
        raise EnergyUnavailable(f"NVML unavailable: {e}") from e
    return handle


class Window:
    """Marks inside one measured window; `joules(a, b)` between two marks once the window has closed."""

    def __init__(self, device: torch.device, source: str | None, handle: Any = None):
        self.device, self.source, self.handle = device, source, handle
        self.samples: list[dict[str, Any]] = []

    def mark(self) -> Any:
        if self.source is None:
            return None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        if self.source == NVML:
            import pynvml

            return pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
        return time.time()

    def joules(self, start: Any, end: Any) -> float | None:
        if self.source is None or start is None or end is None:
            return None
        if self.source == NVML:
            return counter_joules(start, end)
        return sampled_joules(self.samples, start, end)


class Meter:
    """The energy source of one device, chosen once: `source` names it, `reason` says why there is none."""

    def __init__(self, device: torch.device):
        self.device, self.source, self.reason, self.handle = device, None, None, None
        if device.type != "cuda":
            self.reason = f"no GPU energy on a {device.type} device"
            return
        try:
            index = gpu_clock.nvml_index(device)
            if index is None:
                raise EnergyUnavailable("NVML does not number this device")
            self.handle, self.source = nvml_handle(index), NVML
        except EnergyUnavailable as e:
            if shutil.which("nvidia-smi"):
                self.source = SAMPLED
            else:
                self.reason = f"{e}; no nvidia-smi to sample power either"

    @contextlib.contextmanager
    def window(self) -> Iterator[Window]:
        """A window to mark in; with sampled power, nvidia-smi samples for as long as the window is open."""
        window = Window(self.device, self.source, self.handle)
        if self.source != SAMPLED:
            yield window
            return
        with gpu_clock.sampling(SAMPLE_MS, self.device) as samples:
            yield window
        window.samples = samples

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "reason": self.reason}
