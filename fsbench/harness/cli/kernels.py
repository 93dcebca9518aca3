"""`fsbench kernels ...`: proxy table, ablation, benchmark and kernel check."""
from __future__ import annotations

import json
from pathlib import Path

import click

from fsbench.errors import FsbenchError
from fsbench.files import atomic_write_text
from fsbench.harness.cli import params
from fsbench.harness.run.writer import provenance
from fsbench.kernels import registry

MAX_ABLATION_SCORES = 2**30  # B*H*S*S: the emulator holds the full score matrix


@click.group()
def kernels() -> None:
    """Attention kernels: proxy-table, ablation, bench, check, sass."""


@kernels.command("proxy-table")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
def proxy_table(as_json: bool) -> None:
    """Paper Table 8: what each Schraudolph proxy width costs, computed."""
    from fsbench.kernels.reference.schraudolph import proxy_table as compute

    rows = compute()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return

    def cell(value, fmt):
        return "-" if value is None else format(value, fmt)

    click.echo(f"{'proxy':<12}{'M':>4}{'E':>4}{'reach':>8}{'min %':>10}{'max %':>9}{'RMS %':>9}{'added %':>10}")
    for r in rows:
        reach = "-" if r["reach_log2"] is None else f"2^{r['reach_log2']}"
        click.echo(f"{r['proxy']:<12}{cell(r['M'], 'd'):>4}{cell(r['E'], 'd'):>4}{reach:>8}{r['min_pct']:>10.3f}"
                   f"{r['max_pct']:>9.3f}{r['rms_pct']:>9.3f}{cell(r['added_pct'], '.3f'):>10}")


@kernels.command()
@click.option("--shape", default="1,1,1024,128", show_default=True, callback=params.shape,
              help="B,H,S,D of the normal inputs.")
