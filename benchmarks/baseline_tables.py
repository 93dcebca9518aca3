"""The front page's baseline tables, drawn by benchmarks/render.py from committed bench JSON: our cuDNN rows at
NVIDIA's lengths beside NVIDIA's published H200 figures (`calibration`), and each headline ratio with the row it is
over named (`headline`). A source is any object with the raw file's `data` and its `device`; every figure and row
list comes from fsbench itself (`fsbench.kernels.tools.published`, `bench.BF16_ROWS`, `bench.best_rows`)."""
from __future__ import annotations

from typing import Any

from fsbench.kernels.tools import published

Rows = list[list[str]]


def _shape(shape: list[int]) -> str:
    return f"({','.join(map(str, shape))})"


def _rows(data: dict) -> list[dict]:
    """A bench JSON's rows, or a row_kernels JSON's rows (a dict by row name at one shape) in the same form."""
    rows = data["rows"]
    if isinstance(rows, dict):
        return [{"row": name, "shape": data["shape"], "kernel_tflops": r["attention_tflops"], **r}
                for name, r in rows.items()]
    return rows


def calibration(sources: list[Any]) -> tuple[list[str], Rows]:
    """Each cuDNN row at one of NVIDIA's lengths, as the call and as its kernel alone where it was profiled, beside
    NVIDIA's figure for its precision and its ratio to it (a row of another card is compared all the same: the card
    column says which). Where the row's SM clock was measured, its TFLOP/s per GHz, and that figure at the card's
    top clock beside NVIDIA's: NVIDIA gives no clock, and under a power cap the clock, not the kernel, can make the
    gap."""
    header = ["keys", "NVIDIA H200 TFLOP/s", "our row", "our (b,h,s,d), KV heads", "card, MHz", "timed as",
              "TFLOP/s", "x NVIDIA", "TFLOP/s per GHz", "at the card's top clock, x NVIDIA"]
    found = []
    for s in sources:
        top = published.max_clock_mhz(s.device)
        for r in _rows(s.data):
            kind, keys = r["row"].split("@")[0].rsplit("-", 1)[-1], r["shape"][2]
            nvidia = published.FORWARD_TFLOPS.get((kind, keys))
            if "cudnn" not in r["row"] or nvidia is None:
                continue
            clock = (r.get("back_to_back") or r.get("clock") or {}).get("clock_mhz")
            mhz = "-" if clock is None else f"{clock:.0f}"
            for timed, value in (("the call", r.get("tflops")), ("kernel alone", r.get("kernel_tflops"))):
                if value:
                    per_ghz = None if clock is None else value / (clock / 1e3)
                    scaled = "-" if per_ghz is None or top is None else (
                        f"{per_ghz * top / 1e3:.0f} at {top:.0f} MHz, {per_ghz * top / 1e3 / nvidia:.2f}x")
                    found.append(((kind, keys), [str(keys), f"{nvidia:.0f} ({kind.upper()})", f"`{r['row']}`",
                                                 f"{_shape(r['shape'])}, {r.get('kv_heads', r['shape'][1])}",
                                                 f"{s.device}, {mhz}", timed, f"{value:.1f}",
                                                 f"{value / nvidia:.2f}x",
                                                 "-" if per_ghz is None else f"{per_ghz:.1f}", scaled]))
    return header, [line for _, line in sorted(found, key=lambda f: f[0])]


def headline(sources: list[Any], ours: str = "gluon-fused-mxfp8") -> tuple[list[str], Rows]:
    """At each shape of a bench JSON, `ours` against the fastest FP8 peer and the fastest BF16 row of that run, as
    the call and as the kernel alone where profiled, each baseline named, and the BF16 rows the run did not have."""
    from fsbench.kernels.tools import bench  # torch: only where this table is drawn

    header = ["card", "shape", "timed as", f"`{ours}` TFLOP/s", "best FP8 peer, TFLOP/s", "ours over it",
              "best BF16 row, TFLOP/s", "ours over it", "BF16 rows not in the run"]
    out = []
    for s in sources:
        rows = s.data["rows"]
        absent = ", ".join(f"`{n}`" for n in bench.BF16_ROWS if all(r["row"] != n for r in rows)) or "none"
        for best in bench.best_rows(rows):
            mine = next((r for r in rows if r["row"] == ours and r["shape"] == best["shape"]), {})
            for timed, suffix, key in (("the call", "", "tflops"), ("kernel alone", "_kernel", "kernel_tflops")):
                if mine.get(key):
                    out.append([s.device, _shape(best["shape"]), timed, f"{mine[key]:.1f}",
                                *_versus(mine[key], best[f"best_fp8_peer{suffix}"]),
                                *_versus(mine[key], best[f"best_bf16{suffix}"]), absent])
    return header, out


def _versus(ours: float, best: dict | None) -> list[str]:
    """The baseline row and its TFLOP/s, and our ratio to it, saying so in bold where the baseline is faster."""
    if best is None:
        return ["not measured", "-"]
    ratio = ours / best["tflops"]
    return [f"`{best['row']}` {best['tflops']:.1f}", f"**{ratio:.2f}x: it is faster**" if ratio < 1 else
            f"{ratio:.2f}x"]
