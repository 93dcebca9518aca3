"""Generation settings: one frozen object built once from a preset TOML (`scenarios/<preset>.toml`, or a file of
the same form), the preset's per-model table (`[model.tiny]` shrinks the video for the CPU model) and CLI
overrides."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (setup.cfg installs tomli there)
    import tomli as tomllib

from fsbench import userfiles
from fsbench.errors import FsbenchError
from fsbench.paths import SCENARIO_DIR

# Video geometry beyond which the fixed latent alone no longer fits a machine's memory.
MAX_SIDE = 2048
MAX_FRAMES = 257
MAX_STEPS = 1000
_TYPES = {"int": (int,), "float": (int, float), "str": (str,)}  # a Settings field's annotation -> accepted types


@dataclass(frozen=True)
class Settings:
    """Everything that decides the pixels of a video; the manifest records all of it."""

    preset: str
    height: int
    width: int
    num_frames: int
    fps: int
    steps: int
    guidance_scale: float
    guidance_scale_2: float
    boundary_ratio: float
    flow_shift: float
    seed: int
    negative_prompt: str

    @property
    def latent_shape(self) -> tuple[int, int, int, int, int]:
        """(1, 16, F_lat, H/8, W/8): the Wan VAE compresses 4x in time and 8x in space."""
        return (1, 16, (self.num_frames - 1) // 4 + 1, self.height // 8, self.width // 8)

    @property
    def tokens(self) -> int:
        """Self-attention sequence length: latent frames x (H/16) x (W/16) after the 1x2x2 patch."""
        return self.latent_shape[2] * (self.height // 16) * (self.width // 16)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def preset_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def preset_path(preset: str) -> Path:
    """The TOML of `preset`: a built-in name, else a `.toml` file of the same form."""
    builtin = SCENARIO_DIR / f"{preset}.toml"
    if preset in preset_names():
        return builtin
    path = Path(preset)
    if path.suffix == ".toml" and path.is_file():
        return path
    raise FsbenchError(f"unknown preset {preset!r}: name one of {', '.join(preset_names())} or a .toml file "
                       f"shaped like {SCENARIO_DIR / 'mlperf.toml'}")


def preset_name(preset: str) -> str:
    """What the manifest and default folder names call `preset`: the name, or a file's stem."""
    return preset_path(preset).stem


def build_settings(preset: str, model: str, **overrides: Any) -> Settings:
    """Preset values, then the preset's `[model.<model>]` table, then the non-None `overrides`."""
    path = preset_path(preset)
    try:
        data = tomllib.loads(userfiles.read_text(path, "preset"))
    except tomllib.TOMLDecodeError as exc:
        raise FsbenchError(f"preset {path} is not valid TOML: {exc}") from exc
    values = {k: v for k, v in data.items() if k not in ("description", "model")}
    values.update(data.get("model", {}).get(model, {}))
    values.update({k: v for k, v in overrides.items() if v is not None})
    names = {f.name for f in fields(Settings)} - {"preset"}
    if set(values) != names:
        raise FsbenchError(f"preset {path} is missing {sorted(names - set(values))} "
                           f"or has unknown keys {sorted(set(values) - names)}")
    settings = Settings(preset=path.stem, **values)
    _check(settings)
    return settings


def _check(s: Settings) -> None:
    """The bounds `fsbench run`'s options have, for a preset file's values too (and so a campaign plan's)."""
    for field in fields(Settings):
        value = getattr(s, field.name)
        if isinstance(value, bool) or not isinstance(value, _TYPES[str(field.type)]):
            raise FsbenchError(f"{field.name} must be of type {field.type}, got {value!r}")
    if not (0 < s.height <= MAX_SIDE and 0 < s.width <= MAX_SIDE) or s.height % 16 or s.width % 16:
        raise FsbenchError(f"height and width must be positive multiples of 16 up to {MAX_SIDE}, "
                           f"got {s.height}x{s.width}")
    if not 1 <= s.num_frames <= MAX_FRAMES or (s.num_frames - 1) % 4:
        raise FsbenchError(f"frames must be 4k+1 up to {MAX_FRAMES} (e.g. 9, 17, 81), got {s.num_frames}")
    if not 1 <= s.steps <= MAX_STEPS:
        raise FsbenchError(f"steps must be 1-{MAX_STEPS}, got {s.steps}")
    if not 0.0 < s.boundary_ratio < 1.0:
        raise FsbenchError(f"boundary_ratio must be in (0, 1), got {s.boundary_ratio}")
