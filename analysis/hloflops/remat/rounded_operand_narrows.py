"""The narrow the program without remat may make of a forward matmul's operand that this program's
matmul reads wide behind a policy's saved-residual rounding (after optimization, TPU; a hinge of
the range, never a count).

A saveable policy marks the residual it saves (a matmul's output `h`) with an identity
reduce-precision (hloflops.remat.rounding). Where the activation that the next matmul reads is a
cheap chain of `h` (relu's `max`), TPU fuses the chain into that matmul's operand fusion; in the
forward of this program the chain reads `h` through the rounding, and TPU may hand the chain's f32
result to the matmul as it is, the matmul reading it wide against a bf16 operand, while it narrows
the recompute's copy of the same chain (`max`, its unnamed `convert` to bf16, read by the weight
gradient's matmul), which reads `h` back with no rounding between. The program without remat has
no rounding: its forward's copy is the chain the recompute's is here, and TPU may narrow it as it
narrows the recompute's (TPU draw 237, an unrolled gradient accumulation of relu MLPs under
`save_only_these_names`, FSDP: twelve forward copies read wide here, each narrowed in the program
without remat, and each weight gradient's copy narrowed in both programs: convert truth -24,576
where this program's twelve recompute narrows were counted, +24,576, out of range). What XLA does
with the forward copy there is not in this program; the narrow of the recompute's copy is the
sign that TPU narrows that chain when no rounding stands in the way. So each such recompute
narrow carries two hinges: the narrow itself may be the program without remat's own (its weight
gradient's copy narrows alike: weak, not a sure count), and that program may run one narrow more
in its forward (`twin_copies`, the range's low end). A chain that is not narrowed in the
recompute either (tanh's, TPU draws 62 and 68: read wide by both matmuls, no convert in either
program) shows no sign, and nothing here fires.

Only on TPU, after optimization: a forward matmul (not named in the backward or a recompute) with
a bf16 operand, whose other operand is an f32 fusion whose root, a cheap forward op, is computed
from an identity rounding inside that fusion; and a remat-named op of the root's opcode, shape and
name inside the checkpoint whose one reader is an unnamed narrow to bf16 that a matmul reads (the
root of an operand fusion nested in the matmul's fusion). One recompute narrow per such forward
operand."""

from __future__ import annotations

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.names import REMAT_SCOPE, ends_with, inner_tail
from hloflops.remat.nested_forward_narrows import read_by_a_matmul
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, MATMUL_OPCODES, is_identity_rounding
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module

# How deep a fused chain is followed from its root down to the rounding (relu's is one step).
_DEPTH = 6


def rounded_operand_narrows(module: Module, ops: list[SiteOp], remat: set[SiteKey],
                            twin_copies: dict[SiteKey, int]) -> set[SiteKey]:
    """Adds one to `twin_copies` on each recompute narrow standing for a forward operand this
    program's matmul reads wide behind a rounding (module docstring). Returns those narrows that
    are counted (in `remat`): weak, the caller takes them out of the sure pairings."""
    if not module.is_scheduled or not is_tpu_module(module):
        return set()
    wide = _wide_rounded_operands(module)
    if not wide:
        return set()
    callers = one_call_site(module)
    narrows: list[tuple[SiteOp, Instruction]] = []  # each recompute narrow, with the op it narrows
    for op in ops:
        inst = op.inst
        if inst.opcode != "convert" or inst.op_name or len(inst.operands) != 1 \
                or str(inst.shape.element_type) != "bf16":
            continue
        comp = module.by_name[op.key[0]]
        source = comp.by_name.get(inst.operands[0])
        if source is None or REMAT_SCOPE not in source.op_name or str(source.shape.element_type) != "f32" \
                or len(comp.users.get(source.name, ())) != 1 or not _read_by_a_matmul(comp, inst, callers):
            continue
        narrows.append((op, source))
    found: set[SiteKey] = set()
    used: set[SiteKey] = set()
    for root in wide:
        for op, source in sorted(narrows, key=lambda pair: pair[0].order):
            if op.key in used or source.opcode != root.opcode or source.shape.dims != root.shape.dims \
                    or not ends_with(root.op_name, inner_tail(source.op_name)):
                continue
            used.add(op.key)
            twin_copies[op.key] = twin_copies.get(op.key, 0) + 1
            if op.key in remat:
                found.add(op.key)
            break
    return found


def _wide_rounded_operands(module: Module) -> list[Instruction]:
    """The root of each f32 operand fusion that a forward matmul reads against a bf16 operand, a
    cheap forward op computed from an identity rounding in that fusion."""
    roots: list[Instruction] = []
    for comp, inst in module.instructions():
        if inst.opcode not in MATMUL_OPCODES or len(inst.operands) != 2 or phase(inst.op_name) != "forward" \
                or REMAT_SCOPE in inst.op_name:
            continue
        operands = [comp.by_name.get(name) for name in inst.operands]
        if any(o is None for o in operands) or "bf16" not in {str(o.shape.element_type) for o in operands}:
            continue
        for operand in operands:
            callee = operand.called(CallRole.FUSION) if operand.opcode == "fusion" else ()
            if not callee or str(operand.shape.element_type) != "f32":
                continue
            body = module.by_name[callee[0]]
            root = body.root
            if root is None or root.opcode not in DUPLICATED or root.opcode in EXPENSIVE \
                    or phase(root.op_name) != "forward" or REMAT_SCOPE in root.op_name \
                    or not _from_rounding(body, root, _DEPTH):
                continue
            roots.append(root)
    return roots


def _from_rounding(comp: Computation, inst: Instruction, depth: int) -> bool:
    """Is an identity rounding on the op's operand tree in its computation?"""
    if depth <= 0:
        return False
    for name in inst.operands:
        operand = comp.by_name.get(name)
        if operand is not None and (is_identity_rounding(operand) or _from_rounding(comp, operand, depth - 1)):
            return True
    return False


def _read_by_a_matmul(comp: Computation, narrow: Instruction,
                      callers: dict[str, tuple[Computation, Instruction] | None]) -> bool:
    """Is the narrow the root of a fusion that a matmul of its caller's computation reads?"""
    if not comp.is_fusion_body or comp.root is None or comp.root.name != narrow.name:
        return False
    call = callers.get(comp.name)
    return call is not None and read_by_a_matmul(call[0], call[1].name)
