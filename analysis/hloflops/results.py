"""What the loop- and remat-aware accounting produces; the product layer (reports, CLI, batch)
reads only these types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from hloflops.cost.costs import Cost
from hloparse.ir import SourceLocation

if TYPE_CHECKING:
    from hloflops.cost.costs import OpCost
    from hloparse.ir import Instruction

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
    communication: int = 0  # bytes one execution sends per device (hloflops.cost.communication)
    communication_uncounted: str | None = None  # why a collective's bytes are unknown, if they are
    # A remat row of which only a share of the FLOPs runs because of remat: (numerator,
    # denominator) of that share (hloflops.remat.unsunk_broadcasts); None: all of them. The share
    # is negative where the program without remat runs the op more often than this one
    # (`Accounting.remat_twin_stores`).
    remat_part: tuple[int, int] | None = None

    @property
    def communication_total(self) -> int:
        return self.communication * self.executions

    @property
    def remat_flops(self) -> int:
        """The FLOPs of this row that run because of remat (all of a remat row's, but for a
        `remat_part`)."""
        if not self.remat:
            return 0
        if self.remat_part is None:
            return self.total.flops
        numerator, denominator = self.remat_part
        return self.total.flops * numerator // denominator


Place = tuple[str, int, bool, "str | None", "str | None", "frozenset[str] | set[str]", "dict[int, Cost]"]
Described = tuple[str, str, "SourceLocation | None"]
Extra = tuple["str | None", "str | None", int, "str | None"]  # target, note, communication, communication_uncounted


class RowBuilder:
    """`RowBuilder(place, instruction, op_cost, described)` makes the instruction's `Row` several
    times faster than `Row(...)`: a frozen dataclass's __init__ sets each field through
    object.__setattr__, and a large module has hundreds of thousands of rows. It fills the same
    slots as a plain object, then becomes a Row (same slots, so Python allows the class change),
    frozen from then on. The fields come grouped as the accounting knows them, so that it can
    hand over all rows to one `map`, with no Python code of its own per row:

        place      (computation, executions, executions_known, fusion, loop, remat names, totals):
                   one per computation; `remat names` are its instructions that are recomputation,
                   `totals` an empty dict to keep each distinct cost's total in (id of the Cost
                   -> its total: a loop body's thousands of ops share a few hundred Costs)
        described  (phase, scope, source): one per metadata text
        extra      (target, note, communication, communication_uncounted): what only custom-calls
                   and collectives have; (None, None, 0, None) on every other row
    """

    __slots__ = Row.__slots__

    def __init__(self, place: Place, instruction: Instruction, op_cost: OpCost, described: Described,
                 extra: Extra) -> None:
        self.computation, executions, self.executions_known, self.fusion, self.loop, remat, totals = place
        self.executions = executions
        self.name = name = instruction.name
        self.opcode = instruction.opcode
        cost = self.cost = op_cost.cost
        if executions == 1:
            self.total = cost
        else:
            total = totals.get(id(cost))
            if total is None:  # the caller holds every Cost while the rows are made: ids stay theirs
                total = totals[id(cost)] = cost.scaled(executions)
            self.total = total
        self.remat = name in remat
        self.phase, self.scope, self.source = described
        self.uncounted = op_cost.uncounted
        self.target, self.note, self.communication, self.communication_uncounted = extra
        self.remat_part = None
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
class RematHinge:
    """An op the remat split hinges on (`Accounting.remat_flops_bounds`): `counted` as remat on a
    pairing weaker than an equal value (it may be model FLOPs), or not counted though it carries
    a remat name and no rule showed it to be model FLOPs (it may be recompute). With
    `twin_copies`: a value the program without remat computes that many times more often than
    this program does (XLA copies it into more of its fusions) beyond the recomputes it offsets
    (hloflops.remat.stored_twin_copies); `flops` are those copies', by which the remat FLOPs of
    its opcode may be lower than any split of this program's ops shows."""

    name: str
    computation: str
    opcode: str
    flops: int  # over all its executions
    counted: bool
    twin_copies: int = 0
    # -1: the program without remat may run `flops` more (a weight gradient's other form: the low
    # end); +1: it may run `flops` fewer (the high end) (hloflops.remat.weight_gradient_forms).
    twin_form: int = 0


@dataclass(frozen=True, slots=True)
class RematTwinStore:
    """An op whose FLOPs the program without remat surely runs `executions` more times than this
    program does (a bf16 stack's round trips: hloflops.remat.stored_twin_copies): `flops` of them
    are taken off the remat FLOPs of its opcode (`Row.remat_part` goes below the row's own)."""

    name: str
    computation: str
    opcode: str
    executions: int
    flops: int


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
    remat_hinges: tuple[RematHinge, ...] = ()  # what `remat_flops_bounds` hinges on
    remat_twin_stores: tuple[RematTwinStore, ...] = ()  # the twin's sure extra work taken off remat FLOPs

    @property
    def model_flops(self) -> int:
        return self.total.flops - self.remat_flops

    @property
    def remat_flops_bounds(self) -> tuple[int, int]:
        """[low, high] of the remat FLOPs: `remat_flops` less the hinges counted and the twin's
        extra copies, plus the hinges not counted."""
        hinges = getattr(self, "remat_hinges", ())
        return (self.remat_flops - sum(h.flops for h in hinges if (h.counted or h.twin_copies or h.twin_form < 0)
                                       and h.twin_form <= 0),
                self.remat_flops + sum(h.flops for h in hinges if not h.counted and not h.twin_copies
                                       and h.twin_form >= 0))
