"""Opcode rules of XLA's parser (`hlo_parser.cc`) and the CHECKs of the instruction factories it
calls (`HloInstruction::CreateReshape`, ...), which validate.py applies to the opcodes below.

Each rule here was put to XLA itself (`hlo_module_from_text`, jaxlib 0.10.2) on a module that
breaks it: those raise there, or abort the process on a CHECK (a module XLA cannot even hold),
and `tests/untrusted/test_hostile_input.py` keeps a case for each. Numbers are exact ints throughout.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING, Mapping

from hloparse.errors import HloParseError
from hloparse.ir import Instruction, Shape

if TYPE_CHECKING:
    from hloparse.source import SourceLocator as _Builder  # the parser's builder, seen through its protocol

# API_VERSION_UNSPECIFIED is newer than jaxlib 0.10.2's parser, which rejects it; real dumps
# carry it, so it is read as the rest (see README, "The parser").
_API_VERSIONS = frozenset({"API_VERSION_UNSPECIFIED", "API_VERSION_ORIGINAL", "API_VERSION_STATUS_RETURNING",
                           "API_VERSION_STATUS_RETURNING_UNIFIED", "API_VERSION_TYPED_FFI"})
_NEED_DIMENSIONS = frozenset({"all-gather", "all-gather-start", "reduce-scatter"})
# The attributes hlo_parser.cc requires per opcode ("attribute X is expected but not seen"),
# found by giving XLA every corpus instruction with each of its attributes dropped in turn.
REQUIRED: dict[str, frozenset[str]] = {op: frozenset(keys.split()) for op, keys in {
    "all-gather": "dimensions", "all-gather-start": "dimensions", "all-reduce": "to_apply",
    "all-reduce-start": "to_apply", "batch-norm-grad": "epsilon feature_index",
    "batch-norm-inference": "epsilon feature_index", "batch-norm-training": "epsilon feature_index",
    "call": "to_apply", "collective-permute": "source_target_pairs", "collective-permute-start": "source_target_pairs",
    "compare": "direction", "concatenate": "dimensions", "convolution": "dim_labels",
    "custom-call": "custom_call_target", "domain": "domain", "dynamic-slice": "dynamic_slice_sizes",
    "fft": "fft_type fft_length", "fusion": "kind calls",
    "gather": "offset_dims collapsed_slice_dims start_index_map index_vector_dim slice_sizes",
    "get-dimension-size": "dimensions", "get-tuple-element": "index", "iota": "iota_dimension", "map": "to_apply",
    "pad": "padding", "reduce": "dimensions to_apply", "reduce-precision": "exponent_bits mantissa_bits",
    "reduce-scatter": "to_apply dimensions", "reduce-window": "to_apply", "reverse": "dimensions",
    "rng": "distribution", "rng-bit-generator": "algorithm", "rng-get-and-update-state": "delta",
    "scan": "dimensions num_carries to_apply", "select-and-scatter": "select scatter",
    "scatter": "update_window_dims inserted_window_dims scatter_dims_to_operand_dims index_vector_dim to_apply",
    "set-dimension-size": "dimensions", "slice": "slice", "sort": "dimensions to_apply", "topk": "k",
    "transpose": "dimensions", "while": "condition body",
}.items()}


def missing_attribute(inst: Instruction, builder: _Builder) -> HloParseError:
    missing = sorted(REQUIRED[inst.opcode] - inst.attributes.keys())[0]
    return builder.error_at_instruction(inst, f"attribute {missing} is expected but not seen",
                                        f"{missing}=... on {inst.opcode}", needle=f"{inst.opcode}(")


# The opcodes on which XLA's parser refuses use_global_device_ids=true without a channel_id
# (all-gather takes it without one).
_GLOBAL_DEVICE_IDS = frozenset({"all-reduce", "all-reduce-start", "reduce-scatter"})
CHECKED_OPCODES = (frozenset({"reshape", "dynamic-reshape", "conditional", "custom-call"}) | _NEED_DIMENSIONS
                   | _GLOBAL_DEVICE_IDS)


def check_opcode_rules(inst: Instruction, above: Mapping[str, Instruction], builder: _Builder) -> None:
    op, attrs = inst.opcode, inst.attributes
    if op == "reshape" and inst.operands and not inst.shape.is_tuple:
        source = above[inst.operands[0]].shape
        # XLA compares the static extents (a bounded dimension counts as its bound) unless the
        # operand has an unbounded (`?`) dimension.
        if not source.is_tuple and -1 not in source.dims and -1 not in inst.shape.dims:
            have, want = prod(source.dims), prod(inst.shape.dims)
            if have != want:
                raise builder.error_at_instruction(
                    inst, f"reshape from {have} elements to {want}: the element counts differ",
                    "a result shape with the operand's number of elements", needle="reshape(")
    elif op == "dynamic-reshape":
        want = 1 + (0 if inst.shape.is_tuple else inst.shape.rank)
        if len(inst.operands) != want:
            raise builder.error_at_instruction(
                inst, f"dynamic-reshape to rank {want - 1} takes {want} operands (the operand and one size per "
                f"dimension), not {len(inst.operands)}", f"{want} operands", needle="dynamic-reshape(")
    elif op == "conditional":
        _check_conditional(inst, above, builder)
    elif op == "custom-call":
        version = attrs.get("api_version")
        if version is not None and version.strip() not in _API_VERSIONS:
            raise builder.error_at_instruction(
                inst, f"expects custom-call API version but sees: {version.strip()[:40]}",
                "one of " + ", ".join(sorted(_API_VERSIONS)), needle="api_version=")
    elif op in _NEED_DIMENSIONS and "dimensions" not in attrs:
        raise builder.error_at_instruction(inst, "attribute dimensions is expected but not seen",
                                           "dimensions={d}", needle=f"{op}(")
    if op in _GLOBAL_DEVICE_IDS and attrs.get("use_global_device_ids") == "true" and "channel_id" not in attrs:
        raise builder.error_at_instruction(inst, "Cannot have use_global_device_ids=true without channel_id",
                                           "a channel_id=N", needle="use_global_device_ids")


def _check_conditional(inst: Instruction, above: Mapping[str, Instruction], builder: _Builder) -> None:
    attrs = inst.attributes
    branches = attrs.get("branch_computations")
    predicated = [k for k in ("true_computation", "false_computation") if k in attrs]
    if branches is not None and predicated:
        raise builder.error_at_instruction(inst, 'unexpected attribute "branch_computations" beside '
                                           f"{predicated[0]}", "branch_computations or true/false_computation",
                                           needle="branch_computations")
    if branches is None:
        if len(predicated) != 2:
            missing = "true_computation" if "true_computation" not in attrs else "false_computation"
            raise builder.error_at_instruction(inst, f"attribute {missing} is expected but not seen",
                                               "true_computation and false_computation", needle="conditional(")
        count = 2
    else:
        inner = branches.strip()[1:-1].strip()
        count = len([b for b in inner.split(",") if b.strip()]) if inner else 0
        if count == 0:
            raise builder.error_at_instruction(inst, "a conditional needs at least one branch computation",
                                               "branch_computations={b0, ...}", needle="branch_computations")
    if len(inst.operands) != 1 + count:
        raise builder.error_at_instruction(
            inst, f"conditional with {count} branches expects {1 + count} operands (the branch index and one per "
            f"branch), but has {len(inst.operands)}", f"{1 + count} operands", needle="conditional(")
    # XLA reads the branches by the index's type: a PRED index takes true/false_computation, an S32
    # one branch_computations; any other index is refused.
    index = above[inst.operands[0]].shape if inst.operands[0] in above else None
    if index is None or index.dims or index.element_type not in ("pred", "s32"):
        raise builder.error_at_instruction(inst, "The first operand must be a scalar of PRED or S32",
                                           "a pred[] or s32[] branch index", needle="conditional(")
    if index.element_type == "pred" and branches is not None:
        raise builder.error_at_instruction(inst, 'unexpected attribute "branch_computations" for a PRED branch index',
                                           "true_computation and false_computation", needle="branch_computations")
    if index.element_type == "s32" and predicated:
        raise builder.error_at_instruction(inst, f'unexpected attribute "{predicated[0]}" for an S32 branch index',
                                           "branch_computations={b0, ...}", needle=predicated[0])


def check_control_predecessors(inst: Instruction, above: Mapping[str, Instruction], builder: _Builder) -> None:
    """`control-predecessors={a, b}`: each an instruction defined above, in the same computation."""
    raw = inst.attributes["control-predecessors"].strip()
    body = raw[1:-1] if raw.startswith("{") and raw.endswith("}") else raw
    names = [n.strip().lstrip("%") for n in body.split(",")]
    if not body.strip() or any(not n for n in names):
        raise builder.error_at_instruction(inst, "expects name in control-predecessors", "{%name, ...}",
                                           needle="control-predecessors")
    for n in names:
        if n not in above:
            raise builder.error_at_instruction(inst, f"instruction {n[:60]!r} is not defined",
                                               "a control predecessor defined above", needle="control-predecessors")


def compatible(a: Shape, b: Shape) -> bool:
    """Same element types and dimensions (layouts ignored), recursively for tuples."""
    if a is b:  # shapes come from caches: the same text is often the same object
        return True
    if a.element_type != b.element_type:
        return False
    if a.element_type == "tuple":
        # Leaves compared in this loop, not one call each: while-loop signatures hold hundreds.
        xs, ys = a.tuple_shapes, b.tuple_shapes
        if len(xs) != len(ys):
            return False
        for x, y in zip(xs, ys):
            if x is not y and (x.element_type != y.element_type or (
                    not compatible(x, y) if x.element_type == "tuple" else x.dims != y.dims)):
                return False
        return True
    return a.dims == b.dims

