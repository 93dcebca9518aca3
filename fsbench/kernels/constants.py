"""Every constant the emulator and the Hopper kernels share, written once: the format names and the numbers.

Plain Python numbers: the emulator and the launcher use them as they are; a `@triton.jit` or `@gluon.jit`
kernel may only read globals that are constexpr, so each kernel module wraps the ones it reads
(`MAGIC = tl.constexpr(constants.MAGIC)`), which leaves the value, and so the compiled code, unchanged.
"""
from __future__ import annotations

import math
import struct

MX_FORMATS = ("mxfp8", "mxfp6", "mxfp4")  # the MX formats the emulator and the Hopper kernels compute
FORMATS = ("bf16",) + MX_FORMATS  # every format `kernels.attention` takes
LOG2E = math.log2(math.e)  # scores are scaled by sm_scale * log2(e), so the softmax is a power of two
SCHRAUDOLPH_EPSILON = 0.05798  # Schraudolph's offset: the pattern is 2^M (x + bias - epsilon)
BF16_MANTISSA_SCALE = 128.0  # 2^M of the u16 (BF16) proxy, M = 7 mantissa bits
D_BIAS = BF16_MANTISSA_SCALE * (127 - SCHRAUDOLPH_EPSILON)  # Stage-A pattern offset 2^M (bias - epsilon)
TRIP_DOUBLINGS = 32  # gate trips are counted against this cap when the gate is disabled
E4M3_MAX = 448.0  # E4M3's largest normal: the per-tensor FP8 scale is amax / E4M3_MAX

# x + MAGIC - MAGIC rounds a float32 |x| < 2^22 to an integer, ties to even (MAGIC = 1.5 * 2^23, whose ulp is 1)
MAGIC = 12582912.0
# The pattern grid (`reference.schraudolph.grid_offset`): a pattern p sits in the float32 1 - p GRID_STEP, in
# [0.5, 1] where the float32 step is GRID_STEP, so one FMA (clamped at 1 by .sat: pattern 0) rounds to it and
# ONE_BITS - bits is p (for p up to 2^23)
GRID_STEP = 2.0 ** -24
ONE_BITS = 0x3F800000  # the float32 bit pattern of 1.0
P_SAT_MAX = 0.1171875  # 7.5 * 2^-6: E2M3's largest value in the units 2^(E + 6) P of mxfp6/mxfp4 is narrowed in
TWO_M9 = 0.001953125  # 2^-9: one doubling (128 patterns) in units of 2^-16 patterns
TWO_M16 = 1.52587890625e-05  # 2^-16: the Stage-A step from the base 192 (E4M3 P)
P_BASE = 192.0  # Stage-A base in [128, 256): its float32 ulp is 2^-16, so t's integer part is P's pattern
# P_BASE's float32 bit pattern: bits(P_BASE + x 2^-16) - P_BASE_BITS = x for |x| < 2^22 (the rounding add of MAGIC
# in units of 2^-16 patterns)
P_BASE_BITS = struct.unpack("<I", struct.pack("<f", P_BASE))[0]
# E2M3 P clamps at 7.5 * 2^-6 (its largest value in E4M3 units; BF16 pattern 15856) inside the Stage-A FFMA: .sat
# caps it at 1, which a base in [1024, 2048) (step 2^-13) puts 8192 patterns above the base's: base pattern 7664
P_SAT_FLOOR = 7664
P_SAT_BASE = 1024.935546875  # 1024 + P_SAT_FLOOR * 2^-13
