"""Residuals whose chain reads the input of a mask only the backward computes (relu's `x > 0`).

The program without remat saves relu's mask in its forward: its forward fusion of the
convolution (or matmul) and bias add must hand the mask's saving fusion either the mask or the
preactivation `x`. Where it hands out `x` (f32), XLA may fuse relu and its narrow into the fusion
saving relu's output beside the mask, reading that `x` again, rather than stack the narrowed
output the forward fusion hands out for the next layer: the forward then computes relu twice
(held-out TPU 109, 127: `max(x, 0)` in the convolution's fusion for the carry and again in the
stack's saving fusion). Where it hands out the mask, relu's output is saved from the forward's
hand-out, no copy made. This program, with remat, computes the mask only in its backward, from the
recompute's `x`, and shows neither: the saving copy is a hinge (hloflops.remat.backward_loop_copies
counts it unsure, with TPU's narrow of it: `narrows`), told apart from a residual with no such
mask (a layer norm's output handed out narrowed under tensor parallelism, TPU draws 10 and 49,
which the program without remat saves from the forward's hand-out)."""

from __future__ import annotations

from typing import Callable, Mapping

from hloflops.remat.sites import SiteKey, SiteOp, source_op
from hloparse.ir import Instruction, Module

# Ops that hand a value on unchanged, for a walk to the value a mask and a residual read: views,
# and TPU's own widens and narrows (converts without jax's name) of a value handed between fusions.
_VIEWS = frozenset({"bitcast", "reshape", "copy", "transpose"})


def _passes(inst: Instruction) -> bool:
    return inst.opcode in _VIEWS or (inst.opcode == "convert" and not inst.metadata.get("op_name"))


class UnseenMasks:
    """The values (by site key) the recompute's masks read that the forward computes no mask of:
    `shares_input(op)` asks whether a recomputed elementwise op reads one of them."""

    def __init__(self, module: Module, callers: Mapping, by_key: Mapping[SiteKey, SiteOp], ops: list[SiteOp],
                 backward_loops: set[str], computed_by_the_forward: Callable[[SiteOp], bool]) -> None:
        self.module, self.callers, self.by_key = module, callers, by_key
        self.inputs: set[SiteKey] = set()
        self.hinged: set[SiteKey] = set()  # the copies the sign made a hinge (backward_loop_copies)
        for op in ops:
            if not op.named or op.frame not in backward_loops or op.inst.opcode != "compare" \
                    or op.inst.shape.element_type != "pred" or computed_by_the_forward(op):
                continue
            for source in self._sources(op):
                self.inputs.add(source.key)

    def _sources(self, op: SiteOp) -> list[SiteOp]:
        comp = self.module.by_name[op.key[0]]
        found = []
        for name in op.inst.operands:
            inst = comp.by_name.get(name)
            if inst is None or inst.opcode in ("broadcast", "constant"):
                continue
            source = source_op(self.module, self.callers, self.by_key, comp, name, op.key[2], _passes, 32)
            if source is not None:
                found.append(source)
        return found

    def shares_input(self, op: SiteOp) -> bool:
        """Does a recomputed op read (through views and TPU's own converts) a value a mask the forward
        never computes reads?"""
        return bool(self.inputs) and any(source.key in self.inputs for source in self._sources(op))

    def narrows(self, unsure: set[SiteKey]) -> set[SiteKey]:
        """The narrows TPU writes after the hinged copies still unsure (its unnamed convert to bf16,
        each copy's only reader in its fusion, a matmul's operand): the program without remat
        narrows relu's output where it computes it, so each runs exactly when its copy does."""
        found: set[SiteKey] = set()
        for key in self.hinged & unsure:
            comp = self.module.by_name[key[0]]
            readers = [inst for inst in comp.instructions if key[1] in inst.operands]
            if len(readers) != 1:
                continue
            narrow = readers[0]
            if narrow.opcode == "convert" and not narrow.metadata.get("op_name") \
                    and narrow.shape.element_type == "bf16" and comp.by_name[key[1]].shape.element_type == "f32":
                op = self.by_key.get((key[0], narrow.name, key[2]))
                if op is not None:
                    found.add(op.key)
        return found
