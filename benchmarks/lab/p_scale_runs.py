#!/usr/bin/env python3
"""Could the PV GEMM accumulate straight into O? Only where P keeps one scale across key tiles in every row of a math
warpgroup (wgmma accumulates all 64 rows or none). On the emulator's mxfp8 operands of standard-normal inputs, P's
per-row exponent of each key tile, floor(max over the tile's row of the scores less the frozen maximum) - 7 as
`formats.quantize_p_fp8` sets it from the Stage-A P: the share of rows, and of 64-row warpgroups, whose exponent
equals the previous tile's, and how many exponents a row's span (largest less smallest, plus one). CPU, seconds.

usage: python3 benchmarks/lab/p_scale_runs.py [--shape 1,2,4096,128 ...] [--json OUT.json]
"""
from __future__ import annotations

import json
from pathlib import Path

import click

from fsbench.harness.run.writer import atomic_write_text, provenance

ROWS_PER_WARPGROUP = 64


@click.command(help=__doc__)
@click.option("--shape", "shapes", multiple=True, default=("1,2,4096,128", "1,2,16384,128"), show_default=True,
              help="b,h,s,d of the standard-normal inputs (repeatable)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write the shares here")
def main(shapes: tuple[str, ...], json_path: str | None) -> None:
    import torch

    from fsbench.kernels.reference.emulator import EmulatorOptions, quantize_operands
    from fsbench.kernels.tools.check import Case, make_inputs

    rows = []
    for shape in shapes:
        dims = tuple(int(x) for x in shape.split(","))
        q, k, v = make_inputs(Case("random", dims, {}), 0, "cpu")
        opts = EmulatorOptions()
        qh, kh, _ = quantize_operands(q, k, v, "mxfp8", opts)
        scores = (qh.flatten(0, 1) @ kh.flatten(0, 1).transpose(1, 2)).unflatten(-1, (-1, opts.tile_n))
        tile_max = scores.amax(-1)  # (heads, rows, tiles)
        exponent = torch.floor(tile_max - tile_max[..., :1]) - 7
        kept = exponent[..., 1:] == exponent[..., :-1]
        warpgroups = kept.unflatten(1, (-1, ROWS_PER_WARPGROUP)).all(2)
        values = (exponent.amax(-1) - exponent.amin(-1) + 1).float().mean().item()
        rows.append({"shape": dims, "rows_keeping_exponent": kept.float().mean().item(),
                     "warpgroups_keeping_exponent": warpgroups.float().mean().item(),
                     "exponent_values_per_row": values})
        click.echo(f"{shape:<16} rows {rows[-1]['rows_keeping_exponent']:.3f}  warpgroups "
                   f"{rows[-1]['warpgroups_keeping_exponent']:.3f}  exponents spanned per row {values:.2f}")
    if json_path:
        header = provenance("cpu", program="python3 benchmarks/lab/p_scale_runs.py")
        atomic_write_text(Path(json_path), json.dumps({**header, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
