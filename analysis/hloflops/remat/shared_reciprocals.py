"""A recomputed reciprocal the backward shares (after optimization): model FLOPs.

XLA's simplifier turns a division by a broadcast value into a product with the broadcast
reciprocal (`a / broadcast(s) -> a * broadcast(1 / s)`, the divide on the smaller shape). The
transpose of `e / s` with respect to `e` is `ct / s`: the backward divides by the same `s`, so it
computes `1 / s` too. In the program without remat the forward computes `1 / s` for `e / s` and the
backward again, from the saved `s`, for `ct / s`. With remat the backward's own `1 / s` and the
recompute's `1 / s` read the same recomputed `s` in one loop body: XLA's CSE keeps one, under the
recompute's name. Nothing runs because of remat: both programs compute `1 / s` twice (a softmax's
sum under a scan, more draws 116, 122, 126: divide +512 per layer and step).

So a remat-named divide of a constant one (a reciprocal), paired with a forward in another loop
body, that a backward op of the checkpoint's transpose reads, named for the same division (outside
the `rematted_computation` scope, its name ending as the recompute's does inside its checkpoint,
and that with the primitive's `div`: `blocks/block/self_attn/div`), is model FLOPs. It rests on
XLA's CSE: unsure, the range's high end holds it. Where the forward runs in the same computation (a
Python loop of remat'd blocks) the program without remat's backward shares the forward's `1 / s`
instead: the recompute's runs because of remat (more draws 63, 89, 102: divide exact only so).
Unless that computation stacks a scan's residuals (a forward concatenate, along the first
dimension, of values with a leading unit dimension): a scan whose one-trip loops XLA removed
(unrolled by two over three layers, base draw 106) leaves forward and backward in one computation,
but the program without remat's backward still reads `s` through the stack's slice (or in the
stack's shape), which CSE does not merge with the forward's `s`: it computes `1 / s` itself, as in
a rolled scan. A one-step scan stacks nothing (its stack is a reshape XLA removes), and its
backward shares the forward's `1 / s` (base draws 27, 38, 79, 96, 99).
Only reciprocals: other ops of one name (flax names every `*` of a gelu `mlp/mul`) are read by the
backward's products of that name as operands of their own, not computed again; and only names that
end with the division's primitive (flax and Haiku write it: `multi_head_attention/div`), which a
reader of another primitive (`.../mul`) does not share.
"""

from __future__ import annotations

from typing import Iterable

from hloflops.remat.names import REMAT_SCOPE, OpNames, ends_with, inner_tail
from hloflops.remat.readers import computing_readers
from hloflops.remat.sites import SiteKey, SiteOp, fusion_callers
from hloparse.ir import CallRole, Computation, Instruction, Module

# jax's name of the division primitive, which ends the name of every op jax emits for one.
DIVISION = "div"
# Ops that hand a value on unchanged or spread out (the reciprocal is broadcast to the dividend);
# every tuple, not only a fusion's output (hloflops.remat.readers.computing_readers).
_HANDS_ON = frozenset({"bitcast", "reshape", "copy", "broadcast", "transpose", "tuple", "get-tuple-element"})


def shared_reciprocals(module: Module, ops: Iterable[SiteOp], remat: set[SiteKey], across: set[SiteKey],
                       op_names: OpNames) -> set[SiteKey]:
    """The remat reciprocals (`divide(1, s)`) paired with a forward in another loop body (`across`),
    or in a computation that stacks a scan's residuals, that a backward op of the same division
    reads."""
    candidates = [op for op in ops if op.key in remat and op.named and op.inst.opcode == "divide"
                  and REMAT_SCOPE in op.op_name]
    if not candidates:
        return set()
    callers = fusion_callers(module)
    stacking: dict[str, bool] = {}
    found: set[SiteKey] = set()
    for op in candidates:
        if op.key not in across:
            if op.frame not in stacking:
                stacking[op.frame] = op.frame in module.by_name and \
                    _stacks_residuals(module, module.by_name[op.frame], op_names)
            if not stacking[op.frame]:
                continue
        comp = module.by_name[op.key[0]]
        if not _is_reciprocal(comp, op.inst):
            continue
        tail = inner_tail(op.op_name)
        if not tail or tail[-1] != DIVISION:  # not named for a division
            continue
        names = (op_names.of(frame.name, reader)
                 for frame, reader in filter(None, computing_readers(module, comp, op.inst, callers, _HANDS_ON)))
        if any(REMAT_SCOPE not in name and ends_with(name, tail) for name in names):
            found.add(op.key)
    return found


def _is_reciprocal(comp: Computation, inst: Instruction) -> bool:
    operand = comp.by_name.get(inst.operands[0]) if inst.operands else None
    while operand is not None and operand.opcode == "broadcast" and operand.operands:
        operand = comp.by_name.get(operand.operands[0])
    return operand is not None and operand.opcode == "constant" and operand.shape.rank == 0 and \
        operand.attributes.get("literal", "").strip() in ("1", "1.0")


def _stacks_residuals(module: Module, comp: Computation, op_names: OpNames) -> bool:
    """Does the computation stack a scan's per-step forward values (a forward concatenate along
    the first dimension of two or more values, each with a leading unit dimension: an unrolled
    scan's residual stack, left in one computation where XLA removed a one-trip loop)?"""
    for inst in comp.instructions:
        stack, body = inst, comp
        if inst.opcode == "fusion":
            callees = inst.called(CallRole.FUSION)
            body = module.by_name.get(callees[0]) if len(callees) == 1 else None
            if body is None:
                continue
            stack = body.root
            while stack.opcode in ("bitcast", "reshape") and stack.operands and stack.operands[0] in body.by_name:
                stack = body.by_name[stack.operands[0]]
        if stack.opcode != "concatenate" or len(stack.operands) < 2 or stack.dimensions != (0,):
            continue
        if "transpose(" in op_names.of(body.name, stack):  # a backward's stack (weight gradients)
            continue
        parts = [body.by_name.get(name) for name in stack.operands]
        if all(part is not None and part.shape.rank > 0 and part.shape.dims[0] == 1 for part in parts):
            return True
    return False
