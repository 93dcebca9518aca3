"""NVIDIA's own published cuDNN attention figures, the yardstick of `fsbench kernels bench --calibrate`.

Source: NVIDIA/cudnn-frontend, commit df73764adb98b7445b77662ce07b1ea434c8f3ee (cuDNN Frontend v1.19.0 release,
2026-03-09), file benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/llama3.1_20260227_034703.csv:
the rows with backend cudnn, attn_mask no_mask, batch_size 1, q_seqlen = kv_seqlen, num_q_heads 64, num_kv_heads 8,
head_dim_qk = head_dim_vo = 128, column fwd_tflops, on an NVIDIA H200 with cuDNN 9.19.1 (cudnn_backend_version
91901) and cudnn-frontend 1.19.0. NVIDIA's benchmark (benchmark_single_sdpa.py beside the results) times the
forward graph alone from FP8 or BF16 inputs already in place (BSHD in memory, unit FP8 scales, the softmax
statistics written as for training), as the device time of its kernels under torch.profiler, with L2 flushed
before each iteration; TFLOP/s counts 4*b*h*s_q*s_kv*d. cudnn-frontend's results hold no H100 file at that
commit, so an H100 has no published figure here.
"""
from __future__ import annotations

SOURCE = {
    "repository": "https://github.com/NVIDIA/cudnn-frontend",
    "commit": "df73764adb98b7445b77662ce07b1ea434c8f3ee",
    "path": "benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/llama3.1_20260227_034703.csv",
    "gpu": "NVIDIA H200",
    "cudnn": "9.19.1",
    "cudnn_frontend": "1.19.0",
    "timing": "the forward kernel's device time under torch.profiler, L2 flushed before each iteration",
}
HEADS, KV_HEADS, HEAD_DIM = 64, 8, 128  # Llama 3.1's attention: grouped query heads, 8 queries per KV head
SEQ_LENS = (4096, 16384, 32768)
# (precision, keys) -> forward TFLOP/s, as the CSV gives them
FORWARD_TFLOPS = {
    ("bf16", 4096): 671.0, ("bf16", 16384): 702.0, ("bf16", 32768): 693.0,
    ("fp8", 4096): 973.0, ("fp8", 16384): 1055.0, ("fp8", 32768): 1062.0,
}
# (precision, keys) -> the CSV's fwd_time_ms, from which it computed the TFLOP/s above
FORWARD_MS = {
    ("bf16", 4096): 0.819, ("bf16", 16384): 12.524, ("bf16", 32768): 50.769,
    ("fp8", 4096): 0.565, ("fp8", 16384): 8.335, ("fp8", 32768): 33.120,
}
# the most SM MHz each card runs at (NVIDIA's datasheets): a clock-normalised figure scaled to it is what the card
# would give with no power cap holding its clock down
MAX_SM_CLOCK_MHZ = {"H200": 1980.0, "H100": 1980.0}
GPUS = ("H200",)  # the GPUs the figures were measured on (matched against torch's device name)


def figure(precision: str, keys: int, device_name: str) -> float | None:
    """NVIDIA's forward TFLOP/s for `precision` ("bf16" or "fp8") at `keys` keys (as many queries) on the GPU
    `device_name` names; None where NVIDIA publishes none (another GPU, length or precision)."""
    if not any(gpu in device_name for gpu in GPUS):
        return None
    return FORWARD_TFLOPS.get((precision, keys))


def max_clock_mhz(device_name: str) -> float | None:
    """The highest SM clock of the card `device_name` names (MAX_SM_CLOCK_MHZ), None for another card."""
    return next((mhz for gpu, mhz in MAX_SM_CLOCK_MHZ.items() if gpu in device_name), None)
