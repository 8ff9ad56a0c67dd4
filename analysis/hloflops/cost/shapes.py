"""Shape sizes exactly as XLA's cost analysis measures them (CPU client, 8-byte pointers).

`size` is `HloCostAnalysis::GetShapeSize` with `CpuExecutable::ShapeSizeBytes`: an array is its
elements times the element width (packed when the layout says `E(bits)`), plus 4 bytes per
dimension when the shape is dynamic; a tuple is its pointer table (8 bytes per top-level
element), never its leaves; a token is 0 and an opaque 8. A shape written without a layout gets
the default layout from XLA's text parser, so its size is counted like any other.
"""

from __future__ import annotations

import re
from itertools import compress
from operator import attrgetter

from hloflops.xla.order import instruction_names
from hloparse.ir import ELEMENT_BYTES, Computation, Instruction, Shape

POINTER_SIZE = 8
_ELEMENT_BITS = re.compile(r"E\((\d+)\)")


UNBOUNDED = -1  # how the IR writes an unbounded dynamic dimension `?`
_XLA_UNBOUNDED = -(2**63)  # how XLA stores it (kUnboundedSize = INT64_MIN)


def has_unbounded(shape: Shape) -> bool:
    return any(leaf.is_array and UNBOUNDED in leaf.dims for leaf in shape.leaves())


def _int64(value: int) -> int:
    """Wrap to a signed 64-bit integer, as XLA's int64 arithmetic does on overflow."""
    return (value + 2**63) % 2**64 - 2**63


def elements(shape: Shape) -> int:
    """ShapeUtil::ElementsIn (an array's element count; a scalar is 1). An unbounded `?`
    dimension counts as XLA stores it, INT64_MIN, with int64 wrap-around: meaningless, but it is
    what XLA's cost analysis reports for such shapes."""
    n = 1
    for d in shape.dims:
        n *= d
    if UNBOUNDED in shape.dims:
        n = 1
        for d in shape.dims:
            n = _int64(n * (_XLA_UNBOUNDED if d == UNBOUNDED else d))
    return n


def elements_recursive(shape: Shape) -> int:
    """ShapeUtil::ElementsInRecursive: the elements of every array leaf of a tuple."""
    return sum(elements(leaf) for leaf in shape.leaves() if leaf.is_array)


# Sizes per distinct Shape object (the parser shares one object per distinct shape text). The
# entry holds the shape itself, so its id cannot be reused while the entry lives.
_SIZES: dict[tuple[int, bool], tuple[Shape, int]] = {}
_SIZES_LIMIT = 200_000


def size(shape: Shape, packed: bool = True) -> int:
    """`shape_size` of each distinct shape, computed once."""
    hit = _SIZES.get((id(shape), packed))
    if hit is not None:
        return hit[1]
    if len(_SIZES) >= _SIZES_LIMIT:
        _SIZES.clear()
    result = shape_size(shape, packed)
    _SIZES[(id(shape), packed)] = (shape, result)
    return result


