"""Whether a recompute's cast that `by_signature` pairs by signature alone is a sure recompute:
a sign in this program of what the program without remat does with the forward's copy of the
value (`StoredForwardNarrows`, `WideForwardReaders`); without one the pairing is weak.

XLA's casts carry no metadata of their own; a cast that reads a recomputed value is named by its
input (`marks.inherit_names`) and has an empty op_name, so `by_signature` finds it a twin by
signature alone: often the cast itself (the pool holds the recomputes too, and the empty name
sorts first), another marked cast, or any unnamed cast of the same shapes (another layer norm's).
Such a pairing says "this cast runs because of remat". That holds where the forward casts the
same value and stores the narrow: the program without remat reads that stored narrow in its
backward and casts nothing there (TPU draw 6: the layer norm's and residual's bf16 narrows). It
holds too where an op that needs the value in f32 reads the forward's copy (a residual add): the
program without remat keeps it wide and its backward matmul casts inside its own fusion (TPU draw
47). Where only a matmul reads the forward's copy (its cast fused into the matmul's fusion) and
nothing stores a narrow of it, the program without remat has to keep the value for its backward,
and it may keep a narrow cast once in its forward (240-299's draw 297: the attention
probabilities, narrowed once per layer in both programs, convert +8,192; 300-359's 304, +524,288;
120-179's 147, +49,152): the recompute's cast then stands in for the twin's forward cast and is
no recompute. This program alone does not say which of the two the twin did: the pairing is weak
(a hinge: remat at the reported value, model FLOPs at the low end)."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.signature import signature
from hloflops.remat.sites import SiteOp, one_call_site
from hloflops.scopes import phase
from hloparse.ir import CallRole, Instruction, Module, parameter_number


class StoredForwardNarrows:
    """The forward's unmarked ops whose value is stored, by signature (`signature.signature`):
    an output of its fusion (`fusion_copies.fused_outputs`) or an op outside every fusion. A cast
    fused into its reader (a matmul fusion's operand convert) is not stored: nothing but that
    reader sees the narrow. Nor is the backward's narrow of a gradient of the same shape (the
    probabilities' cotangent cast for its matmul) the forward's: an unnamed op is placed by what it
    reads (`_placing_name`), and so is the recompute's cast it stands for (`holds`)."""

    def __init__(self, module: Module, ops: list[SiteOp], shapes: Mapping[str, object],
                 outputs: Mapping[str, frozenset[str]]):
        self.module, self.shapes = module, shapes
        self.callers = one_call_site(module)
        self.names: dict[tuple, list[str]] = {}
        for op in ops:
            if op.marked or not (op.key[0] not in outputs or op.inst.name in outputs[op.key[0]]):
                continue
            name = op.op_name or _placing_name(module, op.key[0], op.inst, self.callers)
            if phase(name) == "forward":
                self.names.setdefault(signature(op, shapes), []).append(name)

    def holds(self, op: SiteOp) -> bool:
        """Does the forward store an op of `op`'s signature that reads what `op` reads (its
        placing name ends with the name of `op`'s input inside its checkpoint), one that no other
        recompute's cast was vouched for by? Each stored narrow stands for one recompute's: two
        layer norms' narrows recomputed where the forward stores one (240-299's draw 282, both
        named `mul`) are one sure recompute and one hinge."""
        tail = inner_tail(_placing_name(self.module, op.key[0], op.inst, self.callers))
        names = self.names.get(signature(op, self.shapes), [])
        for k, name in enumerate(names):
            if ends_with(name, tail):
                del names[k]
                return True
        return False


def _placing_name(module: Module, comp_name: str, inst: Instruction,
                  callers: Mapping[str, tuple[object, Instruction] | None]) -> str:
    """The name that places an op without one in the program: its first named operand's in its
    computation, else its fusion's call site's (XLA names a fusion after its root's producer)."""
    comp = module.by_name[comp_name]
    for name in inst.operands:
        operand = comp.by_name.get(name)
        if operand is not None and operand.op_name:
            return operand.op_name
    caller = callers.get(comp_name)
    return caller[1].op_name if caller is not None else ""


# What reads a value without widening work of its own: a matmul reads its operands in bf16 on TPU
# (its own cast), a cast narrows, a view or a tuple hands the value on.
_VIEWS = frozenset({"bitcast", "reshape", "copy", "transpose"})
_NARROW_READERS = _VIEWS | {"convert", "dot", "convolution", "tuple", "get-tuple-element", "opt-barrier",
                            "all-gather", "all-reduce", "collective-permute", "dynamic-update-slice",
                            "custom-call", "parameter", "while", "call"}


class WideForwardReaders:
    """Does the forward read a recomputed value wide (`wide`)? Where the forward's copy of the
    value a recompute narrows feeds an op that needs it in f32 (a residual add, a layer norm's
    sums), the program without remat keeps that copy wide and its backward matmul reads it with
    its cast fused in (TPU draw 47: the residual stream's adds, narrowed by the recompute for the
    weight gradient's convolution, never narrowed by the twin): the recompute's narrow is a sure
    recompute. Where only matmuls read the forward's copy, the twin may narrow it once where it
    is computed and store that for its backward (240-299's draw 297: the attention
    probabilities)."""

    def __init__(self, module: Module, ops: list[SiteOp]):
        self.module = module
        self.callers = one_call_site(module)
        self.users: dict[str, dict[str, list[Instruction]]] = {}
        self.forward: dict[tuple[str, tuple], list[SiteOp]] = {}
        for op in ops:
            if not op.marked and op.op_name and phase(op.op_name) == "forward" and not op.inst.shape.is_tuple:
                self.forward.setdefault((op.inst.opcode, tuple(op.inst.shape.dims)), []).append(op)

    def wide(self, comp_name: str, cast: Instruction) -> bool:
        comp = self.module.by_name[comp_name]
        source = comp.by_name.get(cast.operands[0]) if cast.operands else None
        if source is None or not source.op_name or source.shape.is_tuple:
            return False
        tail = inner_tail(source.op_name)
        copies = [op for op in self.forward.get((source.opcode, tuple(source.shape.dims)), ())
                  if ends_with(op.op_name, tail)]
        return any(self._read_wide(op.key[0], op.inst.name, 0) for op in copies)

    def _users(self, comp_name: str) -> dict[str, list[Instruction]]:
        found = self.users.get(comp_name)
        if found is None:
            found = self.users[comp_name] = {}
            for inst in self.module.by_name[comp_name].instructions:
                for name in set(inst.operands):
                    found.setdefault(name, []).append(inst)
        return found

    def _read_wide(self, comp_name: str, name: str, depth: int, index: int | None = None) -> bool:
        """Does an op that is no matmul, cast or view read `name` (of `comp_name`), element `index`
        of it for a tuple, wide: through views, fusion parameters, and out of a fusion to its
        readers in the caller?"""
        if depth > 8:
            return False
        comp = self.module.by_name[comp_name]
        for reader in self._users(comp_name).get(name, []):
            if reader.opcode == "get-tuple-element":
                if index is None or int(reader.attributes.get("index", "-1")) == index:
                    if self._read_wide(comp_name, reader.name, depth + 1):
                        return True
            elif index is not None:
                continue  # a tuple handed on whole: not followed
            elif reader.opcode == "tuple":
                if reader is comp.root and self._leaves(comp_name, depth, reader.operands.index(name)):
                    return True
            elif reader.opcode == "fusion":
                for callee in reader.called(CallRole.FUSION):
                    body = self.module.by_name[callee]
                    for param in body.instructions:
                        number = parameter_number(param) if param.opcode == "parameter" else None
                        if number is not None and number < len(reader.operands) and \
                                reader.operands[number] == name and self._read_wide(callee, param.name, depth + 1):
                            return True
            elif reader.opcode in _VIEWS:
                if self._read_wide(comp_name, reader.name, depth + 1):
                    return True
            elif reader.opcode not in _NARROW_READERS:
                return True  # work on the wide value (an add, a reduce, a multiply)
        return index is None and comp.root.name == name and self._leaves(comp_name, depth, None)

    def _leaves(self, comp_name: str, depth: int, index: int | None) -> bool:
        """What reads a fused computation's output (element `index` of a tuple root) at its call site."""
        caller = self.callers.get(comp_name)
        return caller is not None and self._read_wide(caller[0].name, caller[1].name, depth + 1, index)
