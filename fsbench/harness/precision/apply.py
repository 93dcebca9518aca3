"""`fsbench.apply(pipe, schedule="hybrid")`: a precision schedule on anyone's diffusers Wan pipeline, in one call.

The same router as `fsbench run` (harness.precision.router) goes on every self-attention of the pipeline's experts. The
step count is learnt at call time: at the first expert forward of a pipeline call, the schedule is resolved for
that call's `num_inference_steps` (the length of the scheduler's timesteps), and every forward's step is the
position of its timestep among them. So `pipe(prompt, num_inference_steps=20)` runs the 20-step schedule with
no callback to pass and any scheduler in place, and the videos are those of `fsbench run` with the same schedule.
"""
from __future__ import annotations

from typing import Any

import torch

from fsbench.errors import FsbenchError
from fsbench.harness.precision.router import Capture, SelfAttentionRouter, per_step
from fsbench.harness.precision.schedule import ResolvedSchedule, Schedule, load as load_schedule
from fsbench.kernels.registry import RUN_CHOICES


class ScheduledAttention:
    """The handle `fsbench.apply` returns: what ran (`kernels_used`, `calls`, `per_step()`) and `remove()`; as a
    context manager it removes the routing on exit."""

    def __init__(self, pipe: Any, schedule: Schedule, impl: str, capture: bool, steps: int):
        self.pipe, self.schedule = pipe, schedule
        self.layers = len(pipe.transformer.blocks)
        self._resolved: dict[int, ResolvedSchedule] = {}
        self.capture = Capture(out_dir=None) if capture else None
        self.router = SelfAttentionRouter(self.resolved(steps), impl=impl, capture=self.capture)
        self._timesteps: torch.Tensor | None = None
        self._values: list[float] = []
        self.router.install(pipe)
        self._hooks = [model.register_forward_pre_hook(self._locate_step, prepend=True, with_kwargs=True)
                       for model in _experts(pipe)]

    def resolved(self, steps: int) -> ResolvedSchedule:
        """The schedule's format table for a call of `steps` denoising steps."""
        if steps not in self._resolved:
            self._resolved[steps] = self.schedule.resolve(steps, self.layers)
        return self._resolved[steps]

    @property
    def kernels_used(self) -> dict[str, str]:
        """Format -> the kernel implementation that ran it."""
        return dict(self.router.kernels_used)

    @property
    def calls(self) -> list[dict[str, Any]]:
        """One record per self-attention call (video, step, expert, layer, cfg, fmt, tokens, statistics); empty
        unless applied with `capture=True`."""
        return list(self.capture.records) if self.capture is not None else []

    def per_step(self) -> list[dict[str, Any]]:
        """Calls and mean / max rollback rate per (step, format) of the captured calls."""
        return per_step(self.calls)

    def remove(self) -> None:
        """Give the pipeline back diffusers' own attention (it can be applied again)."""
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        self.router.uninstall()

    def __enter__(self) -> ScheduledAttention:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _locate_step(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        """Before an expert's forward: a new call (new timesteps) resolves the schedule for its step count; the
        step is where this forward's timestep stands among the call's timesteps."""
        timesteps = self.pipe.scheduler.timesteps
        if timesteps is not self._timesteps:
            self._timesteps, self._values = timesteps, [float(t) for t in timesteps.tolist()]
            self.router.schedule = self.resolved(len(self._values))
            self.router.begin_video(self.router.video + 1)
        timestep = kwargs["timestep"] if "timestep" in kwargs else args[1]
        value = float(timestep.max())  # per-token timesteps (expand_timesteps) hold the step's t and zeros
        step = min(range(len(self._values)), key=lambda i: abs(self._values[i] - value))
        if step != self.router.step:
            self.router.set_step(step)


def apply(pipe: Any, schedule: str | Schedule = "hybrid", impl: str = "auto", *, capture: bool = False,
          steps: int | None = None) -> ScheduledAttention:
    """Route every self-attention of a diffusers Wan pipeline through the Fused-Softmax kernels by `schedule`.

    `schedule`: a built-in name (`fsbench schedules`), a .toml file, a spec such as 'mxfp6:first15%,last15%;mxfp4:*'
    or a parsed `Schedule`; `impl`: the kernel for the MX formats (auto: Gluon/Triton on sm_90, else the emulator);
    `capture`: record every call's statistics in the handle (each call then waits for the GPU); `steps`: the step
    count the schedule is checked against now [default: the pipeline's default, 50], each call still resolving it
    for its own `num_inference_steps`. Also registers the kernels as diffusers attention backends where diffusers
    has the registry.
    """
    from fsbench.harness.precision import diffusers_backends

    if impl not in RUN_CHOICES:
        raise FsbenchError(f"impl {impl!r}: choose one of {', '.join(RUN_CHOICES)}")
    if not hasattr(pipe, "transformer") or not hasattr(pipe.transformer, "blocks"):
        raise FsbenchError(f"{type(pipe).__name__} is not a diffusers Wan pipeline (no transformer.blocks)")
    parsed = schedule if isinstance(schedule, Schedule) else load_schedule(schedule)
    diffusers_backends.register()
    return ScheduledAttention(pipe, parsed, impl, capture, steps or _default_steps(pipe))


def _experts(pipe: Any) -> list[Any]:
    return [m for m in (pipe.transformer, getattr(pipe, "transformer_2", None)) if m is not None]


def _default_steps(pipe: Any) -> int:
    """The step count a call without `num_inference_steps` runs (WanPipeline: 50): the schedule must fit it."""
    import inspect

    parameter = inspect.signature(type(pipe).__call__).parameters.get("num_inference_steps")
    return parameter.default if parameter is not None and isinstance(parameter.default, int) else 50
