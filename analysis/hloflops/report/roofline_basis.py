"""The roofline of a module before optimization: only what no compilation avoids.

Before optimization nothing is fused (every intermediate would be charged as HBM traffic) and
CSE / DCE / the algebraic simplifier have not run, so the per-instruction sum of
`hloflops.report.roofline` is not a lower bound on the compiled program's time. On such a
module the roofline is instead

    step time >= max(mandatory compute time, mandatory memory time)

(the optimized program's per-instruction bound, sum of max(compute, memory, network), is at
least the larger of its compute sum and its memory sum, each of which holds the mandatory part).

Which module is "before optimization" (`optimization_stage`), first rule that applies:
1. the file name says `before_optimizations` / `after_optimizations` (XLA's dump names);
2. the header says `is_scheduled=true`: XLA schedules every module it compiles, so optimized;
3. any fusion instruction: fusion is an optimization pass, so optimized;
4. neither 2 nor 3, and XLA printed the module (its header carries entry_computation_layout,
   which XLA's printer always writes) or a frontend traced it (op_name metadata): before
   optimization;
5. otherwise (hand-written HLO, costed as written): optimized.

Mandatory compute (conservative, each rule a thing some pass could remove otherwise):
- only dots and convolutions of the ENTRY computation (a loop's body can be hoisted, a branch
  not taken, a called computation's result dropped: none of those are counted);
- only live ones: reached backward from ENTRY's ROOT through ops that need all of their
  operands (elementwise, dot, convolution, reduce, reshape, transpose, broadcast, convert, copy,
  concatenate, pad, tuple at the root, get-tuple-element of a tuple); never through a slice,
  gather, while, call or custom-call (whose users may need only part of a value);
- each distinct computation once (value numbering: CSE would merge the others);
- both operands must depend on an ENTRY parameter (a dot with a constant side can be folded);
- each counted as its flops minus one per output element (2K - 1 per output element: what the
  multiply-and-reduce form of a strength-reduced matrix-vector product costs);
- priced at the chip's rate for the narrowest input dtype, looking through converts (the
  compiler may fold a convert into the dot).
Mandatory memory: each ENTRY parameter read once, where a live op of the kind above reads it
whole (through reshapes, transposes, converts, copies); each ENTRY output leaf written once,
where a live computing op produces it (not a parameter passed through, a constant, an iota, an
in-place dynamic-update-slice or scatter, nor a loop's or call's result; looking through
reshapes, transposes, copies and same-type converts, which layout assignment can make free). Network: 0 (before
SPMD partitioning the collectives are not placed yet, and the simplifier drops trivial ones).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hloflops.cost.rules import ELEMENTWISE_FLOP_OPCODES, TRANSCENDENTAL_OPCODES
from hloflops.cost.shapes import elements, size
from hloparse.ir import Computation, Instruction, Module

OPTIMIZED = "optimized"
UNOPTIMIZED = "unoptimized: parameters+outputs"

_MATRIX = frozenset({"dot", "convolution"})
_SHAPE_ONLY = frozenset({"reshape", "transpose", "bitcast", "copy", "convert"})
# Ops whose result needs every element of every operand: liveness passes through them.
_NEEDS_ALL = (ELEMENTWISE_FLOP_OPCODES | TRANSCENDENTAL_OPCODES | _MATRIX | _SHAPE_ONLY
              | frozenset({"reduce", "broadcast", "concatenate", "pad"})) - frozenset({"select", "clamp"})
# Ops that read a parameter whole when they read it.
_READS_WHOLE = (ELEMENTWISE_FLOP_OPCODES | TRANSCENDENTAL_OPCODES | _MATRIX | frozenset({"reduce"})) \
    - frozenset({"select", "clamp", "convert"})
_NOT_WRITTEN = frozenset({"parameter", "constant", "iota", "dynamic-update-slice", "scatter", "get-tuple-element",
                          "while", "call", "conditional", "custom-call", "tuple", "broadcast", "bitcast"})


def optimization_stage(module: Module) -> tuple[bool, str]:
    """(before optimization?, which rule decided it): see the module docstring."""
    name = os.path.basename(module.path or "")
    if "before_optimizations" in name:
        return True, "the file name says before_optimizations"
    if "after_optimizations" in name:
        return False, "the file name says after_optimizations"
    if module.is_scheduled:
        return False, "the module is scheduled (is_scheduled=true)"
    if any(inst.opcode == "fusion" for _, inst in module.instructions()):
        return False, "the module has fusions"
    if "entry_computation_layout" in module.attributes:
        return True, "not scheduled, nothing fused, printed by XLA (entry_computation_layout)"
    if any(inst.op_name for _, inst in module.instructions()):
        return True, "not scheduled, nothing fused, traced by a frontend (op_name metadata)"
    return False, "hand-written (no schedule, no fusion, no frontend metadata): costed as written"


@dataclass(frozen=True, slots=True)
class MandatoryDot:
    name: str
    flops: int
    dtype: str  # the narrowest input dtype, through converts


@dataclass(frozen=True)
class Mandatory:
    dots: tuple[MandatoryDot, ...]
    parameter_bytes: int
    output_bytes: int

    @property
    def bytes(self) -> int:
        return self.parameter_bytes + self.output_bytes


def mandatory_work(module: Module) -> Mandatory:
    entry = module.entry
    live = _live(entry)
    from_parameter = _depends_on_parameter(entry)
    numbers = _value_numbers(entry)
    dots: dict[int, MandatoryDot] = {}
    for inst in entry.instructions:
        if inst.opcode not in _MATRIX or inst.name not in live or len(inst.operands) < 2:
            continue
        if not all(from_parameter[o] for o in inst.operands[:2]):
            continue
        flops = max(0, _matrix_flops(module, entry, inst) - elements(inst.shape))
        key = numbers[inst.name]
        if key not in dots:
            dots[key] = MandatoryDot(inst.name, flops, _narrowest_input(entry, inst))
    return Mandatory(tuple(dots.values()), _parameter_bytes(entry, live, from_parameter), _output_bytes(entry))


def _matrix_flops(module: Module, entry: Computation, inst: Instruction) -> int:
    from hloflops.engine import own_cost

    return own_cost(module, entry, inst).cost.flops


def _live(comp: Computation) -> set[str]:
    """Instructions whose whole value the ROOT needs (see the module docstring)."""
    live: set[str] = set()
    stack = [comp.root.name]
    if comp.root.opcode == "tuple":  # the outputs themselves
        live.add(comp.root.name)
        stack = list(comp.root.operands)
    while stack:
        name = stack.pop()
        if name in live:
            continue
        live.add(name)
        inst = comp.by_name[name]
        if inst.opcode == "get-tuple-element" and comp.by_name[inst.operands[0]].opcode == "tuple":
            stack.append(comp.by_name[inst.operands[0]].operands[int(inst.attributes.get("index", "0"))])
        elif inst.opcode in _NEEDS_ALL:
            stack.extend(inst.operands)
    return live


def _depends_on_parameter(comp: Computation) -> dict[str, bool]:
    found: dict[str, bool] = {}
    for inst in _topological(comp):
        found[inst.name] = inst.opcode == "parameter" or any(found.get(o, False) for o in inst.operands)
    return found


def _topological(comp: Computation) -> list[Instruction]:
    """Operands before users, whatever the text's order."""
    done: set[str] = set()
    order: list[Instruction] = []
    for start in comp.instructions:
        stack = [(start.name, False)]
        while stack:
            name, expanded = stack.pop()
            if name in done:
                continue
            if expanded:
                done.add(name)
                order.append(comp.by_name[name])
                continue
            stack.append((name, True))
            stack.extend((o, False) for o in comp.by_name[name].operands if o not in done)
    return order


