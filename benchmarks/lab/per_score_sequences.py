#!/usr/bin/env python3
"""Candidate sm_90 sequences for the fused mxfp8 policy's per-score work, one thread's 64 scores (two rows of 32),
written as PTX, assembled by Triton's bundled ptxas for sm_90a and counted from the SASS (no GPU). Each candidate
takes the float32 scores and ends with P packed as E4M3 and each row's maximum:

- float: the row maximum on the float32 scores (FMNMX), then per score the clamping FFMA with P's scale in its
  addend, the rounding add and the shift that makes the BF16 pattern a float32, and one e4m3x2 convert per pair;
- bits: Stage-A first on the frozen maximum's addend, the row maximum on the sums' bits (chained integer maxima,
  three inputs each), and one multiply-add per score that moves the pattern to P's scale and makes it a float32
  (the route the Gluon kernel takes);
- packed-f32: Stage-A first, two patterns per register (PRMT), the maximum by u16x2 maxima, P's scale as a
  packed 16-bit subtract with a floor, back to float32 by PRMT;
- packed-f16: as packed-f32, but the subtract also rebiases the BF16 patterns by 112 doublings, so one shift by 3
  makes them f16x2 and the f16x2 -> e4m3x2 convert narrows them;
- packed-f16-frozen-scale: packed-f16 without the subtract, as if P's scale were fixed per row by the frozen
  maximum (not the emulator's definition: P is scaled per row and key tile).

usage: python3 benchmarks/lab/per_score_sequences.py [--json OUT.json]
"""
from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import tempfile

import click

N = 64  # scores per thread: a math warpgroup's 64 x 128 tile over 128 threads
P_BASE_F32 = "0f43400000"  # 192.0


def _kernel(name: str, body: list[str], outputs: list[str]) -> str:
    loads = [f"ld.global.f32 s{i}, [a+{4 * i}];" for i in range(N)]
    stores = [f"st.global.b32 [a+{2048 + 4 * i}], {r};" for i, r in enumerate(outputs)]
    return "\n".join([
        ".version 8.4", ".target sm_90a", ".address_size 64", f".visible .entry {name}(.param .u64 pa) {{",
        ".reg .f32 s<64>; .reg .f32 t<64>; .reg .b32 c<64>; .reg .b32 h<32>; .reg .b16 q<32>; .reg .b32 o<16>;",
        ".reg .b32 m<8>; .reg .f32 fm<8>; .reg .b64 a; .reg .f32 sl, cp0, cp1; .reg .b32 ep0, ep1, z;",
        "ld.param.u64 a, [pa]; mov.b32 z, 0;", *loads,
        "ld.global.f32 sl, [a+1000]; ld.global.f32 cp0, [a+1004]; ld.global.f32 cp1, [a+1008];",
        "ld.global.b32 ep0, [a+1012]; ld.global.b32 ep1, [a+1016];", *body, *stores, "}"])


def _tree(op: str, values: list[str], temps: list[str], out: str) -> list[str]:
    """A balanced tree of two-input `op` over values into `out`, its inner results in `temps`."""
    lines, spare = [], iter(temps)
    while len(values) > 1:
        nxt = []
        for i in range(0, len(values) - 1, 2):
            dest = out if len(values) == 2 else next(spare)
            lines.append(f"{op} {dest}, {values[i]}, {values[i + 1]};")
            nxt.append(dest)
        values = nxt + ([values[-1]] if len(values) % 2 else [])
    return lines


