"""`AttentionStats`: what one attention call (or a sum of calls) reports beside its output."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class AttentionStats:
    """Per-call statistics. A workgroup tile is one (query tile, key tile) pair of one (batch, head).

    rollbacks counts workgroup tiles where the overflow gate fired and the frozen maximum was raised;
    gate_trips counts tiles that exceeded the gate while it was disabled (the output is then outside the
    range the kernel guarantees); overflowed is True when a non-finite value reached the output.
    """

    calls: int = 1
    key_tiles: int = 0
    workgroup_tiles: int = 0
    rollbacks: int = 0
    gate_trips: int = 0
    overflowed: bool = False

    @property
    def rollback_rate(self) -> float:
        return self.rollbacks / self.workgroup_tiles if self.workgroup_tiles else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rollback_rate": self.rollback_rate}