def shape_size(shape: Shape, packed: bool = True) -> int:
    """XLA's GetShapeSize for one shape (a tuple counts its pointer table only). `packed=False`
    ignores a layout's `E(bits)` element size: XLA's parser builds a constant's shape from its
    literal, which drops it (an `s4[4,4]{1,0:E(4)}` constant then counts 16 bytes, not 8)."""
    if shape.is_tuple:
        return POINTER_SIZE * len(shape.tuple_shapes)
    if shape.element_type == "token":
        return 0
    if shape.element_type == "opaque":
        return POINTER_SIZE
    if shape.element_type == "buffer":  # b(f32[4]): the array it holds
        return size(shape.tuple_shapes[0], packed)
    count = elements(shape)
    bits = _element_bits(shape) if packed else 0
    if bits:
        result = -(-count * bits // 8)
    else:
        result = count * ELEMENT_BYTES[shape.element_type]
    if UNBOUNDED in shape.dims:
        result = _int64(result)
    if shape.is_dynamic:
        result += 4 * shape.rank  # the dimension sizes XLA stores after a dynamic array
    return result


def value_size(computation: Computation, name: str) -> int:
    """GetShapeSize of the value an operand names (a constant's shape is never packed)."""
    return produced_size(computation.by_name[name])


_SIZED_BY_OPCODE = frozenset({"constant", "send", "recv"})  # the opcodes produced_size reads


def produced_size(producer: Instruction) -> int:
    """GetShapeSize of the value an instruction produces, as its users read it."""
    op = producer.opcode
    if op not in _SIZED_BY_OPCODE:
        return size(producer.shape, True)
    if op != "constant":  # send, recv
        return 3 * 8  # XLA's own 3-tuple shape for them, whatever the text says
    return size(producer.shape, False)


def producer_tokens(computation: Computation) -> dict[str, object]:
    """Per instruction name, a value that stands for both the shape an instruction produces and
    `produced_size` of it: its shape's id (the parser shares one Shape per distinct shape text),
    tagged with the opcode where `produced_size` reads it (constant, send, recv). Built in C
    loops: the engine keys its memo of costs on these."""
    instructions = computation.instructions
    tokens: dict[str, object] = dict(zip(instruction_names(computation), map(id, map(_SHAPE, instructions))))
    for inst in compress(instructions, map(_SIZED_BY_OPCODE.__contains__, map(_OPCODE, instructions))):
        tokens[inst.name] = (inst.opcode, id(inst.shape))
    return tokens


_OPCODE, _SHAPE = attrgetter("opcode"), attrgetter("shape")
_OUTPUT_SIZES: dict[int, tuple[Shape, int]] = {}


def output_size(shape: Shape) -> int:
    """`result_size` of each distinct shape, computed once."""
    hit = _OUTPUT_SIZES.get(id(shape))
    if hit is not None:
        return hit[1]
    if len(_OUTPUT_SIZES) >= _SIZES_LIMIT:
        _OUTPUT_SIZES.clear()
    result = result_size(shape)
    _OUTPUT_SIZES[id(shape)] = (shape, result)
    return result


def result_size(shape: Shape) -> int:
    """What the default (Preprocess) rule charges for an instruction's result: jaxlib 0.10.2
    charges a tuple-shaped result the sum of its leaf arrays (verified with opt-barrier, sort,
    topk), while a tuple-shaped operand costs only its pointer table (`size`)."""
    if not shape.is_tuple:
        return size(shape)
    return sum(size(leaf) for leaf in shape.leaves())


def array_subshapes(shape: Shape, index: tuple[int, ...] = ()):
    """(index, subshape) of every array subshape, in XLA's ForEachSubshape pre-order."""
    if shape.is_tuple:
        for i, sub in enumerate(shape.tuple_shapes):
            yield from array_subshapes(sub, index + (i,))
    elif shape.is_array:
        yield index, shape


def minor_to_major(shape: Shape) -> tuple[int, ...]:
    """The layout's minor-to-major order; the default layout when the text wrote none."""
    if shape.layout is not None and len(shape.layout.minor_to_major) == shape.rank:
        return shape.layout.minor_to_major
    return tuple(range(shape.rank - 1, -1, -1))


def transpose_is_bitcast(operand: Shape, result: Shape, dimensions: tuple[int, ...]) -> bool:
    """ShapeUtil::TransposeIsBitcast: the permutation keeps the physical element order."""
    if operand.element_type != result.element_type:
        return False
    out_order = minor_to_major(result)
    if len(dimensions) != len(out_order):
        return False
    return tuple(dimensions[d] for d in out_order) == minor_to_major(operand)


def _element_bits(shape: Shape) -> int:
    if shape.layout is None or not shape.layout.details:
        return 0
    match = _ELEMENT_BITS.search(shape.layout.details)
    return int(match.group(1)) if match else 0
