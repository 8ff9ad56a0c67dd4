"""What an instruction is to value numbering (hloflops.remat.values) and to the signatures that
pair a recompute with its forward (hloflops.remat.signature): which attributes change the value
it computes, which opcodes are a value of their own or pass one through, the key of a shape, and
which elementwise ops XLA's fusion copies into each reader (the fusion rules).
"""

from __future__ import annotations

from typing import Callable, Mapping

from hloflops.cost.rules import ELEMENTWISE_FLOP_OPCODES, TRANSCENDENTAL_OPCODES
from hloflops.cost.shapes import elements
from hloparse.ir import Instruction, Shape

# Elementwise ops inside fusions: the ops whose remat-named copies `fusion_copies` looks at.
DUPLICATED = ELEMENTWISE_FLOP_OPCODES | TRANSCENDENTAL_OPCODES
# XLA's instruction fusion duplicates only cheap ops into each consumer, never an expensive one
# (transcendentals, divide, remainder: `InstructionFusion::IsExpensive`): a remat-named expensive
# op inside a fusion is a recompute of its own, and so are the cheap copies it reads there (seed
# 004: the recomputed bias add under a recomputed tanh, in the fusion of the input gradient).
EXPENSIVE = TRANSCENDENTAL_OPCODES | {"divide", "remainder"}
# The matmuls: what the split pairs by value or signature only, never by how XLA fused a program.
MATMUL_OPCODES = frozenset({"dot", "convolution"})

# Ops whose every result element is computed from the operands' elements at the same index (all of
# one shape): their value is the same whatever unit dimensions that shape has. Not bitcast-convert,
# which may change the number of elements.
ELEMENTWISE = (DUPLICATED - {"bitcast-convert"}) | frozenset({"select", "clamp", "compare", "and", "or", "not", "xor"})

# Attributes that do not change what an instruction computes (or that name a computation, which
# is compared by its contents instead).
IGNORED_ATTRIBUTES = frozenset({
    "metadata", "backend_config", "frontend_attributes", "sharding", "statistics", "origin",
    "control-predecessors", "calls", "to_apply", "body", "condition", "branch_computations",
    "true_computation", "false_computation", "select", "scatter", "called_computations", "comparator",
    "async_execution_thread", "schedule", "parameter_replication", "output_to_operand_aliasing",
    "custom_call_has_side_effect", "channel_id",
})


# Ignored attributes whose text is most often its op's own.
PER_OP_ATTRIBUTES = frozenset({"metadata", "channel_id"})


def result_attributes(inst: Instruction) -> tuple:
    """The attributes that change what an instruction computes. A custom-call's backend_config
    is one of them: a library gemm (`__cublas$gemm`, oneDNN matmul) keeps its dimension numbers
    there."""
    if inst.opcode != "custom-call":
        return kept_attributes(inst.attributes)
    kept = [(k, v) for k, v in inst.attributes.items() if k not in IGNORED_ATTRIBUTES or k == "backend_config"]
    if len(kept) > 1:
        kept.sort()
    return tuple(kept)


def kept_attributes(attributes: Mapping[str, str]) -> tuple:
    """The attributes that change what an instruction computes, sorted (custom-calls aside: see
    `result_attributes`)."""
    if not attributes or attributes.keys() <= IGNORED_ATTRIBUTES:
        return ()
    kept = [(k, v) for k, v in attributes.items() if k not in IGNORED_ATTRIBUTES]
    if len(kept) > 1:
        kept.sort()
    return tuple(kept)


# Instructions whose result is not a function of their operands: each is a value of its own.
UNIQUE = frozenset({
    "rng", "rng-get-and-update-state", "infeed", "outfeed", "recv", "recv-done", "send", "send-done",
    "after-all", "while", "all-reduce-start", "all-gather-start", "collective-permute-start",
    "copy-start", "async-start", "async-update", "async-done", "domain", "add-dependency",
})
# Instructions that pass a value through unchanged (layouts are not part of a value).
IDENTITY = frozenset({"copy", "opt-barrier"})
# Custom-calls that move a value between memories and compute nothing (an offload policy's saved
# residual, to the host in the forward and back in the recompute): the value is the one moved,
# though jax marks the placement a side effect, which would make it a value of its own.
MEMORY_PLACEMENT = frozenset({"annotate_device_placement", "MoveToHost", "MoveToDevice"})


def is_memory_placement(inst: Instruction) -> bool:
    """Is the op a custom-call that moves its one operand to another memory (`MEMORY_PLACEMENT`)?"""
    return inst.opcode == "custom-call" and len(inst.operands) == 1 and inst.custom_call_target in MEMORY_PLACEMENT


# Ops that only relay out a value (inside a fusion a chain is read through them).
LAYOUT_VIEWS = frozenset({"bitcast", "copy", "reshape", "transpose"})
# Operands that carry no op of an elementwise chain.
NO_WORK_OPERANDS = frozenset({"broadcast", "constant", "parameter", "iota"})