# Left out of the value key: names of called computations too, so that two reduces with equal
# reducers of different names share a number (merging more than CSE can only count less).
_IGNORED_ATTRIBUTES = frozenset({"metadata", "sharding", "frontend_attributes", "backend_config", "to_apply", "calls",
                                 "body", "condition", "branch_computations", "true_computation", "false_computation",
                                 "called_computations"})


def _value_numbers(comp: Computation) -> dict[str, int]:
    """Equal numbers for instructions CSE would merge (same opcode, shape, attributes, operands)."""
    table: dict[tuple, int] = {}
    numbers: dict[str, int] = {}
    for inst in _topological(comp):
        if inst.opcode == "parameter":
            key: tuple = ("parameter", inst.attributes.get("parameter_number"))
        else:
            attrs = tuple(sorted((k, v) for k, v in inst.attributes.items() if k not in _IGNORED_ATTRIBUTES))
            key = (inst.opcode, str(inst.shape), attrs, tuple(numbers[o] for o in inst.operands))
        numbers[inst.name] = table.setdefault(key, len(table))
    return numbers


def _narrowest_input(comp: Computation, inst: Instruction) -> str:
    dtypes = []
    for name in inst.operands[:2]:
        source = comp.by_name[name]
        while source.opcode in _SHAPE_ONLY and source.operands:
            source = comp.by_name[source.operands[0]]
        leaf = next((s for s in source.shape.leaves() if s.is_array), None)
        dtypes.append(leaf.element_type if leaf is not None else "f32")
    return min(dtypes, key=_bits)


