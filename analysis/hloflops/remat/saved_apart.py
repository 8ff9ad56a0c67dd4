"""Does the program without remat compute a recompute's value again to save it for its backward?
(hloflops.remat.backward_loop_copies asks, for a value recomputed in a scan's backward loop body,
and for the backward's copies of a gradient chain, `gradient_chain_copies`.)"""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.fusion_copies import outermost_fusions
from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.op_kinds import LAYOUT_VIEWS, MATMUL_OPCODES, is_identity_rounding, shape_key
from hloflops.remat.sites import FUSION_BOUNDARY, SiteOp, across_fusion_boundary, one_call_site, source_op
from hloflops.scopes import phase
from hloparse.ir import Module

# A sum across devices of a value (a sharded contraction's partial products): no fusion holds both it
# and what reads it, so an add reading it is no matmul fusion's epilogue (`SavedApart._reads_a_loop`).
_SUMMED_ACROSS_DEVICES = frozenset({"all-reduce", "all-reduce-done", "reduce-scatter"})


class SavedApart:
    """Does the program without remat compute a recompute's value again to save it? Not where the
    forward hands its value out of a fusion: a forward value stored anyway is saved from there;
    nor where the forward computes it outside every loop (an LSTM's weights concatenated once),
    read from there. A value the forward computes only inside fusions, or not at all (jvp's
    `1 - tanh`, which only the linearization computes), it computes again in its fusion saving the
    residuals. The forward's value: its ops of an equal abstract value (the same computation of
    inputs of the same shapes); where there is none, those of its opcode and shape outside the
    backward whose name ends as the recompute's inside its checkpoint, stored only if all are (a
    name of one component, the primitive's, tells no value from another: none is matched by it)."""

    def __init__(self, module: Module, ops: list[SiteOp], fused: Mapping[str, frozenset[str]],
                 backward_loops: set[str]) -> None:
        nested = outermost_fusions(module)
        entry = module.entry.name
        self.module, self.callers = module, one_call_site(module)
        self.nested, self.fused, self.entry = nested, fused, entry
        self.users: dict[str, dict[str, list]] = {}
        self.by_key = {op.key: op for op in ops}
        self.forward: dict[object, list[SiteOp]] = {}  # abstract value -> the forward's ops
        self.by_abstract: dict[object, list[bool]] = {}
        self.by_shape: dict[tuple, list[tuple[SiteOp, bool]]] = {}
        for op in ops:
            if op.named or op.frame in backward_loops or not op.op_name or phase(op.op_name) == "backward":
                continue
            comp = op.key[0]
            stored = op.frame == entry or comp not in fused or (comp not in nested and op.inst.name in fused[comp])
            self.by_abstract.setdefault(op.abstract, []).append(stored)
            self.forward.setdefault(op.abstract, []).append(op)
            self.by_shape.setdefault((op.inst.opcode, shape_key(op.inst.shape)), []).append((op, stored))

    def computed_by_the_forward(self, op: SiteOp) -> bool:
        """Does the forward compute the value (an op of an equal abstract value, or of its name)?"""
        if self.by_abstract.get(op.abstract) or self._windowed_bias_adds(op):
            return True  # a bias add: the forward's of its shape, on a loop's product (`fused_into_matmul`)
        tail = inner_tail(op.op_name) if op.op_name else ()
        return len(tail) >= 2 and any(ends_with(twin.op_name, tail)
                                      for twin, _ in self.by_shape.get((op.inst.opcode, shape_key(op.inst.shape)), ()))

    def stores_residual(self, op: SiteOp, narrowed: bool) -> bool:
        """Does the forward store a residual's value: hand it out of every fusion computing it, as it
        is or narrowed (a layer norm's output, all-gathered in bf16 for the next matmul under tensor
        parallelism)? The program without remat saves it from there, copying no chain for it; where
        the forward only copies it into its readers' fusions (nested in each projection's matmul),
        that program's saving fusion computes its chain once more."""
        twins = self.forward.get(op.abstract)
        if not twins:
            tail = inner_tail(op.op_name) if op.op_name else ()
            twins = [twin for twin, _ in self.by_shape.get((op.inst.opcode, shape_key(op.inst.shape)), ())
                     if len(tail) >= 2 and ends_with(twin.op_name, tail)]
        return bool(twins) and all(self._handed_out(twin, narrowed) for twin in twins)

    def _handed_out(self, op: SiteOp, narrowed: bool) -> bool:
        comp = op.key[0]
        if op.frame == self.entry or comp not in self.fused:
            return True
        if comp in self.nested:
            return False
        outputs = self.fused[comp]
        if op.inst.name in outputs:
            return True
        if not narrowed:
            return False
        if comp not in self.users:
            users: dict[str, list] = {}
            for inst in self.module.by_name[comp].instructions:
                for name in inst.operands:
                    users.setdefault(name, []).append(inst)
            self.users[comp] = users
        readers = self.users[comp].get(op.inst.name, [])
        return bool(readers) and all(inst.opcode == "convert" and inst.name in outputs for inst in readers)

    def fused_into_matmul(self, op: SiteOp) -> bool:
        """Can the program without remat fuse a recomputed bias add into its matmul's output fusion?
        Where the forward's own add reads a matmul's output (through views, a policy's identity
        rounding and fusion boundaries); not where it reads a loop's (a tensor-parallel windowed
        einsum, `windowed_dot_general`, computes the product in a loop of its own: XLA copies the add
        into the fusions reading the product, those saving the residuals included). Where no forward
        op has its value number, the forward's bias adds of its shape stand for it: the recompute's
        matmul, fused in place, numbers its add apart from one reading the windowed loop's output
        (ntpu 138, nnx.scan under tensor parallelism: the twin computes the bias add in its saving
        fusion and in the next matmul's operand fusion, two copies as here). Without either in
        sight: yes."""
        twins = self.forward.get(op.abstract)
        if not twins:
            return not self._windowed_bias_adds(op)
        for twin in twins:
            comp = self.module.by_name[twin.key[0]]
            for name in twin.inst.operands:
                inst = comp.by_name.get(name)
                if inst is None or inst.opcode == "broadcast":
                    continue
                source = source_op(self.module, self.callers, self.by_key, comp, name, twin.key[2],
                                   lambda inst: inst.opcode in LAYOUT_VIEWS or is_identity_rounding(inst), 32)
                if source is not None and source.inst.opcode in MATMUL_OPCODES:
                    return True
        return False

    def _windowed_bias_adds(self, op: SiteOp) -> list[SiteOp]:
        """The forward's bias adds of the shape of a recomputed bias add (those of its layer, by name,
        where any is), where each adds the bias to a loop's output (a windowed einsum's product) or
        a sum across devices (`_reads_a_loop`); none for another op, or where one reads
        anything else (a matmul's output, or one an offload policy's copy to the host materialized
        apart: the program without remat may fuse its add into that matmul's fusion, ntpu 144)."""
        if not self._adds_a_bias(op):
            return []
        adds = [twin for twin, _ in self.by_shape.get((op.inst.opcode, shape_key(op.inst.shape)), ())
                if self._adds_a_bias(twin)]
        # Of several (two layers' bias adds of one shape, one fused into its matmul, one reading a
        # sum across devices: xtpu 412), those the recompute's name inside its checkpoint names: jax
        # re-runs the same layer, so its name says which forward add it computes again.
        tail = inner_tail(op.op_name) if op.op_name else ()
        named = [twin for twin in adds if twin.op_name and ends_with(twin.op_name, tail)] if len(tail) >= 2 else []
        adds = named or adds
        return adds if adds and all(self._reads_a_loop(twin) for twin in adds) else []

    def _reads_a_loop(self, op: SiteOp) -> bool:
        """Does the op's operand other than its broadcast come out of a `while` or of a sum across
        devices (through views and fusion boundaries)? Either stands between the matmul and the add:
        a sharded contraction's partial products all-reduced (xtpu 412, a matmul under fsdp whose
        contracted dimension is split) leave the add no matmul fusion to join, as a windowed einsum's
        loop does, and the program without remat copies it into the fusions reading the sum, its
        saving fusion's `add -> tanh -> 1 - tanh` included."""
        comp = self.module.by_name[op.key[0]]
        for name in op.inst.operands:
            inst = comp.by_name.get(name)
            if inst is None or inst.opcode == "broadcast":
                continue
            at = (comp, name)
            for _ in range(32):
                inst = at[0].by_name.get(at[1])
                if inst is None:
                    return False
                if inst.opcode in LAYOUT_VIEWS and inst.operands:
                    at = (at[0], inst.operands[0])
                    continue
                if inst.opcode == "get-tuple-element" and inst.operands:
                    source = at[0].by_name.get(inst.operands[0])
                    if source is not None and source.opcode == "while":
                        return True
                if inst.opcode in _SUMMED_ACROSS_DEVICES:
                    return True
                if inst.opcode not in FUSION_BOUNDARY:
                    return False
                step = across_fusion_boundary(self.module, self.callers, at[0], inst)
                if step is None:
                    return False
                at = step
        return False

    def _adds_a_bias(self, op: SiteOp) -> bool:
        """Is the forward op an add of a value and a broadcast of a fusion input (a bias)?"""
        if op.inst.opcode != "add" or len(op.inst.operands) != 2:
            return False
        comp = self.module.by_name[op.key[0]]
        kinds = [comp.by_name.get(name) for name in op.inst.operands]
        if any(inst is None for inst in kinds) or sum(inst.opcode == "broadcast" for inst in kinds) != 1:
            return False
        bias = next(inst for inst in kinds if inst.opcode == "broadcast")
        while bias.operands and bias.operands[0] in comp.by_name and bias.opcode in LAYOUT_VIEWS | {"broadcast"}:
            bias = comp.by_name[bias.operands[0]]
        return bias.opcode == "parameter"

    def __call__(self, op: SiteOp) -> bool:
        twins = self.by_abstract.get(op.abstract)
        if twins:
            return not any(twins)
        tail = inner_tail(op.op_name) if op.op_name else ()
        if len(tail) < 2:
            return True
        named = [stored for twin, stored in self.by_shape.get((op.inst.opcode, shape_key(op.inst.shape)), ())
                 if ends_with(twin.op_name, tail)]
        return not (named and all(named))
