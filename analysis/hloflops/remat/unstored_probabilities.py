"""Softmax probabilities recomputed in a backward loop whose forward this program does not store
(after optimization, TPU only; hloflops.remat.pairing calls `unstored_probability_copies`).

Attention's probabilities `p = e / s` (`e = exp(x - max)`, `s` its sum, broadcast) feed the forward's
`p @ v`, and the backward reads `p` again (`dv = p^T @ g`, softmax's own transpose). Under a policy
that saves the matmuls' outputs but not `p` (`dots_saveable`, `nothing_saveable`), this program's
forward loop computes `p` once, inside the fusion of the `p @ v` matmul that reads it, and stores
nothing of it; the backward loop recomputes it (a remat-named divide, counted as remat against the
forward's copy in the other loop body). The program without remat must keep `p` for its backward:
its forward loop both feeds `p @ v` and writes `p` to the residual stack. XLA's instruction fusion
then either duplicates the cheap `e / s` into both consumers (the matmul's fusion and the stack's
dynamic-update-slice fusion: two forward copies, TPU utpu 183's div.348 and div.358, ntpu 131's
div.115 and div.116, so the divide's truth is 0) or computes it once in a multi-output fusion (one
copy: the recompute's divide runs because of remat). Nothing in this program tells which: its forward
has one consumer of `p` either way. So the recompute's divide is a `twin_copies` hinge of one: the
range's low end drops by one copy, the split keeps its count (never a sure share).

The sign in this program: a remat-named divide (name inside the checkpoint ending with jax's `div`)
counted as remat, in a backward loop body, whose dividend is an `exponential` in its fusion (the
softmax's numerator, not a reciprocal's constant one: hloflops.remat.shared_reciprocals); and a
forward divide of the same inner name and element count, outside every checkpoint, in another loop
body, whose value only matmuls read (through views, fusion parameters and roots): the forward does
not store `p`. A forward copy that reaches a stack, a loop's output or any other computing reader is
left alone (there this program stores `p` too, and its twin computes what it does). Of TPU draws
0-239 it fires in sixteen programs with remat: on utpu 183 and 201 the divide's count is one copy
over the truth (the twin computes `p` twice), now inside the hinge; on tpu 1, 10, 29, 49, htpu 71,
82, 85, 112, ntpu 133, 135, utpu 205, 214, 215, 234 the count equals the truth (215's twin also
computes `p` twice, but this program recomputes it twice and counts one). Both outcomes under the one
sign: a hinge, not a share. None of the sixteen is exact, so no exact draw's range widens."""

from __future__ import annotations

from typing import Mapping

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.names import REMAT_SCOPE, ends_with, inner_tail
from hloflops.remat.op_kinds import MATMUL_OPCODES
from hloflops.remat.readers import computing_readers
from hloflops.remat.sites import SiteKey, SiteOp, fusion_callers
from hloflops.scopes import phase
from hloparse.ir import Computation, Instruction, Module

# jax's name of the division primitive, which ends the name of every op jax emits for one.
_DIVISION = "div"
# Ops that hand a value on unchanged (a reshape of `p` to the matmul's operand layout, its narrowing);
# a tuple only as a fusion's output (hloflops.remat.readers.computing_readers).
_HANDS_ON = frozenset({"bitcast", "reshape", "copy", "transpose", "convert", "get-tuple-element"})


def unstored_probability_copies(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> dict[SiteKey, int]:
    """Each recomputed softmax divide counted as remat whose forward copy this program does not store
    (module docstring) -> 1: the program without remat may compute `p` once more in its forward."""
    if not is_tpu_module(module):
        return {}
    candidates = [op for op in ops if op.key in remat and op.named and op.inst.opcode == "divide"
                  and REMAT_SCOPE in op.op_name and phase(op.op_name) == "backward"
                  and inner_tail(op.op_name)[-1:] == (_DIVISION,) and _divides_exponential(module, op)]
    if not candidates:
        return {}
    forwards = [op for op in ops if op.inst.opcode == "divide" and not op.marked and op.op_name
                and REMAT_SCOPE not in op.op_name and phase(op.op_name) == "forward"]
    callers = fusion_callers(module)
    found: dict[SiteKey, int] = {}
    for op in candidates:
        tail = inner_tail(op.op_name)
        twins = [f for f in forwards if f.frame != op.frame and ends_with(f.op_name, tail)
                 and f.inst.shape.num_elements == op.inst.shape.num_elements]
        if twins and all(_only_matmuls_read(module, module.by_name[f.key[0]], f.inst, callers) for f in twins):
            found[op.key] = 1
    return found


def _divides_exponential(module: Module, op: SiteOp) -> bool:
    """Is the divide's dividend (through views) an exponential (softmax's `e`)?"""
    comp = module.by_name.get(op.key[0])
    if comp is None or not op.inst.operands:
        return False
    dividend = comp.by_name.get(op.inst.operands[0])
    while dividend is not None and dividend.opcode in ("bitcast", "reshape", "copy") and dividend.operands:
        dividend = comp.by_name.get(dividend.operands[0])
    return dividend is not None and dividend.opcode == "exponential"


def _only_matmuls_read(module: Module, comp: Computation, inst: Instruction,
                       callers: Mapping[str, list[tuple[Computation, Instruction]]]) -> bool:
    """Do only matmuls compute with the value (through the ops that hand it on, into the fusions
    that read it and out of the fusion that computes it)? A value leaving a computation that is no
    fusion's (a loop body's output) is stored: not only matmuls."""
    readers = list(computing_readers(module, comp, inst, callers, _HANDS_ON, escapes=True))
    return bool(readers) and all(r is not None and r[1].opcode in MATMUL_OPCODES for r in readers)