def _pack_e4m3(sources: list[str], op: str) -> list[str]:
    lines = [op.format(q=f"q{j}", hi=sources[2 * j + 1], lo=sources[2 * j]) for j in range(len(sources) // 2)]
    return lines + [f"mov.b32 o{j}, {{q{2 * j}, q{2 * j + 1}}};" for j in range(16)]


def _stage_a() -> list[str]:
    """The clamping FFMA and the rounding add per score; c holds the sums' bits."""
    return [f"fma.rn.sat.f32 t{i}, s{i}, sl, {('cp0', 'cp1')[i // 32]}; add.f32 t{i}, t{i}, {P_BASE_F32}; "
            f"mov.b32 c{i}, t{i};" for i in range(N)]


def float_route() -> str:
    body = []
    for row in range(2):
        body += _tree("max.f32", [f"s{row * 32 + i}" for i in range(32)], [f"t{row * 32 + k}" for k in range(31)],
                      f"fm{row}")
    body += ["st.global.f32 [a+3000], fm0; st.global.f32 [a+3004], fm1;"]
    body += _stage_a() + [f"shl.b32 c{i}, c{i}, 16;" for i in range(N)]
    body += _pack_e4m3([f"c{i}" for i in range(N)], "cvt.rn.satfinite.e4m3x2.f32 {q}, {hi}, {lo};")
    return _kernel("float_route", body, [f"o{j}" for j in range(16)])


def bits_route() -> str:
    body = _stage_a()
    for row in range(2):  # chains of two-input maxima, which ptxas fuses into VIMNMX3
        acc = f"c{row * 32}"
        for i in range(1, 32):
            dest = f"m{row}"
            body.append(f"max.s32 {dest}, {acc}, c{row * 32 + i};")
            acc = dest
        body.append(f"st.global.b32 [a+{3000 + 4 * row}], m{row};")
    body += [f"mad.lo.s32 c{i}, c{i}, 65536, {'ep0' if i < 32 else 'ep1'};" for i in range(N)]
    body += _pack_e4m3([f"c{i}" for i in range(N)], "cvt.rn.satfinite.e4m3x2.f32 {q}, {hi}, {lo};")
    return _kernel("bits_route", body, [f"o{j}" for j in range(16)])


def packed_route(narrow: str, subtract: bool = True) -> str:
    body = _stage_a() + [f"prmt.b32 h{j}, c{2 * j}, c{2 * j + 1}, 0x5410;" for j in range(32)]
    for row in range(2):
        body += _tree("max.u16x2", [f"h{row * 16 + j}" for j in range(16)], [f"c{row * 16 + k}" for k in range(15)],
                      f"m{row}")
        body.append(f"st.global.b32 [a+{3000 + 4 * row}], m{row};")
    if subtract:  # pattern - 128 e_p (ep holds it twice, negated), floor 0
        body += [f"add.s16x2 h{j}, h{j}, {'ep0' if j < 16 else 'ep1'}; max.s16x2 h{j}, h{j}, z;" for j in range(32)]
    if narrow == "f32":
        body += [f"prmt.b32 c{2 * j}, h{j}, 0, 0x1044; prmt.b32 c{2 * j + 1}, h{j}, 0, 0x3244;" for j in range(32)]
        body += _pack_e4m3([f"c{i}" for i in range(N)], "cvt.rn.satfinite.e4m3x2.f32 {q}, {hi}, {lo};")
    else:
        body += [f"shl.b32 h{j}, h{j}, 3;" for j in range(32)]
        body += [f"cvt.rn.satfinite.e4m3x2.f16x2 q{j}, h{j};" for j in range(32)]
        body += [f"mov.b32 o{j}, {{q{2 * j}, q{2 * j + 1}}};" for j in range(16)]
    name = f"packed_{narrow}" + ("" if subtract else "_frozen_scale")
    return _kernel(name, body, [f"o{j}" for j in range(16)])


CANDIDATES = {"float": float_route, "bits": bits_route, "packed-f32": lambda: packed_route("f32"),
              "packed-f16": lambda: packed_route("f16"),
              "packed-f16-frozen-scale": lambda: packed_route("f16", subtract=False)}
_MOVES = re.compile(r"(LDG|STG|LDC|ULDC|EXIT|BRA|NOP|S2R|S2UR)$")  # the harness's loads and stores


def count(ptx: str, workdir: str, name: str) -> collections.Counter:
    """Opcodes of the assembled candidate, less its loads and stores."""
    import triton

    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    src, cubin = os.path.join(workdir, f"{name}.ptx"), os.path.join(workdir, f"{name}.cubin")
    with open(src, "w") as f:
        f.write(ptx)
    subprocess.run([os.path.join(tools, "ptxas"), "-arch=sm_90a", "-O3", src, "-o", cubin], check=True)
    sass = subprocess.run([os.path.join(tools, "cuobjdump"), "-sass", cubin], check=True, capture_output=True,
                          text=True).stdout
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)
    return collections.Counter(op for op in ops if not _MOVES.match(op.split(".")[0]))


@click.command(help=__doc__)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write the counts here")
def main(json_path: str | None) -> None:
    import triton

    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, build in CANDIDATES.items():
            ops = count(build(), work, name.replace("-", "_"))
            total = sum(ops.values())
            rows.append({"candidate": name, "instructions": total, "per_score": total / N,
                         "opcodes": dict(sorted(ops.items()))})
            print(f"{name:<26}{total:>5}{total / N:>7.2f} per score  {dict(sorted(ops.items()))}")
    if json_path:
        from fsbench.harness.run.writer import provenance

        header = provenance("none (sm_90a PTX assembled on the CPU)",
                            program="python3 benchmarks/lab/per_score_sequences.py")
        with open(json_path, "w") as f:
            json.dump({**header, "triton_version": triton.__version__, "scores_per_thread": N, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
