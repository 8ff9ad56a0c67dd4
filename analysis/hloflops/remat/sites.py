"""An op as the remat rules see it: one instruction at one call site of its computation. Every
rule (hloflops.remat.pairing and the modules it asks) keys its sets by these."""

from __future__ import annotations

from dataclasses import dataclass

from hloflops.remat.values import Val
from hloparse.ir import CallRole, Computation, Instruction, Module

Key = tuple[str, str]  # (computation, instruction)
SiteKey = tuple[str, str, int]  # (computation, instruction, call site)


@dataclass(slots=True, eq=False)
class SiteOp:
    key: SiteKey
    inst: Instruction
    op_name: str
    named: bool  # carries a remat name
    marked: bool  # named, or computed from an optimization barrier's output
    order: int
    exact: Val  # its value number (hloflops.remat.values)
    abstract: Val  # its number where parameters count by shape only
    frame: str  # the computation it runs in, for a fusion's body its caller's
    inherited: bool = False  # named by its inputs (`inherit_names`), not by its own op_name


def by_number(ops: list[SiteOp], exact: bool) -> dict[object, list[SiteOp]]:
    """Ops grouped by their value number (`exact`) or their abstract number; tuple-shaped values
    are left out."""
    classes: dict[object, list[SiteOp]] = {}
    for op in ops:
        number = op.exact if exact else op.abstract
        if not isinstance(number, tuple):
            classes.setdefault(number, []).append(op)
    return classes


def one_call_site(module: Module) -> dict[str, tuple[Computation, Instruction] | None]:
    """Each fused computation's one call site (None where several fusions call it)."""
    callers: dict[str, tuple[Computation, Instruction] | None] = {}
    for comp, inst in module.instructions():
        if inst.opcode == "fusion":
            for callee in inst.called(CallRole.FUSION):
                callers[callee] = None if callee in callers else (comp, inst)
    return callers
