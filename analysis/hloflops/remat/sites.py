"""An op as the remat rules see it: one instruction at one call site of its computation. Every
rule (hloflops.remat.pairing and the modules it asks) keys its sets by these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

from hloflops.loops.tripcount import trip_count
from hloflops.remat.names import OpNames
from hloflops.remat.values import Val
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

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


def bias_add_input(module: Module, op: SiteOp) -> Instruction | None:
    """What a remat-marked bias add adds its broadcast to: the other operand of a marked `add` of
    exactly one broadcast (None for any other op)."""
    if not op.marked or op.inst.opcode != "add" or len(op.inst.operands) != 2:
        return None
    comp = module.by_name[op.key[0]]
    operands = [comp.by_name.get(name) for name in op.inst.operands]
    if any(inst is None for inst in operands) or sum(inst.opcode == "broadcast" for inst in operands) != 1:
        return None
    return next(inst for inst in operands if inst.opcode != "broadcast")


def fusion_callers(module: Module) -> dict[str, list[tuple[Computation, Instruction]]]:
    """The fusion instructions calling each fused computation, with the computations holding them."""
    callers: dict[str, list[tuple[Computation, Instruction]]] = {}
    for comp, inst in module.instructions():
        if inst.opcode == "fusion":
            for callee in inst.called(CallRole.FUSION):
                callers.setdefault(callee, []).append((comp, inst))
    return callers


def fusion_call_counts(module: Module) -> dict[str, int]:
    """How many fusion instructions call each fused computation."""
    counts: dict[str, int] = {}
    for _, inst in module.instructions():
        if inst.opcode == "fusion":
            for callee in inst.called(CallRole.FUSION):
                counts[callee] = counts.get(callee, 0) + 1
    return counts


def value_readers(module: Module) -> dict[Key, list[Instruction]]:
    """Each value's readers: (computation, name) -> the instructions reading it, in text order."""
    readers: dict[Key, list[Instruction]] = {}
    for comp, inst in module.instructions():
        for operand in inst.operands:
            readers.setdefault((comp.name, operand), []).append(inst)
    return readers


def source_op(module: Module, callers: Mapping[str, tuple[Computation, Instruction] | None],
              by_key: Mapping[SiteKey, SiteOp], comp: Computation, name: str, site: int,
              passes: Callable[[Instruction], bool], depth: int) -> SiteOp | None:
    """The op whose value an operand is (`source_value`), at call site `site`."""
    source = source_value(module, callers, comp, name, passes, depth)
    return None if source is None else by_key.get((source[0].name, source[1].name, site))


def source_value(module: Module, callers: Mapping[str, tuple[Computation, Instruction] | None],
                 comp: Computation, name: str, passes: Callable[[Instruction], bool],
                 depth: int) -> tuple[Computation, Instruction] | None:
    """The instruction whose value an operand is, with its computation: through the instructions
    `passes` lets by (views), a fusion's parameter to its call site's operand (`callers`:
    `one_call_site`), and into a fusion from its root (an output of a multi-output fusion through
    its tuple); None past `depth` steps or where a fusion has several call sites."""
    while depth:
        depth -= 1
        inst = comp.by_name.get(name)
        if inst is None:
            return None
        if passes(inst) and inst.operands:
            name = inst.operands[0]
        elif inst.opcode in FUSION_BOUNDARY:
            step = across_fusion_boundary(module, callers, comp, inst)
            if step is None:
                return None
            comp, name = step
        else:
            return comp, inst
    return None


# Where a walk to a value's source crosses a fusion's boundary (`across_fusion_boundary`).
FUSION_BOUNDARY = frozenset({"parameter", "fusion", "get-tuple-element"})


def across_fusion_boundary(module: Module, callers: Mapping[str, tuple[Computation, Instruction] | None],
                           comp: Computation, inst: Instruction) -> tuple[Computation, str] | None:
    """One step of a walk to a value's source across a fusion's boundary: a fused parameter to its
    call site's operand (`callers`: `one_call_site`), a fusion (or an output of a multi-output
    fusion) to its root (its tuple's element). None where the walk cannot go on: an unfused
    parameter, a fusion called from several sites, a tuple-shaped value."""
    if inst.opcode == "parameter":
        caller = callers.get(comp.name)
        number = parameter_number(inst)
        if caller is None or not 0 <= number < len(caller[1].operands):
            return None
        return caller[0], caller[1].operands[number]
    producer = inst if inst.opcode == "fusion" else comp.by_name.get(inst.operands[0])
    if producer is None or producer.opcode != "fusion":
        return None
    callee = module.by_name[producer.called(CallRole.FUSION)[0]]
    root = callee.root
    if inst.opcode == "get-tuple-element" and root.opcode == "tuple":
        return callee, root.operands[int(inst.attributes.get("index", "0"))]
    if root.opcode != "tuple" and inst.opcode == "fusion":
        return callee, root.name
    return None


def backward_loop_bodies(module: Module, op_names: OpNames) -> Iterator[tuple[int, Computation]]:
    """(trips, body) of each backward `while` of a known two trips or more: the loops whose
    residuals a scan's program without remat reads back from stacks, one slice per trip."""
    for comp, inst in module.instructions():
        if inst.opcode != "while" or phase(op_names.of(comp.name, inst)) != "backward":
            continue
        trips = trip_count(module, comp, inst).value
        bodies = inst.called(CallRole.WHILE_BODY)
        if trips and trips >= 2 and bodies:
            yield trips, module.by_name[bodies[0]]
