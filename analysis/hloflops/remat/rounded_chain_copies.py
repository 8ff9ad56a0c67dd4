"""One recomputed value's copies in a TPU scan's backward loop that value numbering tells apart: one
computed from an f32 value, another from a fusion's bf16 rounding of it (hloflops.remat.backward_loop_copies
calls `join_rounded` on its groups of copies).

Jax computes a bf16 program's values in bf16; TPU computes their elementwise ops in f32 between
narrows and widens of its own (converts without a name) and, allowed excess precision, drops a
narrow-and-widen pair inside a fusion but not across one. A fusion handing out a value rounded to
bf16 (TPU draw 29: the gradient fusion's bias add `h`) and another computing the same chain from
that copy (gelu for the next matmul's weight gradient) thus hold copies of one jax value under
two value numbers. Read through TPU's own converts, the two chains are one expression."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site, source_op
from hloparse.ir import Module

# The cheap elementwise ops grouped as copies (hloflops.remat.backward_loop_copies' CHEAP), and the
# elementwise ops an expression is read through (a transcendental too: gelu's `tanh`).
_CHEAP = DUPLICATED - EXPENSIVE - {"convert"}
_ELEMENTWISE = DUPLICATED - {"convert"}
_VIEWS = frozenset({"bitcast", "reshape", "copy", "transpose"})


def join_rounded(module: Module, groups: dict[tuple[str, object, bool], list[SiteOp]],
                 by_key: Mapping[SiteKey, SiteOp]) -> None:
    """Join the copies of one recomputed value that TPU computes, in one fusion, from an f32 value and,
    in another, from that fusion's bf16 rounding of it handed out (TPU draw 29: gelu's chain from the
    bias add `h` in the gradient's fusion, and again for the next matmul's weight gradient from the
    bf16 `h` that fusion hands out). Jax computes `h` in bf16 once; TPU computes its ops in f32 and,
    allowed excess precision, drops the narrow-and-widen pair inside a fusion but not across one, so
    the two copies get different value numbers though they are copies of one jax value. Read
    through TPU's own converts (no name of their own), the two chains are one expression: their groups
    are joined, so the copies count as any value's copies, one of them the saving fusion's
    (hloflops.remat.backward_loop_copies)."""
    callers = one_call_site(module)
    memo: dict[SiteKey, object] = {}

    def unrounded(op: SiteOp, depth: int) -> object:
        """The op's expression, TPU's own converts read through, its leaves the value numbers."""
        if op.key in memo:
            return memo[op.key]
        key: object = op.exact
        if depth and op.inst.opcode in _ELEMENTWISE and op.named:
            comp = module.by_name[op.key[0]]
            operands = []
            for name in op.inst.operands:
                source = source_op(module, callers, by_key, comp, name, op.key[2], _tpu_rounding, 32)
                operands.append(None if source is None else unrounded(source, depth - 1))
            if None not in operands:
                key = (op.inst.opcode, op.op_name, tuple(operands))
        memo[op.key] = key
        return key

    found: dict[tuple[str, object], tuple[str, object, bool]] = {}
    for group_key in list(groups):
        frame, _, named = group_key
        if not named:
            continue
        expression = unrounded(groups[group_key][0], 64)
        if isinstance(expression, tuple) and expression and expression[0] in _CHEAP:
            target = found.setdefault((frame, expression), group_key)
            if target != group_key:
                groups[target].extend(groups.pop(group_key))


def _tpu_rounding(inst) -> bool:
    """A view, or a convert of TPU's own (without a name): its narrows and widens of a bf16 program's
    values around the f32 arithmetic it computes them in."""
    return inst.opcode in _VIEWS or (inst.opcode == "convert" and not inst.metadata.get("op_name"))
