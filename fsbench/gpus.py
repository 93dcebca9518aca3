"""The GPUs a process hands to its children, one each: the i-th GPU it sees, named as CUDA_VISIBLE_DEVICES names it
(a host number or a UUID), so that a child given that value sees that GPU alone."""
from __future__ import annotations

import os

from fsbench.errors import FsbenchError


def child_gpus(count: int) -> list[str]:
    """The CUDA_VISIBLE_DEVICES values of the first `count` GPUs this process sees (0..count-1 where it is unset);
    FsbenchError where it names fewer."""
    visible = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    if not visible:
        return [str(i) for i in range(count)]
    if count > len(visible):
        raise FsbenchError(f"--gpus {count}: CUDA_VISIBLE_DEVICES={','.join(visible)} names {len(visible)}")
    return visible[:count]
