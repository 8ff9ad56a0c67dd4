"""Judging a remat program against its twin without the remat wrapper, on every opcode.

Truth: the FLOPs that run because of remat are the program's FLOPs minus its twin's, opcode by
opcode. `judge(pair, stage)` compares hloflops' remat FLOPs per opcode with that difference.
Tolerance: loop counters only. A program with remat can run a loop counter more (the backward
loop's index of one more saved stack, an induction variable XLA did not merge): at most
`LOOP_TOLERANCE` flops per while loop of the remat program, on `add`, `subtract`, `compare`
and `select` (what a counter and its bound check compute), and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import hloparse
from hloflops.accounting import account
from tests.programs.compile import compile_program, lowered_debug_text

LOOP_TOLERANCE = 64  # flops per while loop
COUNTER_OPCODES = frozenset({"add", "subtract", "compare", "select"})
STAGES = ("after", "before")


def module_text(program, stage: str) -> str:
    if stage == "after":
        return compile_program(program)[0]
    if stage == "before":
        return lowered_debug_text(program)
    raise ValueError(stage)


def by_opcode(acc, remat: bool | None = None) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in acc.rows:
        if remat is None or r.remat == remat:
            # Remat rows count what runs because of remat (all of a row's FLOPs, but for a
            # `Row.remat_part`); the program's own totals count every FLOP.
            out[r.opcode] = out.get(r.opcode, 0) + (r.remat_flops if remat else r.total.flops)
    return {k: v for k, v in out.items() if v}


@dataclass(frozen=True)
class Verdict:
    name: str
    stage: str
    truth: dict[str, int]  # per opcode: program - twin
    reported: dict[str, int]  # per opcode: hloflops' remat FLOPs
    twin_remat: int  # remat FLOPs hloflops finds in the twin (must be 0)
    loops: int
    bounds: tuple[int, int] | None = None

    @property
    def misses(self) -> dict[str, int]:
        """reported - truth per opcode, where they differ."""
        ops = self.truth.keys() | self.reported.keys()
        return {op: self.reported.get(op, 0) - self.truth.get(op, 0) for op in sorted(ops)
                if self.reported.get(op, 0) != self.truth.get(op, 0)}

    @property
    def ok(self) -> bool:
        if self.twin_remat:
            return False
        counters = 0
        for op, miss in self.misses.items():
            if op not in COUNTER_OPCODES:
                return False
            counters += abs(miss)
        return counters <= LOOP_TOLERANCE * max(self.loops, 0)

    @property
    def in_bounds(self) -> bool:
        """Whether the report is honest where it is not exact: the truth's total lies within the
        reported `remat_flops_bounds` (a loop counter's tolerance either side), or the split is
        exact. A draw that is not `ok` but `in_bounds` is one the report says it is unsure of."""
        if self.ok:
            return True
        if self.twin_remat or self.bounds is None:
            return False
        slack = LOOP_TOLERANCE * max(self.loops, 0)
        low, high = self.bounds
        return low - slack <= sum(self.truth.values()) <= high + slack

    @property
    def attainable(self) -> bool:
        """Could a split match the truth on every opcode? Not where the program with remat runs
        fewer FLOPs of an opcode than its twin (beyond a loop counter's tolerance): XLA fused the
        two programs differently (the twin converts a bf16 value to save it, the program with remat
        does not), and remat FLOPs are never negative."""
        slack = LOOP_TOLERANCE * max(self.loops, 0)
        return all(v >= -slack for v in self.truth.values())

    @property
    def width(self) -> int:
        """How unsure the report says it is: the width of its remat bounds (0 where it is sure)."""
        return self.bounds[1] - self.bounds[0] if self.bounds else 0

    def describe(self) -> str:
        return (f"{self.name} [{self.stage}]: remat reported {sum(self.reported.values()):,}, truth "
                f"{sum(self.truth.values()):,}; per opcode reported-truth {self.misses}; twin remat "
                f"{self.twin_remat:,}; loops {self.loops}; bounds {self.bounds}")


def judge(pair, stage: str, text: Callable[[object, str], str] = module_text) -> Verdict:
    """`text` gives a program's module text at a stage: compiled (`module_text`), or read back
    from where a sweep kept it (tests/remat/text_cache.py)."""
    accs = {}
    for which, program in (("remat", pair.remat), ("plain", pair.plain)):
        module = hloparse.parse(text(program, stage))
        accs[which] = (account(module, xla={"flops": 0.0}), module)
    (remat, module), (plain, _) = accs["remat"], accs["plain"]
    total, twin = by_opcode(remat), by_opcode(plain)
    truth = {op: total.get(op, 0) - twin.get(op, 0) for op in total.keys() | twin.keys()}
    loops = sum(inst.opcode == "while" for _, inst in module.instructions())
    bounds = getattr(remat, "remat_flops_bounds", None)
    return Verdict(pair.name, stage, {k: v for k, v in truth.items() if v}, by_opcode(remat, remat=True),
                   sum(by_opcode(plain, remat=True).values()), loops, tuple(bounds) if bounds else None)
