"""What a remat-named op computes, seen from the op alone: the signature by which a recompute pairs
with its forward where value numbering cannot see (a forward loop body against a backward one
reading saved stacks). Equal signatures mean equal FLOPs, not equal values; hloflops.remat.pairing
adds the name and input tests."""

from __future__ import annotations

from itertools import permutations
from typing import Mapping

from hloflops.remat.op_kinds import DUPLICATED, result_attributes, shape_key
from hloflops.remat.sites import SiteOp
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number


def signature(op: SiteOp, shapes: Mapping[str, object]) -> tuple:
    """What an op computes, seen from the op alone: opcode, result and operand shapes, and the
    attributes that change the result (dimension numbers, windows, ...)."""
    inst = op.inst
    attributes = result_attributes(inst)
    operands = tuple(shapes.get(o) for o in inst.operands)
    result = shape_key(inst.shape)
    if inst.opcode in ("convolution", "dot"):
        # The element types are left out, the operands' and the result's: XLA may feed one copy
        # of a matmul an f32 operand and the other a bf16 one (a convert fused on either side;
        # TPU's default precision multiplies in bf16 either way), and on TPU it may fold the
        # rounding of a matmul's output to bf16 into one copy and not the other (TPU draws 6,
        # 10, 49: the forward's attention einsum yields bf16, its recompute f32). The FLOPs
        # are the same.
        operands = tuple(untyped(s) for s in operands)
        result = untyped(result)
    if inst.opcode == "convolution":
        attributes = spatial_order_free(attributes)
    if inst.opcode == "reduce":
        operands, attributes = unit_dimension_free(operands, attributes)
    return (inst.opcode, result, operands, attributes)


def unit_dimension_free(operands: tuple, attributes: tuple) -> tuple[tuple, tuple]:
    """A reduce's operand shapes and reduced dimensions with the unit dimensions left out. XLA may
    move a reshape that adds a unit dimension into one copy of a reduce and not the other: the
    forward's layer-norm sum reads `f32[1,2,32,64]` over dimensions {0,3} where its recompute reads
    `f32[2,32,64]` over {2} (base draws 79, 82, 100, 102: gradient accumulation, unrolled), the
    same sum. Reducing over a unit dimension adds nothing."""
    kept = dict(attributes)
    dims = kept.get("dimensions")
    half = len(operands) // 2  # the arrays reduced; their initial values (scalars) follow
    arrays = [s for s in operands[:half] if isinstance(s, tuple) and len(s) == 2 and isinstance(s[1], tuple)]
    if not isinstance(dims, str) or len(arrays) != half or any(s[1] != arrays[0][1] for s in arrays):
        return operands, attributes
    extents = arrays[0][1]
    if 1 not in extents:
        return operands, attributes
    reduced = {int(d) for d in dims.strip("{}").split(",") if d.strip()}
    new_index = {}
    for d, extent in enumerate(extents):
        if extent != 1:
            new_index[d] = len(new_index)
    squeezed = tuple((s[0], tuple(e for e in s[1] if e != 1)) if s in arrays else s for s in operands)
    kept["dimensions"] = "{" + ",".join(str(new_index[d]) for d in sorted(reduced) if d in new_index) + "}"
    return squeezed, tuple(sorted(kept.items()))


def untyped(key: object) -> object:
    """An array's `shape_key` without its element type (a tuple's is kept whole)."""
    return key[1:] if isinstance(key, tuple) and key and key[0] != "tuple" else key


def spatial_order_free(attributes: tuple) -> tuple:
    """A convolution's attributes with its spatial dimensions renumbered in one canonical order.
    Which spatial dimension XLA calls 0 is a naming: on TPU the recompute's attention einsum can
    come out as `window={size=2x8 ...}, dim_labels=1f0b_10oi->10bf` where its forward is
    `window={size=8x2 ...}, dim_labels=0f1b_01oi->01bf`, the same operands, shapes and
    arithmetic. The canonical order is the least (dim_labels, window) over all renumberings."""
    kept = dict(attributes)
    labels, window = kept.get("dim_labels"), kept.get("window")
    if not isinstance(labels, str) or not isinstance(window, str):
        return attributes
    digits = sorted({c for c in labels if c.isdigit()})
    fields = [f.split("=", 1) for f in window.strip("{}").split()]
    if len(digits) < 2 or any(len(f) != 2 or len(f[1].split("x")) != len(digits) for f in fields):
        return attributes
    best = None
    for order in permutations(range(len(digits))):  # old spatial dimension d is called order[d]
        renamed = "".join(str(order[int(c)]) if c.isdigit() else c for c in labels)
        values = []
        for key, value in fields:
            parts = value.split("x")
            new = [""] * len(parts)
            for d, part in enumerate(parts):
                new[order[d]] = part
            values.append(f"{key}={'x'.join(new)}")
        candidate = (renamed, "{" + " ".join(values) + "}")
        best = candidate if best is None or candidate < best else best
    kept["dim_labels"], kept["window"] = best
    return tuple(sorted(kept.items()))


def unit_dimension_free_signature(key: tuple) -> tuple:
    """An elementwise op's `signature` with the unit dimensions of its result and operands left
    out: XLA may give one copy of a value a unit dimension (a bitcast it moved into the fusion)
    that the other lacks, the same elements and FLOPs. Other opcodes' signatures are kept whole."""
    opcode, result, operands, attributes = key
    if opcode not in DUPLICATED:
        return key
    return opcode, _squeezed(result), tuple(_squeezed(s) for s in operands), attributes


def _squeezed(key: object) -> object:
    """An array's `shape_key` without its unit dimensions (a tuple's is kept whole)."""
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], tuple) and 1 in key[1]:
        return key[0], tuple(e for e in key[1] if e != 1)
    return key


# What an operand's constant reaches the op through: views, broadcasts and casts of it.
_CARRIERS = frozenset({"broadcast", "bitcast", "reshape", "copy", "transpose", "convert"})


class ConstantOperands:
    """Which operands of an elementwise op are constants, and which: per operand the constant's
    literal (through broadcasts, views and casts, out of a fusion through its parameter to what
    the caller passes), or None for a computed value. Two ops of one signature computing
    different things often differ here (softmax's scores `s * (1 / sqrt(d))` against its
    probabilities `e * broadcast(1 / sum)`, both named `div`)."""

    def __init__(self, module: Module):
        self.module = module
        self.callers: dict[str, tuple[Computation, Instruction] | None] = {}
        for comp, inst in module.instructions():
            if inst.opcode == "fusion":
                for callee in inst.called(CallRole.FUSION):
                    self.callers[callee] = None if callee in self.callers else (comp, inst)

    def of(self, comp_name: str, inst: Instruction) -> tuple:
        comp = self.module.by_name[comp_name]
        return tuple(self._literal(comp, name) for name in inst.operands)

    def _literal(self, comp: Computation, name: str) -> str | None:
        for _ in range(16):
            inst = comp.by_name.get(name)
            if inst is None:
                return None
            if inst.opcode == "constant":
                return inst.attributes.get("literal")
            if inst.opcode == "parameter":
                caller = self.callers.get(comp.name)
                number = parameter_number(inst)
                if caller is None or number is None or number >= len(caller[1].operands):
                    return None
                comp, name = caller[0], caller[1].operands[number]
            elif inst.opcode in _CARRIERS and len(inst.operands) == 1:
                name = inst.operands[0]
            else:
                return None
        return None
