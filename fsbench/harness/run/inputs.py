"""Every input a run reads before any weights load (settings, model folder, prompts, latent), read once the way the
run reads it. `orchestrator.prepare` refuses the first that fails; `fsbench doctor` reports each, so doctor never
vouches for what a run then refuses, and a broken file is a line naming it, never an exception."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsbench.errors import FsbenchError
from fsbench.harness.model import pipeline
from fsbench.harness.run import dataset
from fsbench.harness.run.presets import Settings, build_settings

DEFAULT_MODEL = "tiny"  # what `fsbench run` and a bare `fsbench doctor` use
NAMES = ("settings", "model", "prompts", "latent")


@dataclass
class Inputs:
    """What was read, and for each input that failed (by name: settings, model, prompts, latent) why."""

    settings: Settings | None = None
    layers: int | None = None
    prompts: dataset.Prompts | None = None
    latent: dataset.Latent | None = None
    model_dir: Path | None = None  # the checkpoint folder; None for the built-in models
    problems: dict[str, FsbenchError] = field(default_factory=dict)

    def raise_first(self) -> None:
        """Refuse the first failed input, in the order a run meets them."""
        for name in NAMES:
            if name in self.problems:
                raise self.problems[name]


def read(model: str, preset: str, prompts_file: Path | None = None, num_prompts: int | None = None,
         latent_file: Path | None = None, overrides: dict[str, Any] | None = None, *,
         first_only: bool = False) -> Inputs:
    """Read the inputs of a run of `model` in the order a run meets them; a failure is kept under its input's name.
    `first_only` (a run) stops there, before anything later is read or warned about; otherwise (doctor) the others
    are still read, but the latent, which needs the settings, is skipped when they fail."""
    found = Inputs()

    def settings() -> None:
        found.settings = build_settings(preset, model, **(overrides or {}))

    def model_dir() -> None:
        found.model_dir = None if model in pipeline.SYNTHETIC else pipeline.checkpoint_dir(model)
        found.layers = pipeline.num_layers(model)

    def prompts() -> None:
        found.prompts = dataset.load_prompts(prompts_file, model, num_prompts)

    def latent() -> None:
        if found.settings is not None:
            found.latent = dataset.load_latent(found.settings, latent_file)

    for name, step in zip(NAMES, (settings, model_dir, prompts, latent)):
        try:
            step()
        except FsbenchError as exc:
            found.problems[name] = exc
            if first_only:
                break
    return found
