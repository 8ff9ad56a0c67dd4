"""A weight shard narrowed again inside a scan's backward loop, for the recompute's gather (TPU).

hloflops.remat.regathered_narrows' mechanism across computations. Under FSDP a scanned (or
`fori_loop`) stack of weights rides the loops as a state element, one layer's shard sliced out
per trip. jax's checkpoint reads its weights through the barrier on the recompute's inputs, so the
recompute in the backward loop holds another copy of the weight: the partitioner gathers it again,
and TPU may narrow that slice (an unnamed f32 -> bf16 `convert` of the dynamic slice, read only by
the gather) to halve what the gather moves, once per trip. The program without remat has no such
copy: it gathers the stack's slices as its forward does (held-out TPU draw 475, an FSDP `fori_loop`
MLP: the twin gathers `w2` wide in both loops and narrows only `w1`'s stack once in main; this
program's forward gathers `w2` wide too, its backward loop narrows each trip's slice, convert
-5,376 with the high end below the truth -> in range).

Unsure, a range hinge: nothing in this program tells whether the program without remat would
narrow its backward's slice of the same stack the same way (XLA picks the gather's type by its
cost model, per program), so only the high end counts it. repeated_shard_narrows compares narrows
within one computation and so never sees this one: the forward's gather is in another loop body.
"""

from __future__ import annotations

from typing import Iterable

from hloflops.remat.regathered_narrows import _MOVES, _gathers, _narrows
from hloflops.remat.sites import SiteKey, SiteOp
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

# Ops that view their operand unchanged inside the slicing fusion.
_VIEWS = frozenset({"bitcast", "copy", "reshape"})


def backward_loop_shard_narrows(module: Module, ops: Iterable[SiteOp], backward_loops: set[str]) -> set[SiteKey]:
    """The unnamed narrows, directly in a backward loop body, of one trip's dynamic slice of a loop
    state element, read only by gathers (see the module's docstring)."""
    found: set[SiteKey] = set()
    for op in ops:
        inst = op.inst
        if inst.opcode != "convert" or op.op_name or not inst.operands or op.key[0] not in backward_loops:
            continue
        comp = module.by_name[op.key[0]]
        readers = comp.users.get(inst.name, ())
        if not readers or not all(_gathers(module, comp, reader) for reader in readers):
            continue
        source = comp.by_name.get(inst.operands[0])
        if source is None or not _narrows(source, inst):
            continue
        if _slices_loop_state(module, comp, source):
            found.add(op.key)
    return found


def _slices_loop_state(module: Module, comp: Computation, source: Instruction | None) -> bool:
    """Is the value (through moves) a dynamic slice, or a fusion whose root is one, of an element
    of the loop body's state?"""
    source = _back_through(comp, source, _MOVES)
    if source is None or not source.operands:
        return False
    if source.opcode == "fusion":
        if not _root_slices(module, source):
            return False
    elif source.opcode != "dynamic-slice":
        return False
    stack = _back_through(comp, comp.by_name.get(source.operands[0]), _MOVES)
    if stack is None or stack.opcode != "get-tuple-element" or not stack.operands:
        return False
    state = comp.by_name.get(stack.operands[0])
    return state is not None and state.opcode == "parameter"


def _root_slices(module: Module, fusion: Instruction) -> bool:
    """Is the fusion's root (through views) a dynamic slice of its first parameter?"""
    for name in fusion.called(CallRole.FUSION):
        called = module.by_name.get(name)
        if called is None:
            return False
        inst = _back_through(called, called.root, _VIEWS)
        if inst is None or inst.opcode != "dynamic-slice" or not inst.operands:
            return False
        first = called.by_name.get(inst.operands[0])
        # The fusion's first operand is then the sliced value, followed in its caller above.
        return first is not None and first.opcode == "parameter" and parameter_number(first) == 0
    return False


def _back_through(comp: Computation, inst: Instruction | None, kinds: frozenset[str]) -> Instruction | None:
    """The value `inst` passes on unchanged, followed back through ops of `kinds` (a few at most)."""
    for _ in range(16):
        if inst is None or inst.opcode not in kinds or not inst.operands:
            break
        inst = comp.by_name.get(inst.operands[0])
    return inst
