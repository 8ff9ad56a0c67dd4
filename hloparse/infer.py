"""Shapes for instructions written without one (`x = add(a, b)`), as XLA's parser infers them.

Only the opcodes whose result shape follows from their operands and attributes are inferred;
for the rest (broadcast, reshape, convert, custom-call, ...) a missing shape is an error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from hloparse.attributes import AttributeSyntaxError, parse_padding
from hloparse.ir import CallRole, Computation, Instruction, Layout, Shape
from hloparse.xla_checks import compatible

if TYPE_CHECKING:
    from hloparse.source import SourceLocator as _Builder  # the parser's builder, seen through its protocol

_SAME_AS_OPERAND = frozenset(
    {"abs", "negate", "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "sqrt", "rsqrt",
     "cbrt", "tanh", "tan", "sine", "cosine", "erf", "floor", "ceil", "sign", "not", "popcnt", "count-leading-zeros",
     "round-nearest-afz", "round-nearest-even", "copy", "reduce-precision", "opt-barrier", "add", "subtract",
     "multiply", "divide", "maximum", "minimum", "power", "remainder", "and", "or", "xor", "shift-left",
     "shift-right-logical", "shift-right-arithmetic", "atan2", "add-dependency", "dynamic-update-slice", "domain",
     "collective-permute", "all-to-all", "cosh", "sinh", "acos", "asin", "acosh", "asinh", "atanh", "mulhi"}
)
_COMPLEX_PART = {"c64": "f32", "c128": "f64"}
_COMPLEX_OF = {"f32": "c64", "f64": "c128"}


class _CannotInfer(Exception):
    pass


def infer_missing_shapes(computations: list[Computation], builder: _Builder) -> None:
    by_name = {c.name: c for c in computations}
    done: set[str] = set()

    def visit(comp: Computation, stack: tuple[str, ...] = ()) -> None:
        if comp.name in done or comp.name in stack:
            return
        shapes: dict[str, Shape] = {}
        for inst in comp.instructions:
            if inst.opcode in DERIVED_SHAPE_OPCODES and inst.shape is not None:
                derived = derived_shape(inst, comp.by_name)
                if derived is not None:
                    object.__setattr__(inst, "shape", derived)  # before anything is inferred from it
            if inst.shape is None:
                for site in inst.calls:  # callees first: call/fusion/while results come from them
                    callee = by_name.get(site.computation)
                    if callee is not None:
                        visit(callee, stack + (comp.name,))
                try:
                    shape = _infer(inst, comp, shapes, by_name, builder)
                except (_CannotInfer, KeyError, IndexError, ValueError, AttributeSyntaxError) as e:
                    detail = f": {e}" if isinstance(e, (_CannotInfer, AttributeSyntaxError)) and str(e) else ""
                    raise builder.error_at_instruction(
                        inst, f"cannot infer the shape of {inst.opcode} {inst.name!r}{detail}",
                        "an explicit shape, e.g. `x = f32[2] add(a, b)`") from None
                object.__setattr__(inst, "shape", shape)
            shapes[inst.name] = inst.shape
        done.add(comp.name)

    for comp in computations:
        visit(comp)


def _infer(inst: Instruction, comp: Computation, shapes: dict[str, Shape], computations: dict[str, Computation],
           builder: _Builder) -> Shape:
    op = inst.opcode

    def operand(i: int) -> Shape:
        name = inst.operands[i]
        if name in shapes:
            return shapes[name]
        for other in comp.instructions:  # defined later in the text
            if other.name == name and other.shape is not None:
                return other.shape
        raise _CannotInfer(f"operand {name!r} has no known shape")

    def root_of(role_index: int = 0) -> Shape:
        callee = computations[inst.calls[role_index].computation]
        if callee.root.shape is None:
            raise _CannotInfer("the called computation's root has no shape")
        return callee.root.shape

    if op == "parameter":
        sig = builder.signature_of(comp.name)
        if sig is None or sig[1] is None:
            raise _CannotInfer("no computation signature to take it from")
        return sig[1][int(inst.attributes["parameter_number"])]
    if op in _SAME_AS_OPERAND:
        return operand(0)
    if op in ("compare", "is-finite"):
        return Shape("pred", operand(0).dims, operand(0).dynamic)
    if op in ("real", "imag"):
        s = operand(0)
        return Shape(_COMPLEX_PART.get(s.element_type, s.element_type), s.dims, s.dynamic)
    if op == "complex":
        s = operand(0)
        return Shape(_COMPLEX_OF.get(s.element_type, s.element_type), s.dims, s.dynamic)
    if op in ("select", "clamp"):
        return operand(1)
    if op == "tuple":
        return Shape("tuple", tuple_shapes=tuple(operand(i) for i in range(len(inst.operands))))
    if op == "get-tuple-element":
        return operand(0).tuple_shapes[int(inst.attributes["index"])]
    if op in ("call", "fusion", "conditional"):
        return root_of()
    if op == "while":
        return _while_shape(inst, operand(0), computations)
    if op == "after-all":
        return Shape("token")
    if op in ("partition-id", "replica-id"):
        return Shape("u32")
    if op == "get-dimension-size":
        return Shape("s32")
    if op in ("all-reduce", "all-reduce-start"):
        parts = [operand(i) for i in range(len(inst.operands))]
        return parts[0] if len(parts) == 1 else Shape("tuple", tuple_shapes=tuple(parts))
    if op == "transpose":
        s = operand(0)
        perm = inst.dimensions or ()
        # XLA permutes the layout with the dimensions (ShapeUtil::PermuteDimensions): an inferred
        # transpose is a bitcast, which the cost analysis charges 0 bytes.
        m2m = s.layout.minor_to_major if s.layout is not None else tuple(range(len(s.dims) - 1, -1, -1))
        inverse = {p: i for i, p in enumerate(perm)}
        layout = Layout(tuple(inverse[d] for d in m2m)) if len(m2m) == len(perm) else None
        return Shape(s.element_type, tuple(s.dims[p] for p in perm), layout=layout)
    if op == "dot":
        lhs, rhs = operand(0), operand(1)
        dn = inst.dot_dimension_numbers
        assert dn is not None
        batch = [lhs.dims[d] for d in dn.lhs_batch]
        lhs_free = [d for i, d in enumerate(lhs.dims) if i not in dn.lhs_batch and i not in dn.lhs_contracting]
        rhs_free = [d for i, d in enumerate(rhs.dims) if i not in dn.rhs_batch and i not in dn.rhs_contracting]
        return Shape(lhs.element_type, tuple(batch + lhs_free + rhs_free))
    if op == "reduce":
        n = len(inst.operands) // 2
        reduced = set(inst.dimensions or ())
        outs = []
        for i in range(n):
            s, init = operand(i), operand(n + i)
            outs.append(Shape(init.element_type, tuple(d for k, d in enumerate(s.dims) if k not in reduced)))
        return outs[0] if n == 1 else Shape("tuple", tuple_shapes=tuple(outs))
    if op == "sort":
        parts = [operand(i) for i in range(len(inst.operands))]
        return parts[0] if len(parts) == 1 else Shape("tuple", tuple_shapes=tuple(parts))
    if op == "reduce-window":
        n = len(inst.operands) // 2
        window = inst.window or ()
        outs = []
        for i in range(n):
            s, init = operand(i), operand(n + i)
            dims = []
            for d, w in zip(s.dims, window):
                base = (d - 1) * w.lhs_dilation + 1 + w.pad_low + w.pad_high
                span = (w.size - 1) * w.rhs_dilation + 1
                dims.append(0 if base < span else (base - span) // w.stride + 1)
            outs.append(Shape(init.element_type, tuple(dims)))
        return outs[0] if n == 1 else Shape("tuple", tuple_shapes=tuple(outs))
    if op == "convolution":
        lhs, rhs = operand(0), operand(1)
        labels = inst.conv_dim_labels
        if labels is None:
            raise _CannotInfer("no dim_labels")
        window = inst.window or ()
        dims = [0] * lhs.rank
        dims[labels.output_batch] = lhs.dims[labels.input_batch] // inst.batch_group_count
        dims[labels.output_feature] = rhs.dims[labels.kernel_output_feature]
        for k, (i, o) in enumerate(zip(labels.input_spatial, labels.output_spatial)):
            w = window[k]
            base = (lhs.dims[i] - 1) * w.lhs_dilation + 1 + w.pad_low + w.pad_high
            span = (w.size - 1) * w.rhs_dilation + 1
            dims[o] = 0 if base < span else (base - span) // w.stride + 1
        return Shape(lhs.element_type, tuple(dims))
    if op == "slice":
        s = operand(0)
        spec = inst.slice_spec or ()
        return Shape(s.element_type, tuple((hi - lo + st - 1) // st for lo, hi, st in spec))
    if op == "concatenate":
        parts = [operand(i) for i in range(len(inst.operands))]
        axis = (inst.dimensions or (0,))[0]
        dims = list(parts[0].dims)
        dims[axis] = sum(p.dims[axis] for p in parts)
        return Shape(parts[0].element_type, tuple(dims))
    if op == "dynamic-slice":
        sizes = inst.int_list("dynamic_slice_sizes")
        if sizes is None:
            raise _CannotInfer("no dynamic_slice_sizes")
        return Shape(operand(0).element_type, sizes)
    if op == "pad":
        s = operand(0)
        config = parse_padding(inst.attributes["padding"])
        dims = tuple(lo + hi + d + max(d - 1, 0) * interior for d, (lo, hi, interior) in zip(s.dims, config))
        return Shape(s.element_type, dims)
    raise _CannotInfer("")


DERIVED_SHAPE_OPCODES = frozenset({"send", "send-done", "outfeed", "recv"})


def derived_shape(inst: Instruction, by_name: Mapping[str, Instruction]) -> Shape | None:
    """The shape XLA gives send, send-done and outfeed whatever the text says (its parser
    re-derives them from the operands); None for every other opcode. `by_name` resolves operands."""
    if inst.opcode == "send" and inst.operands:
        data = by_name[inst.operands[0]].shape
        return Shape("tuple", tuple_shapes=(data, Shape("u32"), Shape("token")))
    if inst.opcode in ("send-done", "outfeed"):
        return Shape("token")
    if inst.opcode == "recv" and inst.shape is not None and inst.shape.is_tuple and inst.shape.tuple_shapes:
        return Shape("tuple", tuple_shapes=(inst.shape.tuple_shapes[0], Shape("u32"), Shape("token")))
    return None


__all__ = ["infer_missing_shapes", "derived_shape"]


def _while_shape(inst: Instruction, init: Shape, computations: dict[str, Computation]) -> Shape:
    """XLA infers a while's shape only when the condition's and the body's parameter and the body's
    result all have the operand's shape (layouts aside): anything else is no loop it can run."""
    for site in inst.calls:
        callee = computations[site.computation]
        shapes = [p.shape for p in callee.parameters[:1]]
        if site.role == CallRole.WHILE_BODY:
            shapes.append(callee.root.shape)
        if any(shape is not None and not compatible(shape, init) for shape in shapes):
            raise _CannotInfer("The parameter of condition and body, the result of the body, and init must all have "
                               f"the same shape ({site.computation[:40]!r} differs)")
    return init