def _bits(dtype: str) -> int:
    digits = "".join(ch for ch in dtype if ch.isdigit())
    return int(digits.split("e")[0]) if digits else 32


def _parameter_bytes(comp: Computation, live: set[str], from_parameter: dict[str, bool]) -> int:
    users: dict[str, list[Instruction]] = {}
    for inst in comp.instructions:
        for operand in inst.operands:
            users.setdefault(operand, []).append(inst)
    total = 0
    for inst in comp.instructions:
        if inst.opcode != "parameter" or not inst.shape.is_array:
            continue
        if _read_whole(inst.name, users, live, from_parameter):
            total += size(inst.shape)
    return total


def _all_from_parameters(user: Instruction, from_parameter: dict[str, bool]) -> bool:
    """Every operand but a reduce's init values depends on a parameter: `x + 0` or `x * 1`
    could be simplified to x, and a reduce over no dimensions is its operand."""
    if user.opcode == "reduce":
        half = len(user.operands) // 2
        return bool(user.attributes.get("dimensions", "{}").strip("{} ")) and all(
            from_parameter[o] for o in user.operands[:half])
    return all(from_parameter[o] for o in user.operands)


def _read_whole(name: str, users: dict[str, list[Instruction]], live: set[str],
                from_parameter: dict[str, bool]) -> bool:
    stack, seen = [name], set()
    while stack:
        value = stack.pop()
        if value in seen:
            continue
        seen.add(value)
        for user in users.get(value, ()):
            if user.name not in live:
                continue
            if user.opcode in _READS_WHOLE and _all_from_parameters(user, from_parameter):
                return True
            if user.opcode in _SHAPE_ONLY:
                stack.append(user.name)
    return False


def _may_be_a_bitcast(comp: Computation, inst: Instruction) -> bool:
    if not inst.operands or inst.opcode not in ("reshape", "bitcast", "copy", "transpose", "convert"):
        return False
    if inst.opcode != "convert":
        return True
    source = comp.by_name[inst.operands[0]].shape  # a convert to its own type is dropped
    return source.is_array and inst.shape.is_array and source.element_type == inst.shape.element_type


def _output_bytes(comp: Computation) -> int:
    root = comp.root
    leaves = root.operands if root.opcode == "tuple" else [root.name]
    total, seen = 0, set()
    for name in leaves:
        inst = origin = comp.by_name[name]
        while _may_be_a_bitcast(comp, origin):  # layout assignment can make these free: no write of their own
            origin = comp.by_name[origin.operands[0]]
        if name in seen or origin.opcode in _NOT_WRITTEN or not inst.shape.is_array:
            continue
        seen.add(name)
        total += size(inst.shape)
    return total
