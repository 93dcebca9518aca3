"""Precision schedules: which attention format every (denoising step, transformer layer) uses. How to write
one is `GRAMMAR` below, which `fsbench schedules` prints."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (setup.cfg installs tomli there)
    import tomli as tomllib

from fsbench import userfiles
from fsbench.errors import FsbenchError
from fsbench.kernels import constants
from fsbench.paths import SCENARIO_DIR

SCHEDULE_DIR = SCENARIO_DIR / "schedules"

GRAMMAR = """\
A schedule is a list of rules FORMAT[@LAYERS]:STEPS (FORMAT: bf16, mxfp8, mxfp6 or mxfp4), written as a spec
string (rules joined by ';') or as [[rule]] tables in a TOML file (keys format, steps, optional layers and a
top-level description). Built-in names are the TOML files in scenarios/schedules/.

STEPS and LAYERS are * (everything) or comma-separated terms, 0-based and inclusive: N, A-B, firstN, lastN,
firstP%, lastP% (P percent of the run's steps or the model's layers, rounded, at least one). Percent terms let
one schedule fit any step count: the built-in hybrid is mxfp6:first15%,last15%;mxfp4:*, i.e. mxfp6 for the
first and last 3 of 20 steps (1 of 4) and mxfp4 between.

The more specific rule wins where rules overlap: explicit steps beat * steps, then explicit layers beat
* layers. Two rules of equal specificity must not overlap, and every (step, layer) must get a format.
Examples: 'mxfp6:0-2,17-19;mxfp4:*', 'bf16@0-1:*;mxfp8:*' (first two layers bf16, the rest mxfp8)."""

_TERM = re.compile(r"^(?:(\d{1,6})|(\d{1,6})-(\d{1,6})|(first|last)(\d{1,6})(%?))$")  # 6 digits: no absurd numbers


@dataclass(frozen=True)
class Rule:
    """One `FORMAT[@LAYERS]:STEPS` rule; `steps`/`layers` are the raw term strings (`*` = all)."""

    fmt: str
    steps: str
    layers: str = "*"

    @property
    def specificity(self) -> int:
        return 2 * (self.steps != "*") + (self.layers != "*")

    def __str__(self) -> str:
        return f"{self.fmt}{'' if self.layers == '*' else '@' + self.layers}:{self.steps}"


@dataclass(frozen=True)
class Schedule:
    """A parsed, syntactically valid schedule; `resolve` checks it against a run's steps and layers."""

    name: str
    rules: tuple[Rule, ...]
    description: str = ""

    @property
    def spec(self) -> str:
        return ";".join(str(r) for r in self.rules)

    def resolve(self, steps: int, layers: int) -> ResolvedSchedule:
        """The format table for `steps` denoising steps and `layers` blocks per expert."""
        grid: list[list[tuple[int, Rule] | None]] = [[None] * layers for _ in range(steps)]
        for rule in self.rules:
            step_ids = _expand(rule.steps, steps, "step", rule)
            layer_ids = _expand(rule.layers, layers, "layer", rule)
            for s in step_ids:
                for layer in layer_ids:
                    held = grid[s][layer]
                    if held is None or held[0] < rule.specificity:
                        grid[s][layer] = (rule.specificity, rule)
                    elif held[0] == rule.specificity:
                        raise FsbenchError(
                            f"schedule {self.name!r}: rules '{held[1]}' and '{rule}' both set step {s}, layer {layer};"
                            " make them disjoint")
        missing = sorted({s for s in range(steps) for layer in range(layers) if grid[s][layer] is None})
        if missing:
            raise FsbenchError(f"schedule {self.name!r} gives no format for step(s) {_ranges(missing)} of a "
                               f"{steps}-step run; add a catch-all rule such as 'bf16:*'")
        table = tuple(tuple(cell[1].fmt for cell in row) for row in grid)  # type: ignore[index]
        return ResolvedSchedule(self.name, self.spec, table)


@dataclass(frozen=True)
class ResolvedSchedule:
    """`table[step][layer]` is the attention format; the same table serves both experts."""

    name: str
    spec: str
    table: tuple[tuple[str, ...], ...]

    def fmt(self, step: int, layer: int) -> str:
        return self.table[step][layer]

    @property
    def formats(self) -> tuple[str, ...]:
        return tuple(sorted({f for row in self.table for f in row}, key=constants.FORMATS.index))

    def by_step(self) -> list[str]:
        """One short label per step: the format, or `fmtA/fmtB` when layers differ."""
        return ["/".join(dict.fromkeys(row)) for row in self.table]


def parse_spec(spec: str, name: str | None = None, description: str = "") -> Schedule:
    """Parse `FORMAT[@LAYERS]:STEPS;...`; raises FsbenchError naming the bad part."""
    if not spec.strip():
        raise FsbenchError("empty schedule spec; expected e.g. 'mxfp6:0-2,17-19;mxfp4:*'")
    rules = []
    for part in spec.split(";"):
        part = part.strip()
        if not part:
            continue
        head, sep, steps = part.partition(":")
        if not sep:
            raise FsbenchError(f"schedule rule {part!r} has no ':'; expected FORMAT[@LAYERS]:STEPS, e.g. 'mxfp4:*'")
        fmt, _, layers = head.partition("@")
        rules.append(_rule(fmt.strip(), steps.strip(), layers.strip() or "*", part))
    schedule = Schedule(name or "", tuple(rules), description)
    return schedule if name else Schedule(schedule.spec, schedule.rules, description)


