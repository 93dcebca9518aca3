"""The Hopper attention kernel in Gluon, with FA3's ping-pong: one warpgroup's softmax under the other's GEMMs.

Same numerics, operands and policies as `kernels.triton_fused` (see its docstring; on the conventional
policy the outputs matched it bit for bit on the H200); what changes is the schedule, which plain Triton
3.6 does not produce. One program holds 128 query rows in two math warpgroups of 64 rows and a TMA
warpgroup that streams K and V through a ring of STAGES slots shared by both. Each math warpgroup runs,
per key tile j,

    softmax policy of tile j -> P_j, alpha_j          while PV_{j-1} and its row sum finish on the tensor cores
    wait for PV_{j-1}; free tile j-1's slot; O = O alpha_{j-1} + PV_{j-1} in float32; P_j to shared memory
    wait for its turn; issue S_{j+1} = Q K_{j+1}^T, then PV_j = P_j V_j and its row sum; hand the turn over
    wait for S_{j+1} only

and the turns alternate between the two through two named barriers, so that the tensor cores run one
warpgroup's GEMMs while the other computes its softmax. Without them, warpgroups (or the programs sharing
an SM) fall into lock step, GEMMs beside GEMMs and softmax beside softmax:
results/h200/kernels/profile/ncu_attention.md.
In the fused policy P goes to the PV GEMM through shared memory, not registers: PV_j then runs under the
warpgroup's own next policy (FA3's intra-warpgroup overlap) without two P operands in registers beside O, PV
and S, which the 240 registers a math warpgroup gets do not hold. The conventional policy, the baseline, keeps
P in registers and waits for PV_j in its turn, which measured faster for it (A/B in results/log/).
Tile 0 (it seeds the frozen maximum) and the last, masked tile are peeled out of the loop. K and V arrive in the
prepass's "thread" key order (`prepass.KEY_ORDERS`): each quad thread holds one MX block of P per row.

The package: `ptx` (inline PTX and bit helpers), `views` (register-level reshapes and per-thread reductions),
`pipeline` (the K/V ring, the turns and their named-barrier table), `state` (the Gluon aggregates `Config`, with the
layouts worked out once, `Program`, `Tiles` and `State`), `softmax` (the policies) and `kernel` (the key-tile steps,
the math warpgroups and `attention_kernel`). With SKELETON the kernel is the measured limit of this schedule: the
same tiles, both FP8 GEMMs, the O update and the row-sum MMA, and no softmax (P = E4M3(S / 1024); the output is not
attention).
"""
