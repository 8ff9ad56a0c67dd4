"""What the loop- and remat-aware accounting produces; the product layer (reports, CLI, batch)
reads only these types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from analysis.cost.costs import Cost
from hloparse.ir import SourceLocation

PHASES = ("forward", "backward", "other")


@dataclass(frozen=True, slots=True)
class Row:
    """One instruction: what one execution costs, how often it runs, and the product."""

    computation: str
    name: str
    opcode: str
    executions: int  # exact when every enclosing loop's trip count is known; else a lower bound
    executions_known: bool
    cost: Cost  # one execution (OpCost.cost)
    total: Cost  # cost.scaled(executions)
    fusion: str | None  # the fusion instruction this op is fused into (outermost), if any
    loop: str | None  # the innermost enclosing while instruction, if any
    remat: bool  # recomputation (counts into remat_flops)
    phase: str  # one of PHASES
    scope: str  # the op_name name stack ("" if none)
    source: SourceLocation | None
    uncounted: str | None = None  # why this op's cost is unknown, if it is
    target: str | None = None  # custom_call_target, where there is one
    note: str | None = None  # how a counted kernel was counted (attention convention, author's estimate)
    communication: int = 0  # bytes one execution sends per device (analysis.cost.communication)
    communication_uncounted: str | None = None  # why a collective's bytes are unknown, if they are

    @property
    def communication_total(self) -> int:
        return self.communication * self.executions


class RowBuilder:
    """`RowBuilder(...)` makes the same `Row` as `Row(...)` (all 18 fields, positional) about 4x
    faster: a frozen dataclass's __init__ sets each field through object.__setattr__, and a large
    module has hundreds of thousands of rows. It fills the same slots as a plain object, then
    becomes a Row (same slots, so Python allows the class change), frozen from then on."""

    __slots__ = Row.__slots__

    def __init__(self, computation: str, name: str, opcode: str, executions: int, executions_known: bool,
                 cost: Cost, total: Cost, fusion: str | None, loop: str | None, remat: bool, phase: str,
                 scope: str, source: SourceLocation | None, uncounted: str | None, target: str | None,
                 note: str | None, communication: int, communication_uncounted: str | None) -> None:
        self.computation = computation
        self.name = name
        self.opcode = opcode
        self.executions = executions
        self.executions_known = executions_known
        self.cost = cost
        self.total = total
        self.fusion = fusion
        self.loop = loop
        self.remat = remat
        self.phase = phase
        self.scope = scope
        self.source = source
        self.uncounted = uncounted
        self.target = target
        self.note = note
        self.communication = communication
        self.communication_uncounted = communication_uncounted
        self.__class__ = Row  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Loop:
    name: str  # the while instruction
    computation: str  # where the while instruction lives
    body: str
    condition: str
    trip_count: int | None  # None: unknown
    source: str  # "backend_config" | "pattern" | "evaluation" | "override" | "unknown"
    bounds: tuple[int, int | None]  # (lower, upper) on the trip count; (n, n) when known
    executions: int  # how many times the while instruction itself runs
    body_cost: Cost  # one iteration of body + condition, nested loops included, exact
    total: Cost  # everything this loop executes over the whole program
    extra_over_xla: Cost  # what XLA misses for this loop (its share of exact - xla)
    parent: str | None = None  # the enclosing loop, if nested
    note: str = ""  # e.g. why it is unknown
    scope: str = ""  # the while's op_name name stack (`.../jvp(LM)/decoder/while`)
    location: str = ""  # the while's source line (`file.py:12`), "" if the module has none
    phase: str = "other"  # forward / backward / other, from its op_name (one of PHASES)


@dataclass(frozen=True, slots=True)
class RematUnpaired:
    """An op carrying a remat marker that pairs with no op computing the same value: CSE merged
    it with its forward (nothing runs twice) or its twin was not found. Counted as model FLOPs."""

    name: str
    computation: str
    opcode: str
    flops: int  # over all its executions


@dataclass(frozen=True, slots=True)
class Uncounted:
    name: str
    opcode: str
    computation: str
    reason: str
    target: str | None = None  # custom_call_target, where there is one
    executions: int = 1


@dataclass(frozen=True)
class Accounting:
    module_name: str
    rows: tuple[Row, ...]
    loops: tuple[Loop, ...]
    uncounted: tuple[Uncounted, ...]
    total: Cost  # exact, loop-aware
    remat_flops: int
    phase_flops: Mapping[str, int]  # forward / backward / other
    xla_estimate: Mapping[str, float]  # what XLA's cost_analysis() returns for this module
    # flops - xla_estimate["flops"] by loop name; the "residual" key is what no loop explains
    # (custom-calls XLA counts as -1, float32 rounding); the values sum to the difference.
    reconciliation: Mapping[str, int] = field(default_factory=dict)
    remat_unpaired: tuple[RematUnpaired, ...] = ()

    @property
    def model_flops(self) -> int:
        return self.total.flops - self.remat_flops