def load_file(path: Path) -> Schedule:
    """Read a schedule TOML file (`description`, `[[rule]]` tables with format/steps/layers)."""
    try:
        data = tomllib.loads(userfiles.read_text(path, "schedule file"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise FsbenchError(f"cannot read schedule file {path}: {exc}") from exc
    entries = data.get("rule")
    if not isinstance(entries, list) or not entries:
        raise FsbenchError(f"schedule file {path} has no [[rule]] tables; see scenarios/schedules/hybrid.toml")
    if not isinstance(data.get("description", ""), str):
        raise FsbenchError(f"schedule file {path}: description must be a string")
    rules = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise FsbenchError(f"schedule file {path}, rule {i}: expected a [[rule]] table, got {entry!r:.60}")
        unknown = set(entry) - {"format", "steps", "layers"}
        if unknown or "format" not in entry or "steps" not in entry:
            raise FsbenchError(f"schedule file {path}, rule {i}: needs keys format and steps (optional layers),"
                               f" got {sorted(entry)}")
        wrong = [key for key, value in entry.items() if not isinstance(value, (str, int)) or isinstance(value, bool)]
        if wrong:
            raise FsbenchError(f"schedule file {path}, rule {i}: {', '.join(sorted(wrong))} must be a string such "
                               "as \"0-2,17\" or \"*\" (or one integer)")
        rules.append(_rule(str(entry["format"]), str(entry["steps"]), str(entry.get("layers", "*")),
                           f"{path}, rule {i}"))
    return Schedule(path.stem, tuple(rules), data.get("description", ""))


def refuse_repeats(schedules: Sequence[Schedule], where: str) -> None:
    """The same rules under two names (`mxfp4` and `mxfp4:*`, or in another order) would make the same videos twice
    under two folders."""
    seen: dict[frozenset[Rule], Schedule] = {}
    for schedule in schedules:
        first = seen.setdefault(frozenset(schedule.rules), schedule)
        if first is not schedule:
            raise FsbenchError(f"{where}: {first.name!r} and {schedule.name!r} are the same schedule ({first.spec}), "
                               "which would be generated twice; name it once")


def builtin_names() -> list[str]:
    return sorted(p.stem for p in SCHEDULE_DIR.glob("*.toml"))


def load(value: str) -> Schedule:
    """A built-in name, a `.toml` path, or a spec string, told apart by their text alone (a spec, which may be
    longer than any file name, is never looked up on disk)."""
    if value in builtin_names():
        return load_file(SCHEDULE_DIR / f"{value}.toml")
    if value.endswith(".toml"):
        path = Path(value)
        if not path.is_file():
            raise FsbenchError(f"schedule file {value} not found")
        return load_file(path)
    if ":" in value:
        return parse_spec(value)
    raise FsbenchError(f"unknown schedule {value!r}: use one of {', '.join(builtin_names())}, a .toml file, "
                       "or a spec like 'mxfp6:0-2,17-19;mxfp4:*' (see `fsbench schedules`)")


def _rule(fmt: str, steps: str, layers: str, where: str) -> Rule:
    if fmt not in constants.FORMATS:  # the kernels' formats: one a kernel gains, a schedule accepts
        raise FsbenchError(f"schedule rule {where!r}: unknown format {fmt!r}; expected one of "
                           f"{', '.join(constants.FORMATS)}")
    for what, terms in (("steps", steps), ("layers", layers)):
        if terms != "*":
            for term in terms.split(","):
                if not _TERM.match(term.strip()):
                    raise FsbenchError(f"schedule rule {where!r}: bad {what} term {term!r}; expected '*', N, A-B, "
                                       "firstN, lastN, firstP% or lastP%")
    return Rule(fmt, steps.replace(" ", ""), layers.replace(" ", ""))


def _expand(terms: str, n: int, what: str, rule: Rule) -> list[int]:
    if terms == "*":
        return list(range(n))
    out: set[int] = set()
    for term in terms.split(","):
        single, lo, hi, side, count, pct = _TERM.match(term).groups()  # type: ignore[union-attr]
        if single is not None:
            lo = hi = single
        if side:
            _check_count(term, side, int(count), bool(pct), n, what, rule)
            k = max(1, round(int(count) * n / 100)) if pct else int(count)
            ids = range(k) if side == "first" else range(n - k, n)
        else:
            a, b = int(lo), int(hi)
            if a > b:
                raise FsbenchError(f"schedule rule '{rule}': range {term} runs backwards")
            if b >= n:
                raise FsbenchError(f"schedule rule '{rule}': {what} {b} is out of range; this run has {n} {what}s "
                                   f"(0-{n - 1})")
            ids = range(a, b + 1)
        out.update(ids)
    return sorted(out)


def _check_count(term: str, side: str, count: int, percent: bool, n: int, what: str, rule: Rule) -> None:
    """A firstN/lastN term selects 1 to n of the run's n steps (layers), a percent term at most 100% of them: past
    that it would silently mean all of them, or none."""
    if percent and count > 100:
        raise FsbenchError(f"schedule rule '{rule}': {term} is more than all of this run's {n} {what}s; use at most "
                           f"{side}100% (or *)")
    if not percent and not 1 <= count <= n:
        problem = "selects none" if count == 0 else "runs past the last one"
        raise FsbenchError(f"schedule rule '{rule}': {term} {problem}; this run has {n} {what}s: use "
                           f"{side}1 to {side}{n}, * for all, or a percent such as {side}15%")


def _ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    parts: list[str] = []
    start = prev = ids[0]
    for cur in ids[1:] + [-1]:
        if cur != prev + 1:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = cur
        prev = cur
    return ",".join(parts)