@click.option("--seeds", default=1, show_default=True, type=click.IntRange(min=1), help="Inputs to average over.")
@click.option("--first-seed", default=0, show_default=True, type=click.IntRange(min=0),
              help="Seed of the first input (to add seeds to an earlier run with ablation-merge).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--formats", default="bf16,mxfp8,mxfp6,mxfp4", show_default=True, callback=params.comma_list(),
              help="Columns to run.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
@click.option("--out", type=params.OutPath(dir_okay=False),
              help="Also write the JSON to this file (after every seed).")
def ablation(shape: tuple[int, int, int, int], seeds: int, first_seed: int, device: str, formats: tuple[str, ...],
             as_json: bool, out: Path | None) -> None:
    """Paper Table 4: error of each Fused-Softmax component, on the emulator."""
    import torch

    from fsbench.harness.run import progress
    from fsbench.kernels.tools.ablation import FORMATS, ROWS, format_ablation, run_ablation

    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available here")
    dims, columns = shape, formats
    if dims[0] * dims[1] * dims[2] ** 2 > MAX_ABLATION_SCORES:
        raise click.BadParameter(f"B*H*S*S is {dims[0] * dims[1] * dims[2] ** 2:.3g}; the emulator holds the "
                                 f"scores, at most {MAX_ABLATION_SCORES:.3g}", param_hint="--shape")
    unknown = sorted(set(columns) - set(FORMATS))
    if unknown or not columns:
        raise ValueError(f"--formats: unknown format(s) {unknown}; expected some of {', '.join(FORMATS)}")

    def save(partial: dict) -> None:
        if out:
            atomic_write_text(Path(out), json.dumps(partial, indent=2) + "\n")

    with progress.bar(seeds * len(columns) * len(ROWS), "ablation", "run") as bar:
        result = run_ablation(dims, seeds, device, columns, progress=lambda _: bar.update(), on_seed=save,
                              first_seed=first_seed)
    text = json.dumps(result, indent=2)
    click.echo(text if as_json else format_ablation(result))


ABLATION_KEYS = {"shape", "formats", "rows", "seeds", "device"}


@kernels.command("ablation-merge")
@click.argument("parts", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=params.OutPath(dir_okay=False), required=True, help="The merged JSON.")
def ablation_merge(parts: tuple[Path, ...], out: Path) -> None:
    """Average ablation JSONs of consecutive seed ranges (same shape and formats) into one."""
    from fsbench.kernels.tools.ablation import format_ablation, merge_ablations

    results = []
    for part in parts:
        try:
            result = json.loads(part.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise FsbenchError(f"{part}: not an ablation JSON ({e})") from e
        missing = ABLATION_KEYS - set(result) if isinstance(result, dict) else ABLATION_KEYS
        if missing:
            raise FsbenchError(f"{part}: not an ablation JSON (no {', '.join(sorted(missing))}); pass files written "
                               "by `fsbench kernels ablation --out`")
        results.append(result)
    try:
        merged = merge_ablations(results)
        text = format_ablation(merged)
    except (KeyError, IndexError, TypeError, AttributeError, ZeroDivisionError) as e:
        raise FsbenchError(f"{', '.join(map(str, parts))}: malformed ablation JSON ({type(e).__name__}: {e}); "
                           "pass files written by `fsbench kernels ablation --out`") from e
    atomic_write_text(out, json.dumps(merged, indent=2) + "\n")
    click.echo(text)


def _need_hopper() -> str:
    """The kernel commands time and check sm_90 kernels: say so in one line where there is no such GPU;
    returns the GPU's name for the provenance of what they write."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        raise click.UsageError("this command runs the Hopper kernels and needs an sm_90 CUDA GPU (H100 or H200); "
                               "none is visible here")
    return torch.cuda.get_device_name()


@kernels.command("bench")
@click.option("--shape", "shapes", multiple=True, callback=params.shape,
              help="b,h,s,d (repeatable); default (1,40,75600,128) and (1,24,32768,128)")
@click.option("--rows", "row_names", default="", help="comma-separated row names (default: all; --list shows them)")
@click.option("--list", "list_rows", is_flag=True, help="print the row names and exit (needs no GPU)")
@click.option("--repeats", default=7, show_default=True, type=params.POSITIVE_INT,
              help="timed calls per row (median reported)")
@click.option("--emulate/--no-emulate", default=True, show_default=True,
              help="also measure the emulator's error at shapes of at most 32768 keys")
@click.option("--json", "json_path", type=params.OutPath(dir_okay=False), help="write the results as JSON here")
@click.option("--markdown", "md_path", type=params.OutPath(dir_okay=False), help="write a markdown table here")
@click.option("--clock-seconds", type=params.non_negative_float(3600.0), default=0, show_default=True,
              help="then run each row back to back this long, with its SM clock, power and TFLOP/J (under the power "
                   "cap)")
@click.option("--interleave", is_flag=True,
              help="time the rows round-robin, each once per repeat, so clock drift reaches all alike (no emulator)")
@click.option("--sweep", is_flag=True,
              help="the fixed grid of shapes (4k-128k keys at 24 and 40 heads), interleaved; rows default to "
                   "gluon-fused-mxfp8, cudnn-fp8 and sdpa-cudnn-bf16")
@click.option("--calibrate", is_flag=True,
              help="NVIDIA's published configuration (64 query heads, 8 KV heads, 4k/16k/32k keys, BSHD): the "
                   "baseline rows as the call and as the kernel alone, beside NVIDIA's figures")
@click.option("--kernel-calls", type=click.IntRange(min=0), default=None,
              help="also profile this many calls of each row for its attention kernel alone "
                   "[default: 10 with --calibrate, else 0]")
@click.option("--cudnn-site", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="also run the cuDNN rows under the cuDNN unpacked in this folder (a child process; rows named "
                   "ROW@VERSION)")
def bench(shapes: tuple[tuple[int, int, int, int], ...], row_names: str, list_rows: bool, repeats: int,
          emulate: bool, json_path: Path | None, md_path: Path | None, clock_seconds: float, interleave: bool,
          sweep: bool, calibrate: bool, kernel_calls: int | None, cudnn_site: Path | None) -> None:
    """TFLOP/s and accuracy of SDPA, cuDNN BF16 and FP8, SageAttention2, FlashAttention-3 BF16 and FP8, the
    conventional FP8 and the fused Triton and Gluon kernels, and the GEMM-only skeleton, with the best BF16 row
    and FP8 peer at each shape (needs an sm_90 GPU: H100 or H200)."""
    from fsbench.kernels.tools import bench as kbench, calibrate as kcalibrate, sweep as ksweep

    if list_rows:
        for row in kbench.rows():
            click.echo(row.name + (f"  (cannot run here: it {row.missing})" if row.missing else ""))
        return

    if (sweep or calibrate) and shapes:
        raise click.BadParameter(f"{'--sweep runs its own grid' if sweep else '--calibrate runs its own shapes'} "
                                 "of shapes; leave --shape out", param_hint="--shape")
    if sweep and calibrate:
        raise click.BadParameter("--sweep and --calibrate each run their own shapes; pick one",
                                 param_hint="--calibrate")
    site = _cudnn_site(cudnn_site)
    if sweep and not row_names:
        row_names = ",".join(ksweep.ROWS)
    try:
        selected, left_out = kbench.select_rows(row_names.split(",") if row_names else None,
                                                kcalibrate.rows() if calibrate else None)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--rows") from exc
    for row in left_out:
        click.echo(f"skipping row {row.name}: it {row.missing}", err=True)
    device = _need_hopper()
    header = provenance(device)
    header["cudnn"] = _cudnn_versions()
    calls = (kcalibrate.KERNEL_CALLS if calibrate else 0) if kernel_calls is None else kernel_calls
    if sweep:
        header["sweep"] = {"seq_lens": list(ksweep.SEQ_LENS), "heads": list(ksweep.HEADS), "repeats": repeats}
    if calibrate:
        from fsbench.kernels.tools import published

        header["calibration"] = {"kv_heads": published.KV_HEADS, "published": published.SOURCE,
                                 "kernel_calls": calls}
    results: list[dict] = []

    def save() -> None:  # after every shape, so a run that is stopped keeps what it measured
        if json_path:
            atomic_write_text(Path(json_path), json.dumps({**header, "rows": results}, indent=1) + "\n")
        if md_path:
            atomic_write_text(Path(md_path), f"{kbench.format_markdown(results)}\n\n{kbench.best_markdown(results)}\n")

    shape_list = list(ksweep.GRID if sweep else kcalibrate.SHAPES if calibrate else shapes or kbench.SHAPES)
    for shape in shape_list:
        if calibrate:
            measured = kcalibrate.calibrate_shape(shape, selected, device, repeats=repeats, kernel_calls=calls,
                                                  hold=_holder(clock_seconds))
            for result in measured:
                _echo_row(result)
            results += measured
        elif sweep or interleave:  # its rows as each shape ends, the whole table once at the end
            measured = ksweep.bench_interleaved(shape, selected, repeats=repeats, hold=_holder(clock_seconds))
            for result in measured:
                _echo_row(result)
            results += measured
        else:
            results += kbench.bench_shape(shape, selected, repeats=repeats, emulate=emulate and shape[2] <= 32768,
                                          progress=_echo_row, hold=_holder(clock_seconds), kernel_calls=calls)
            click.echo(kbench.format_table(results))
        save()
    if site is not None:
        results = kbench.add_ratios(results + _under_cudnn(site, selected, shape_list, calibrate, repeats, calls))
        save()
    if sweep or interleave or calibrate or site is not None:
        click.echo(kbench.format_table(results))
    click.echo(kbench.format_best(results))


def _cudnn_versions() -> dict:
    """The cuDNN this process runs (PyTorch's and cudnn-frontend's), for the bench's JSON."""
    from fsbench.kernels.tools.cudnn_bf16 import versions

    return versions()


def _cudnn_site(site: Path | None) -> Path | None:
    """--cudnn-site checked before any GPU work: a folder holding an unpacked cuDNN wheel."""
    if site is None:
        return None
    from fsbench.kernels.tools import cudnn_env

    try:
        cudnn_env.lib_dir(site)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cudnn-site") from exc
    return site


def _under_cudnn(site: Path, selected: list, shapes: list, calibrate: bool, repeats: int, calls: int) -> list[dict]:
    """The selected cuDNN rows again, in a child bench whose environment loads the cuDNN in `site`, each renamed
    ROW@VERSION with the version the child reports; FsbenchError where it ran another cuDNN than the wheel's."""
    import os
    import subprocess
    import sys
    import tempfile

    from fsbench.kernels.tools import cudnn_env

    names = [row.name for row in selected if row.name in cudnn_env.ROWS]
    if not names:
        raise FsbenchError(f"--cudnn-site: none of the rows run cuDNN ({', '.join(cudnn_env.ROWS)})")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        argv = [sys.executable, "-m", "fsbench", "kernels", "bench", "--rows", ",".join(names), "--no-emulate",
                "--repeats", str(repeats), "--kernel-calls", str(calls), "--json", str(out)]
        argv += ["--calibrate"] if calibrate else [a for s in shapes for a in ("--shape", ",".join(map(str, s)))]
        click.echo(f"the cuDNN rows again under the cuDNN in {site}", err=True)
        done = subprocess.run(argv, env=cudnn_env.environment(site, dict(os.environ)))
        if done.returncode or not out.is_file():
            raise FsbenchError(f"the bench under the cuDNN in {site} failed (exit {done.returncode}); its output is "
                               "above")
        child = json.loads(out.read_text())
    ran = cudnn_env.dotted(child["cudnn"].get("torch_cudnn"))
    wanted = cudnn_env.wheel_version(site)
    if wanted is not None and ran != wanted:
        raise FsbenchError(f"--cudnn-site {site} holds cuDNN {wanted}, but the child bench ran cuDNN {ran}")
    return [{**row, "row": f"{row['row']}@{ran}"} for row in child["rows"]]


def _echo_row(row: dict) -> None:
    """One bench row as soon as it is measured, with its back-to-back clock where one was taken."""
    from fsbench.kernels.tools import bench as kbench

    click.echo(kbench.format_table([row]).splitlines()[-1])
    held = row.get("back_to_back")
    if held:
        per_joule = held.get("tflop_per_j")
        click.echo(f"{'':<20} back to back: {held['tflops']:.1f} TFLOP/s at {held.get('clock_mhz', float('nan')):.0f} "
                   f"MHz, {held.get('power_w', float('nan')):.0f} W"
                   + ("" if per_joule is None else f", {per_joule:.3f} TFLOP/J"))


def _holder(seconds: float):
    """The bench's `hold` hook: each row back to back for `seconds` with the GPU's clock and power sampled, and
    the TFLOP/J they give (None for 0)."""
    if not seconds:
        return None
    from fsbench.harness.measure import clocks
    from fsbench.kernels.tools.bench import tflop_per_joule

    def hold(fn, args, flops):
        held = clocks.back_to_back(fn, args, seconds, flops)
        return {**held, "tflop_per_j": tflop_per_joule(held.get("tflops"), held.get("power_w"))}
    return hold


@kernels.command("plot-sweep")
@click.argument("json_path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("png", type=click.Path(dir_okay=False, path_type=Path))
def plot_sweep(json_path: Path, png: Path) -> None:
    """TFLOP/s (and TFLOP/J, where held) against sequence length, one line per row and head count, from the JSON
    of `fsbench kernels bench --sweep --json`, drawn to PNG."""
    from fsbench.kernels.tools.sweep_plot import plot_sweep as draw

    try:
        doc = json.loads(json_path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{json_path}: not JSON ({exc})") from exc
    click.echo(f"{png}: {draw(doc, png)} lines")


@kernels.command("check")
@click.option("--formats", default="mxfp8,mxfp6,mxfp4", show_default=True, callback=params.comma_list())
@click.option("--impl", type=click.Choice(registry.HOPPER), default=registry.TRITON, show_default=True,
              help="which kernel to check")
@click.option("--json", "json_path", type=params.OutPath(dir_okay=False), help="write the rows as JSON here")
def check(formats: tuple[str, ...], impl: str, json_path: Path | None) -> None:
    """Triton or Gluon kernels vs the emulator on random, late-sink and staircase inputs (needs an sm_90 GPU)."""
    from fsbench.kernels.tools import check as kcheck

    header = provenance(_need_hopper())
    rows = kcheck.run_checks(formats, impl=impl)
    click.echo(kcheck.format_table(rows))
    if json_path:
        atomic_write_text(Path(json_path), json.dumps({**header, "rows": rows}, indent=1) + "\n")


@kernels.command("sass")
@click.option("--variants", callback=params.comma_list(),
              help="comma-separated variants (default: all of skeleton-fp8, fused-mxfp8/6/4, conventional-fp8)")
@click.option("--engine", type=click.Choice(registry.HOPPER), default=registry.GLUON, show_default=True,
              help="which kernel to compile")
@click.option("--out", default="/tmp/fsbench-sass", show_default=True, type=params.OutPath(file_okay=False),
              help="folder for each variant's .cubin and .sass")
@click.option("--json", "json_path", type=params.OutPath(dir_okay=False), help="write the counts as JSON here")
def sass(variants: tuple[str, ...] | None, engine: str, out: Path, json_path: Path | None) -> None:
    """Instructions a warp issues per key tile, by step, from the sm_90 SASS (compiled ahead of time: no GPU)."""
    from fsbench.kernels.hopper.launch import gluon_missing
    from fsbench.kernels.tools import sass as ksass

    missing = gluon_missing() if engine == registry.GLUON else None
    if missing:
        raise FsbenchError(missing)
    unknown = sorted(set(variants or ()) - set(ksass.VARIANTS))
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown)}; known: {', '.join(ksass.VARIANTS)}",
                                 param_hint="--variants")
    counts = ksass.count_variants(list(variants or ksass.VARIANTS), engine=engine, out=str(out))
    click.echo(ksass.format_table(counts))
    if json_path:
        header = provenance("none: sm_90 machine code compiled ahead of time")
        atomic_write_text(Path(json_path), json.dumps({**header, **ksass.as_json(counts, engine)}, indent=1) + "\n")
