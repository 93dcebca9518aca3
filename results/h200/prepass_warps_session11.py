"""Session 11 probe: the K (Q's kernel, one scale per tile) and V prepass kernels at num_warps 4, 8 (committed)
and 16, timed alone with CUDA events (median of 15) at (1,40,75600,128) BSHD views, outputs compared bit for bit
with num_warps 8. Ran at tree bf0c474, 14:36 UTC, from the repository root with `source scripts/device_env.sh`:
`python3 results/h200/prepass_warps_session11.py OUT.json` -> prepass_warps_session11.json. Run it at that
commit: 62cb000 changed the Q/K kernel's arguments (TILES, a 16-bit Hadamard matrix)."""
import json
import statistics
import sys

import torch

from kernels import triton_attention as ta
from kernels import triton_prepass as pre
from kernels.bench import time_ms

b, h, s, d = 1, 40, 75600, 128
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn((b, s, h, d), device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2) for _ in range(3))
opts = ta.parse_options("mxfp8", {})
rows = 128
nq = -(-s // rows)
elem = pre.ELEMENT["mxfp8"]
emax, mbits, maxn, shift = pre.ELEMENT_PARAMS[elem]
had = ta._hadamard_pm1(d, q.device)
res = {}
ref = None
for warps in (8, 4, 16):
    out = torch.empty(b * h, nq * rows, d, dtype=torch.float8_e4m3fn, device="cuda")
    sc = torch.empty(b * h, nq, device="cuda")
    vo = torch.empty(b * h, d, nq * rows, dtype=torch.float8_e4m3fn, device="cuda")
    vs = torch.empty(b * h, nq, device="cuda")
    ts = torch.ones(1, device="cuda")
    consts = dict(D=d, ROWS=rows, ELEM=elem, EMAX=emax, MBITS=mbits, MAXN=maxn, SHIFT=shift, ORDER=1, num_warps=warps)

    def qk():
        pre.quantize_qk_kernel[(nq, b * h)](k, out, sc, had, *k.stride(), h, s, nq * rows, nq, 1.0, ROTATE=True,
                                             PER_ROW=False, **consts)

    def vv():
        pre.quantize_v_kernel[(nq, b * h)](v, vo, vs, ts, *v.stride(), h, s, nq * rows, nq, PER_TENSOR=True, **consts)

    t_qk = statistics.median(time_ms(lambda: qk(), [()], 3, 15))
    t_v = statistics.median(time_ms(lambda: vv(), [()], 3, 15))
    same = None
    if ref is None:
        ref = (out.clone(), sc.clone(), vo.clone())
    else:
        same = bool(torch.equal(out.view(torch.uint8), ref[0].view(torch.uint8)) and torch.equal(sc, ref[1])
                    and torch.equal(vo.view(torch.uint8), ref[2].view(torch.uint8)))
    res[warps] = {"k_quantize_ms": round(t_qk, 4), "v_quantize_ms": round(t_v, 4), "identical_to_8": same}
    print(warps, res[warps], flush=True)
json.dump(res, open(sys.argv[1], "w"), indent=1)