# Not numbered by `_frame`'s fast path.
NOT_PLAIN = UNIQUE | IDENTITY | {"parameter", "tuple", "get-tuple-element", "custom-call", "conditional"}
# Reading (part of) an input: the abstract number of such a value is its shape.
INPUT_VIEWS = frozenset({"dynamic-slice", "slice", "bitcast", "reshape", "copy", "get-tuple-element",
                         "opt-barrier", "bitcast-convert"})


def largest_array(shape: Shape) -> int:
    """The elements of a shape's largest array (of a multi-output fusion's, its largest output)."""
    return max((elements(leaf) for leaf in shape.leaves() if leaf.is_array), default=0)


def shape_key(shape: Shape) -> tuple:
    if shape.is_tuple:
        return ("tuple",) + tuple(shape_key(s) for s in shape.tuple_shapes)
    return (shape.element_type, shape.dims)


def unit_free_shape(shape: Shape) -> tuple:
    """A result's element type and its dimensions but the unit ones: equal for `[b, 1, q, k]` and
    `[b, q, k]`, which XLA computes for one value where a broadcast or a stack adds a unit dimension."""
    return shape.element_type, tuple(d for d in shape.dims if d != 1)


def unit_free_broadcast(shape: Shape, dimensions: str) -> tuple | None:
    """A broadcast's result type, its dimensions but the unit ones, and where the operand's
    dimensions that are not unit lie among them: equal for `[b, t] -> [1, b, t, d]` (`{1, 2}`) and
    `[b, t] -> [b, t, d]` (`{0, 1}`). An operand's unit dimension lands on a unit dimension of the
    result, so dropping both keeps the broadcast's value. None where `dimensions` does not parse."""
    try:
        mapped = [int(x) for x in dimensions.strip("{}").split(",") if x.strip()]
    except ValueError:
        return None
    if any(not 0 <= d < len(shape.dims) for d in mapped):
        return None
    rank = {d: i for i, d in enumerate(d for d in range(len(shape.dims)) if shape.dims[d] != 1)}
    return unit_free_shape(shape) + (tuple(rank[d] for d in mapped if d in rank),)


def result_form(inst: Instruction, key: Callable[[Shape], tuple] = shape_key) -> tuple:
    """An op's result shape (by `key`) and the attributes that change it; for an elementwise op or
    a broadcast, without unit dimensions (hloflops.remat.views: such shapes hold one value)."""
    shape, attributes = inst.shape, result_attributes(inst)
    if shape.is_tuple:
        return key(shape), attributes
    if inst.opcode == "broadcast":
        found = unit_free_broadcast(shape, inst.attributes.get("dimensions", ""))
        if found is not None:
            return ("broadcast", found), tuple(a for a in attributes if a[0] != "dimensions")
    if inst.opcode in ELEMENTWISE:
        return unit_free_shape(shape), attributes  # the shape key where it has no unit dimension
    return key(shape), attributes


def unit_free_reduce(shape: Shape, operand: Shape, dimensions: str) -> tuple | None:
    """A reduce's result type, its dimensions but the unit ones, and which of the operand's
    dimensions that are not unit it reduces (counted among those): equal for `[1, b, t, d]`
    reduced over `{3}` and `[b, t, d]` over `{2}` (reducing a unit dimension changes no
    element). None where `dimensions` does not parse."""
    try:
        reduced = [int(x) for x in dimensions.strip("{}").split(",") if x.strip()]
    except ValueError:
        return None
    if any(not 0 <= d < len(operand.dims) for d in reduced):
        return None
    rank = {d: i for i, d in enumerate(d for d in range(len(operand.dims)) if operand.dims[d] != 1)}
    return unit_free_shape(shape) + (tuple(sorted(rank[d] for d in reduced if d in rank)),)


# The (exponent, mantissa) bits of each floating type: a reduce-precision to its own type's bits
# rounds nothing.
OWN_BITS = {"f64": ("11", "52"), "f32": ("8", "23"), "bf16": ("8", "7"), "f16": ("5", "10")}


def rounding_bits(inst: Instruction) -> tuple[str | None, str | None]:
    return inst.attributes.get("exponent_bits"), inst.attributes.get("mantissa_bits")


def is_identity_rounding(inst: Instruction) -> bool:
    """A reduce-precision to its own type's bits, or to more: TPU narrows a matmul's output to
    bf16 for a bf16 reader and keeps jax's f32 rounding (a saveable name's marker) on it, still
    an identity (TPU draw 0 and held-out 93: bf16 roundings to 8 and 23 bits)."""
    if inst.opcode != "reduce-precision":
        return False
    own, bits = OWN_BITS.get(inst.shape.element_type), rounding_bits(inst)
    if own is None or None in bits:
        return False
    return int(bits[0]) >= int(own[0]) and int(bits[1]) >= int(own[1])
