"""The two registries every cost comes from: opcode -> rule, custom-call target -> rule.

    from hloflops.cost.registry import Charge, Ctx, register_rule

    @register_rule("my-op")
    def _my_op(ctx: Ctx) -> Charge:
        return Charge(flops=elements(ctx.shape), bytes_terms=default_bytes(ctx))

    from hloflops.cost.registry import NotCounted, register_custom_call

    @register_custom_call("__my$kernel", "my_lib.*")     # "prefix*" matches a family of targets
    def _my_kernel(ctx: Ctx) -> Cost:                     # the exact view's cost of one call
        if "dims" not in ctx.backend_config:
            raise NotCounted("no dims in backend_config")  # -> uncounted, with that reason
        return Cost(flops, 0, ctx.default_io_bytes())

A second rule for an opcode or a target already registered is refused (`ValueError`): a rule
is replaced by editing it, never by registering another one somewhere else. XLA's own view of
every custom-call (-1 flops, -1 bytes, -1 optimal seconds) is set by the `custom-call` opcode
rule; a target rule gives only the exact view.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Callable

from hloflops.cost.costs import Cost
from hloflops.cost.shapes import value_size

if TYPE_CHECKING:
    from hloparse.ir import Computation, Instruction, Module, Shape

Term = int | Fraction


@dataclass(frozen=True, slots=True)
class Applied:
    """`count` executions of an APPLIED computation (XLA: `sub_total * count`, in float32)."""

    computation: str
    count: int


# Charge and Ctx are made once per instruction: plain (not frozen) dataclasses, because a frozen
# one's __init__ costs several times more. Nobody changes one after a rule returns it.
@dataclass(slots=True)
class Charge:
    """What XLA's handler sets for one instruction, and the exact view where it differs.

    `bytes_terms` are added one by one (XLA keeps a float running sum); `applied` bodies add
    their flops/transcendentals times the count; `nested` says how a CONTROL callee's totals
    replace the instruction's own (None: no callee). `exact` / `exact_uncounted` give the exact
    view where it differs from XLA's. XLA's per-operand keys (`bytes accessed{i}{}`,
    `bytes accessedout{}`, `utilization{i}{}`) default to XLA's Preprocess (result written
    whole, each operand read whole and fully used); `io_free` says the op reads and writes
    nothing, and `keys` overrides single keys (see hloflops.xla.diagnostics).
    """

    flops: int = 0
    transcendentals: int = 0
    bytes_terms: tuple[Term, ...] = ()
    applied: tuple[Applied, ...] = ()
    nested: str | None = None
    optimal_seconds: int = 0
    exact: Cost | None = None
    exact_uncounted: str | None = None
    io_free: bool = False
    keys: tuple[tuple[str, float], ...] = ()


@dataclass(slots=True)
class Ctx:
    """One instruction as a rule sees it."""

    module: Module
    computation: Computation
    instruction: Instruction
    # flops/transcendentals of one run of a called computation, or why it cannot be costed
    callee_total: Callable[[str], Cost | str] | None = None
    # True where no view reads this instruction's bytes (inside a fusion body no caller looks
    # into): `default_bytes` then skips them.
    bytes_unread: bool = False

    @property
    def shape(self) -> Shape:
        return self.instruction.shape

    def operand_shape(self, i: int) -> Shape:
        return self.computation.by_name[self.instruction.operands[i]].shape

    def operand_shapes(self) -> tuple[Shape, ...]:
        return self.computation.operand_shapes(self.instruction)

    def operand_size(self, i: int) -> int:
        return value_size(self.computation, self.instruction.operands[i])


class NotCounted(Exception):
    """Raised by a custom-call target rule: this call's cost is not known, for this reason
    (the instruction is reported as uncounted, never counted as 0)."""


Rule = Callable[[Ctx], Charge]
CustomCallRule = Callable[[Ctx], Cost]

RULES: dict[str, Rule] = {}
OPERANDS: dict[str, int] = {}  # opcode -> how many operands its rule reads (at least)
CUSTOM_CALLS: dict[str, CustomCallRule] = {}  # exact target names
CUSTOM_CALL_PREFIXES: dict[str, CustomCallRule] = {}  # "prefix*" registrations, by prefix


def register_rule(*opcodes: str, operands: int = 0) -> Callable[[Rule], Rule]:
    """Register `fn(ctx) -> Charge` as the cost rule of each opcode (a duplicate is refused).
    `operands`: how many operands the rule reads; an instruction with fewer is malformed input
    and is reported uncounted without running the rule."""

    def register(fn: Rule) -> Rule:
        for op in opcodes:
            if op in RULES:
                raise ValueError(f"opcode {op!r} already has a cost rule ({RULES[op].__name__}); "
                                 f"refusing {fn.__name__}")
            RULES[op] = fn
            OPERANDS[op] = operands
        return fn

    return register


def register_custom_call(*targets: str) -> Callable[[CustomCallRule], CustomCallRule]:
    """Register `fn(ctx) -> Cost` as the exact cost of custom-calls to each target. A target
    ending in `*` is a prefix (the longest registered prefix wins; an exact name beats any
    prefix). `fn` raises `NotCounted(reason)` when this call cannot be costed."""

    def register(fn: CustomCallRule) -> CustomCallRule:
        for target in targets:
            table, key = (CUSTOM_CALL_PREFIXES, target[:-1]) if target.endswith("*") else (CUSTOM_CALLS, target)
            if key in table:
                raise ValueError(f"custom-call target {target!r} already has a rule ({table[key].__name__}); "
                                 f"refusing {fn.__name__}")
            table[key] = fn
        return fn

    return register


def custom_call_rule(target: str) -> CustomCallRule | None:
    """The rule registered for a custom-call target, if any."""
    fn = CUSTOM_CALLS.get(target)
    if fn is not None:
        return fn
    best = None
    for prefix in CUSTOM_CALL_PREFIXES:
        if target.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return None if best is None else CUSTOM_CALL_PREFIXES[best]


# ---- XLA's per-operand key names (what Charge.keys holds) --------------------------------------
def operand_key(i: int, index: tuple[int, ...] = ()) -> str:
    return f"bytes accessed{i}{_index(index)}"


def out_key(index: tuple[int, ...] = ()) -> str:
    return f"bytes accessedout{_index(index)}"


def utilization_key(i: int) -> str:
    return f"utilization{i}{{}}"


def _index(index: tuple[int, ...]) -> str:
    return "{" + ",".join(map(str, index)) + "}"


def ratio(a: int, b: int) -> float:
    """`1.0 * a / b` with IEEE semantics (C++ gives inf or nan for b == 0)."""
    if b == 0:
        return float("nan") if a == 0 else float("inf") * (1 if a > 0 else -1)
    return a / b
