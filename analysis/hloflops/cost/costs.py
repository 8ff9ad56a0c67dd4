"""Exact cost values. Every count is a Python int: nothing here rounds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Cost:
    flops: int = 0
    transcendentals: int = 0
    bytes_accessed: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.flops + other.flops,
            self.transcendentals + other.transcendentals,
            self.bytes_accessed + other.bytes_accessed,
        )

    def scaled(self, times: int) -> Cost:
        return Cost(self.flops * times, self.transcendentals * times, self.bytes_accessed * times)

    def as_dict(self) -> dict[str, int]:
        return {
            "flops": self.flops,
            "transcendentals": self.transcendentals,
            "bytes_accessed": self.bytes_accessed,
        }


ZERO = Cost()


@dataclass(frozen=True, slots=True)
class OpCost:
    """What one execution of one instruction costs on its own.

    For instructions that call computations under a CONTROL role (fusion, while, call,
    conditional, async), `cost` excludes the callee's instructions: those are accounted as
    instructions of their own, with their own execution counts. Reducers and comparators
    (APPLIED roles) are included, multiplied as XLA does. Inside a fusion body `bytes_accessed`
    is 0: bytes are charged at the fusion boundary, on the fusion instruction.

    `uncounted` is None when the cost is known; otherwise it says why not (the cost is then
    ZERO and the op is reported, never silently added).
    """

    cost: Cost = ZERO
    uncounted: str | None = None
