"""NVIDIA's BF16 attention as NVIDIA benchmarks it: the bench row `cudnn-bf16`, and the cuDNN in use.

cuDNN's `sdpa` graph through the cudnn-frontend package (the optional package `cudnn_fp8` uses), BF16 q, k, v
and output, FP32 softmax, k and v with q's heads or a divisor of them (grouped query heads), the softmax
statistics written where `stats` is set (NVIDIA's training forward). SDPA's cuDNN backend (`sdpa-cudnn-bf16`)
runs cuDNN too, through PyTorch's own graph; this row is the graph NVIDIA's published figures time
(`kernels.tools.published`), so the two show whether PyTorch's route costs anything.
"""
from __future__ import annotations

from typing import Any

import torch

from fsbench.kernels.tools import cudnn_fp8

_graphs: dict[tuple, tuple] = {}  # (shapes, strides, device, stats) -> (graph, tensors, buffers, workspace, handle)


def _build(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, stats: bool) -> tuple:
    """One cuDNN graph per shape, layout and stats setting (building takes seconds; the bench calls it often)."""
    import cudnn

    handle = cudnn.create_handle()
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    tq, tk, tv = (graph.tensor(name=n, dim=list(t.shape), stride=list(t.stride()),
                               data_type=cudnn.data_type.BFLOAT16) for n, t in zip("qkv", (q, k, v)))
    o, softmax_stats = graph.sdpa(q=tq, k=tk, v=tv, generate_stats=stats, attn_scale=q.shape[3] ** -0.5,
                                  use_causal_mask=False, name="attention")
    out = torch.empty_like(q)
    o.set_output(True).set_dim(list(q.shape)).set_stride(list(out.stride())).set_data_type(cudnn.data_type.BFLOAT16)
    buffers = {}
    if stats:
        softmax_stats.set_output(True).set_data_type(cudnn.data_type.FLOAT)
        buffers[softmax_stats] = torch.empty(*q.shape[:3], 1, device=q.device)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    workspace = torch.empty(graph.get_workspace_size(), device=q.device, dtype=torch.uint8)
    return graph, {"q": tq, "k": tk, "v": tv, "o": o}, buffers, workspace, handle


def cudnn_bf16_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, stats: bool = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v by cuDNN's BF16 attention graph, BHSD in and out (the output takes q's strides,
    so BSHD underneath where q is); `stats` also writes the softmax statistics (the training forward)."""
    cudnn_fp8.check(q, k, v, "cudnn-bf16")
    if not q.dtype == k.dtype == v.dtype == torch.bfloat16:
        raise ValueError(f"cudnn-bf16 takes BF16 q, k and v, got {q.dtype}, {k.dtype}, {v.dtype}")
    import cudnn

    key = (tuple(q.shape), tuple(k.shape), q.stride(), k.stride(), v.stride(), q.device, stats)
    if key not in _graphs:
        _graphs[key] = _build(q, k, v, stats)
    graph, t, buffers, workspace, handle = _graphs[key]
    out = torch.empty_like(q)
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream(q.device).cuda_stream)
    graph.execute({t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: out, **buffers}, workspace, handle=handle)
    return out


def versions() -> dict[str, Any]:
    """The cuDNN this process runs: PyTorch's (`torch.backends.cudnn.version()`, as an int such as 91901), and
    where cudnn-frontend is installed, its version and the cuDNN library it reached."""
    found: dict[str, Any] = {"torch_cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available()
                             else None}
    if cudnn_fp8.available():
        import cudnn

        found["cudnn_frontend"] = cudnn.__version__
        found["cudnn_backend"] = cudnn.backend_version()
    return found
