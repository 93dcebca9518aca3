"""Fuzz every option and argument of the `fsbench` command tree: no generated value may end in a traceback.

How it stays fast without starting real work: each command is invoked with a *base* of cheap arguments of which at
least two are invalid in independent ways and checked before any model loads or anything is written (`run` and
`sweep`: a garbage `--latent` file, the last thing `prepare` reads, plus a missing user.conf or a bad schedule
file; `eval`/`compare`: a folder that is no run; the kernel commands: conflicting choices). Each case then sets
ONE option or argument to a generated value (negative, zero and huge integers, nan/inf and huge floats, empty and
300-character strings, path escapes, nonexistent paths, a folder, non-UTF-8, garbage JSON and garbage TOML files),
replacing its base value. A single mutation can fix at most one invalid base argument, so no case generates a
video, while the mutated value still goes through its click type, callback and every check that runs before the
remaining base error. A case passes when it exits 0, 1 or 2 with no exception other than SystemExit and no
traceback in the output. The seed is fixed (FSBENCH_FUZZ_SEED overrides it) and printed.
"""
from __future__ import annotations

import os
import random
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from fsbench.harness.cli import main

SEED = int(os.environ.get("FSBENCH_FUZZ_SEED", "1729"))
MIN_CASES = 520
ALLOWED_EXIT_CODES = {0, 1, 2}


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every leaf command under `group`, with its path of names."""
    found = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


def _files(root: Path) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    contents = {"non-utf8.txt": b"\xff\xfe\xc3\x28 not text\n", "garbage.json": b'{"shape": [1, 2', "garbage.toml":
                b"[[rule]\nformat = = 3", "garbage.pt": bytes(range(256)) * 3, "wrong-types.toml":
                b"[[rule]]\nformat = 1\nsteps = [true]\n", "list.json": b"[[], {}]"}
    for name, data in contents.items():
        (root / name).write_bytes(data)
    (root / "empty-run").mkdir(exist_ok=True)
    return {name: str(root / name) for name in (*contents, "empty-run")}


def _bases(files: dict[str, str], tmp: Path) -> dict[str, dict[str, list[str]]]:
    """Per command: option (or argument name) -> base value(s); at least two independent invalid ones where the
    command could otherwise start real work."""
    empty = files["empty-run"]
    return {
        "run": {"--latent": [files["garbage.pt"]], "--user-conf": [str(tmp / "missing.conf")]},
        "sweep": {"--latent": [files["garbage.pt"]], "--schedules": [f"bf16,{files['wrong-types.toml']}"]},
        "eval": {"run": [empty], "--metrics": ["nonsense"]},
        "compare": {"runs": [empty], "--frame": ["-1"]},
        "kernels ablation": {"--device": ["cuda"], "--formats": ["bogus"], "--shape": ["0,0,0,0"]},
        "kernels ablation-merge": {"parts": [files["garbage.json"]], "--out": [str(tmp / "merged.json")]},
        "kernels bench": {"--rows": ["no-such-row"], "--repeats": ["0"]},
        "kernels check": {"--impl": ["nope"], "--formats": ["mxfp8,mxfp8"]},
        "submission": {"--runs": [empty], "--division": ["nope"]},
        "tune": {"--budget": ["psnr<=1"], "--formats": ["bogus"], "--out": [str(tmp / "tune")]},
    }


def _values(param: click.Parameter, files: dict[str, str], rng: random.Random) -> list[str]:
    kind = param.type
    if isinstance(kind, click.Choice):
        return [str(rng.choice(kind.choices)), "not-a-choice", ""]
    if isinstance(kind, click.types.IntParamType):
        return ["-1", "0", "1", str(rng.randint(-10**12, 10**12)), str(2**63), str(-2**70), "1e3", "", "seven"]
    if isinstance(kind, click.types.FloatParamType):
        return ["nan", "inf", "-inf", "-0.5", "0", "1e300", "-1e300", f"{rng.uniform(-1e6, 1e6):.3f}", "", "x"]
    return ["", " ", "x" * 300, "../../outside", "/nonexistent/path/file.txt", "é中\u202e", ",,,", "bf16,bf16",
            "mxfp4:" + ",".join(["0"] * 120), files["empty-run"], *(files[n] for n in files if n != "empty-run")]


def _argv(path: tuple[str, ...], command: click.Command, base: dict[str, list[str]], target: click.Parameter,
          value: str | None) -> list[str]:
    """The command line: base arguments with `target` replaced by `value` (None: a flag given)."""
    chosen = dict(base)
    key = target.opts[0] if isinstance(target, click.Option) else target.name
    chosen[key] = [] if value is None else [value]
    argv = list(path)
    positional = []
    for param in command.params:
        name = param.opts[0] if isinstance(param, click.Option) else param.name
        if name not in chosen:
            continue
        if isinstance(param, click.Argument):
            positional += chosen[name]
        elif getattr(param, "is_flag", False) and value is None and name == key:
            argv.append(name)
        else:
            for item in chosen[name]:
                argv += [name, item]
    return argv + ["--", *positional] if positional else argv


@pytest.mark.slow
def test_every_option_of_the_command_tree_survives_generated_values(tmp_path, monkeypatch, capsys):
    print(f"fuzz seed {SEED} (set FSBENCH_FUZZ_SEED to replay)")
    monkeypatch.chdir(tmp_path)
    rng = random.Random(SEED)
    files = _files(tmp_path / "inputs")
    bases = _bases(files, tmp_path)
    targets = [(path, command, param) for path, command in _commands(main) for param in command.params
               if param.name != "help"]
    assert {" ".join(path) for path, _, _ in targets} >= set(bases)  # the tree still has the commands we know
    cases, failures = 0, []
    started = time.monotonic()
    while cases < MIN_CASES:
        for path, command, param in targets:
            flag = getattr(param, "is_flag", False) and not isinstance(param.type, click.Choice)
            value = None if flag else rng.choice(_values(param, files, rng))
            argv = _argv(path, command, bases.get(" ".join(path), {}), param, value)
            result = CliRunner().invoke(main, argv)
            cases += 1
            crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
            if crashed or result.exit_code not in ALLOWED_EXIT_CODES or "Traceback" in result.output:
                failures.append(f"{argv!r}: exit {result.exit_code}, {result.exception!r}\n{result.output[-400:]}")
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(f"\nfuzz seed {SEED}: {cases} cases over {len(targets)} options and arguments in {elapsed:.1f} s")
    assert not failures, f"seed {SEED}: {len(failures)} of {cases} cases crashed:\n" + "\n".join(failures[:5])
