"""The narrow TPU writes after a backward loop's copy the program without remat's saving fusion
makes too follows that copy (after optimization, TPU).

In a scan's backward loop body, hloflops.remat.backward_loop_copies settles a recomputed cheap
value's copies against the program without remat's saving fusions: a copy that fusion makes too
(relu's `max(h, 0)`, which that program computes once for the next layer and once more into its
residual stack) is model FLOPs, sure or in the range. TPU computes the bf16 op in f32 and narrows
its result: the op carries the type it stands for (`float_type_correction_info` in its backend
config) and its one reader is a `convert` to that narrower type, one bf16 op written as two. The
saving fusion's copy writes the residual in its own type (bf16: jax stacks the op's value), so it
narrows as this one does: the two programs run the same narrows (TPU draws 69 and 152: convert
+6,144 and +256 where the converts' counts and sizes are alike in both programs,
the op itself settled as model FLOPs, its narrow left counted by signature). The narrow takes the
op's answer, as sure as it (hloflops.remat.corrected_narrows does the same for an op a TPU rule
took out of remat for reading an offloaded residual).

Only where every forward copy of the op (unmarked, the same opcode, element count and name within
its function) reads its value widened in its fusion, as the recompute reads the stacked value: the
program without remat's saving copy then widens, computes and narrows as the recompute does (draw
69: the forward's relu reads the matmul output narrowed). Where the forward's copy reads the value
wide (the matmul's f32 output in its own fusion, TPU draw 33), so does the saving copy: the
recompute's widen runs because of remat, its narrow (counted by signature) stands for it, and the
pairing's answer stands (draw 357 as well: convert +128 left).

Only a narrow that is the op's one reader, of an elementwise cheap op (not an expensive one, whose
converts hloflops.remat.type_corrections settles), to fewer bits than the op computes in."""

from __future__ import annotations

from typing import Iterable

from hloflops.remat.corrected_narrows import corrected_op_narrows
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.remat.type_corrections import is_widen
from hloparse.ir import Module


def narrows_of_saving_copies(module: Module, ops: Iterable[SiteOp], remat: set[SiteKey],
                             copies: set[SiteKey]) -> dict[SiteKey, SiteKey]:
    """Each narrow in `remat` that is the one reader of a type-corrected cheap op in `copies` (the
    backward loop copies the program without remat's saving fusions make too, left out of
    `remat`) -> that op's key (module docstring)."""
    ops = list(ops)
    found: dict[SiteKey, SiteKey] = {}
    for op, of in corrected_op_narrows(module, ops, remat):
        if of.key in copies and of.key not in remat and _forward_copies_widen(module, ops, of):
            found[op.key] = of.key
    return found


def _tail(op_name: str) -> str:
    """The op's name within its function (`jit(relu)/max`): the forward's and the recompute's alike."""
    return "/".join(op_name.split("/")[-2:])


def _forward_copies_widen(module: Module, ops: list[SiteOp], of: SiteOp) -> bool:
    """Does every forward copy of the op (unmarked, same opcode, element count and name within its
    function) read its value widened in its fusion, as the recompute does? Then the program without
    remat's saving copy reads it so too, and its widen, op and narrow are this recompute's three.
    Where the forward reads the value wide (a matmul's f32 output in its own fusion, TPU draw 33),
    the saving copy reads it wide too: the recompute's widen runs because of remat, and its narrow,
    counted by signature, stands for it: left as the pairing had it."""
    size = _elements(of.inst.shape)
    tail = _tail(of.op_name)
    copies = [op for op in ops if not op.marked and op.inst.opcode == of.inst.opcode and op.op_name
              and _tail(op.op_name) == tail and _elements(op.inst.shape) == size]
    if not copies:
        return False
    for copy in copies:
        comp = module.by_name[copy.key[0]]
        if not any(is_widen(comp, name) for name in copy.inst.operands):
            return False
    return True


def _elements(shape) -> int:
    """How many elements a shape holds (unit dimensions aside)."""
    return int(getattr(shape, "num_elements", 0) or 0)
