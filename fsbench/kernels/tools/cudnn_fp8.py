"""NVIDIA's own FP8 attention on Hopper, the reference row `cudnn-fp8` of `fsbench kernels bench`.

cuDNN's `sdpa_fp8` through the cudnn-frontend package (optional: `pip install nvidia-cudnn-frontend`, in the
`gpu` extra), with per-tensor current scaling: one E4M3 scale per tensor from its own max |x|, the online softmax
with P in E4M3 at scale 448 (P = 1 maps to E4M3's largest value), both GEMMs on the FP8 tensor cores and an E4M3
output, which this wrapper dequantizes to BF16. The timed call includes the max reductions and casts, as the
Triton and Gluon rows include their prepass. It answers how fast NVIDIA's FP8 attention runs on the same GPU,
power cap and shapes as ours, and at what accuracy. k and v may have fewer heads than q (grouped query heads, a
divisor of q's), as in NVIDIA's own published figures (`kernels.tools.published`); `stats=True` also writes the
softmax statistics, as NVIDIA's training forward does.
"""
from __future__ import annotations

import functools
import importlib.util

import torch

from fsbench.kernels.constants import E4M3_MAX

PACKAGE = "nvidia-cudnn-frontend"
_graphs: dict[tuple, tuple] = {}  # (shapes, strides, device, stats) -> (graph, tensors, fixed, workspace, handle)


def available() -> bool:
    """Whether the cudnn-frontend package is installed (its import loads libcudnn: done only when used)."""
    return importlib.util.find_spec("cudnn") is not None


def check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, row: str = "cudnn-fp8") -> None:
    """The shapes and devices cuDNN's attention takes here: BHSD, one head dim, k and v with q's heads or a
    divisor of them, on a CUDA device."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"{row} takes 4-D (batch, heads, seq, head_dim) tensors, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    grouped = k.shape[1] > 0 and q.shape[1] % k.shape[1] == 0
    if k.shape != v.shape or q.shape[0] != k.shape[0] or not grouped or q.shape[3] != k.shape[3]:
        raise ValueError(f"{row}: q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} disagree "
                         "in batch, heads (k's must divide q's) or head_dim")
    if not (q.is_cuda and k.is_cuda and v.is_cuda):
        raise ValueError(f"{row} runs on a CUDA GPU; the tensors are not on one")
    if not available():
        raise RuntimeError(f"{row} needs the cudnn-frontend package: pip install {PACKAGE}")


def _scales(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, descale) of one tensor as (1, 1, 1, 1) float32 on its device: E4M3_MAX / max |x| and its inverse
    (1 for an all-zero tensor); no host synchronisation."""
    amax = torch.linalg.vector_norm(x, float("inf")).float()  # one pass, where abs().amax() makes two
    descale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax)).reshape(1, 1, 1, 1)
    return 1.0 / descale, descale


@functools.cache
def _elementwise() -> tuple:
    """(x, scale) -> E4M3(x * scale) and (x8, descale, dtype) -> x8 * descale, each one compiled pass: eager
    PyTorch broadcasts the (1, 1, 1, 1) scale on its slow strided path."""
    cast = torch.compile(lambda x, scale: (x.float() * scale).to(torch.float8_e4m3fn), dynamic=False)
    dequantize = torch.compile(lambda x8, descale, dtype: (x8.float() * descale).to(dtype), dynamic=False)
    return cast, dequantize


def _build(q_shape: tuple[int, ...], kv_shape: tuple[int, ...], strides: tuple[tuple[int, ...], ...],
           device: torch.device, stats: bool) -> tuple:
    """One cuDNN graph per shape and layout (building takes seconds; the bench calls it many times)."""
    import cudnn

    e4m3, fp32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    handle = cudnn.create_handle()
    graph = cudnn.pygraph(io_data_type=e4m3, intermediate_data_type=fp32, compute_data_type=fp32, handle=handle)
    q, k, v = (graph.tensor(name=n, dim=list(shape), stride=list(stride), data_type=e4m3)
               for n, shape, stride in zip("qkv", (q_shape, kv_shape, kv_shape), strides))
    scalars = {n: graph.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=fp32)
               for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")}
    o, softmax_stats, amax_s, amax_o = graph.sdpa_fp8(q=q, k=k, v=v, **scalars, generate_stats=stats,
                                                      attn_scale=q_shape[3] ** -0.5, use_causal_mask=False,
                                                      name="sdpa_fp8")
    o.set_output(True).set_dim(list(q_shape)).set_stride(list(strides[0])).set_data_type(e4m3)
    if stats:
        softmax_stats.set_output(True).set_data_type(fp32)
    for amax in (amax_s, amax_o):
        amax.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(fp32)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    workspace = torch.empty(graph.get_workspace_size(), device=device, dtype=torch.uint8)
    # what does not change between calls: P's scale and the amax outputs nobody reads
    fixed = {scalars["scale_s"]: torch.full((1, 1, 1, 1), E4M3_MAX, device=device),
             scalars["descale_s"]: torch.full((1, 1, 1, 1), 1.0 / E4M3_MAX, device=device),
             amax_s: torch.empty(1, 1, 1, 1, device=device), amax_o: torch.empty(1, 1, 1, 1, device=device)}
    if stats:  # one float per query row, written and not read
        fixed[softmax_stats] = torch.empty(*q_shape[:3], 1, device=device)
    return graph, {"q": q, "k": k, "v": v, "o": o, **scalars}, fixed, workspace, handle


def cudnn_fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, stats: bool = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v by cuDNN's FP8 attention, BHSD in, BHSD out in q's dtype; `stats` also writes
    the softmax statistics (the training forward)."""
    check(q, k, v)
    import cudnn

    (sq, dq), (sk, dk), (sv, dv) = _scales(q), _scales(k), _scales(v)
    cast, dequantize = _elementwise()
    q8, k8, v8 = cast(q, sq), cast(k, sk), cast(v, sv)
    key = (tuple(q.shape), tuple(k.shape), q8.stride(), k8.stride(), v8.stride(), q.device, stats)
    if key not in _graphs:
        _graphs[key] = _build(tuple(q.shape), tuple(k.shape), (q8.stride(), k8.stride(), v8.stride()), q.device,
                              stats)
    graph, t, fixed, workspace, handle = _graphs[key]
    out = torch.empty_like(q8)
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream(q.device).cuda_stream)
    # scale_o = E4M3_MAX / max |v|: |out| <= max |v|, each output row being a convex combination of v's rows
    graph.execute({t["q"]: q8, t["k"]: k8, t["v"]: v8, t["o"]: out, t["descale_q"]: dq, t["descale_k"]: dk,
                   t["descale_v"]: dv, t["scale_o"]: sv, **fixed}, workspace, handle=handle)
    return dequantize(out, dv, q.dtype)
