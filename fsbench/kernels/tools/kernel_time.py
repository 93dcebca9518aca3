"""A row's attention kernel alone: its device time under torch.profiler, without the casts and launches around it.

The bench times the whole call with CUDA events (the work a user waits for: casts, scales, prepass and kernel);
NVIDIA's published figures time the attention kernel alone, as the profiler's device time. This gives that second
view for any row: of the kernels one call launches, the one with the most device time over the profiled calls is
the attention kernel; its median duration per launch is the kernel's time, and the device time of every kernel
the calls launched, per call, is the call's busy time (the call's time less its idle gaps).
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch


def device_durations(fn: Callable, inputs: list[tuple[torch.Tensor, ...]], calls: int) -> dict[str, list[float]]:
    """Microseconds of every kernel launch, by kernel name, over `calls` calls of `fn` cycling through the input
    sets (after one unprofiled call, so no build or compilation is profiled)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn(*inputs[0])
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(*inputs[i % len(inputs)])
        torch.cuda.synchronize()
    durations: dict[str, list[float]] = defaultdict(list)
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:
            durations[event.name].append(event.time_range.elapsed_us())
    return dict(durations)


def summarize(durations: dict[str, list[float]], calls: int, flops: int) -> dict[str, Any]:
    """The attention kernel (most device time in all) with its median ms per launch and TFLOP/s at `flops`, the
    number of kernels a call launches and the device-busy ms per call; {} where nothing ran on the device."""
    if not durations:
        return {}
    name = max(durations, key=lambda n: sum(durations[n]))
    kernel_ms = statistics.median(durations[name]) / 1e3
    return {"kernel": name, "kernel_ms": kernel_ms, "kernel_tflops": flops / kernel_ms / 1e9,
            "kernel_launches": len(durations[name]),
            "kernels_per_call": sum(len(d) for d in durations.values()) / calls,
            "busy_ms_per_call": sum(sum(d) for d in durations.values()) / calls / 1e3}


def kernel_alone(fn: Callable, inputs: list[tuple[torch.Tensor, ...]], calls: int, flops: int) -> dict[str, Any]:
    """`summarize` of `calls` profiled calls of `fn`."""
    return summarize(device_durations(fn, inputs, calls), calls, flops)
