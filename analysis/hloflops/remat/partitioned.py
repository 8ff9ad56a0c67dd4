"""A sharded matmul's or reduce's recompute partitioned another way than its forward (`partitioned_key`).

Under SPMD (tensor parallelism, FSDP) XLA's partitioner decides how each matmul is split across
the devices, and it decides for the recompute apart from the forward: the same einsum can come
out contracting the whole feature dimension on each device (its weight gathered by an
all-to-all) in the forward, and contracting a shard of it with partial sums all-reduced after in
the recompute (TPU draw 42, eqx_list under tensor parallelism: the first layer's up projection,
`bf16[16,32] x bf16[16,32] -> [16,16]` in the forward, `bf16[16,16] x f32[32,16] -> [16,32]`
plus an all-reduce in the recompute). The two have other local shapes, so neither their value
numbers nor their signatures meet, yet each device runs the same number of FLOPs: the global
matmul split over the same devices. hloflops.remat.by_signature pairs such a recompute with a
forward matmul of its opcode, its name and its per-device FLOPs that reads the same frame inputs
(both known): the same weights and activations, so the same layer's einsum.

A reduce is split the same way: the forward sums a layer norm's features whole on each device,
the recompute sums a shard of them and all-reduces the partial sums (TPU draw 45, FSDP). Its
per-device FLOPs are fewer, so a reduce pairs on what the partitioner keeps: its result, the
dimensions it reduces and the extents of those it keeps, with each reduced extent of one a
whole multiple of the other's (`partitioned_alike`), reading the same known inputs under the
same name. The all-reduce completing its partial sums is then recompute with it
(hloflops.remat.collectives)."""

from __future__ import annotations

from hloflops.cost.rules import dot_flops
from hloflops.cost.windows import convolution_flops
from hloflops.remat.op_kinds import MATMUL_OPCODES, shape_key
from hloparse.ir import Instruction, Module, Shape


def is_partitioned(module: Module) -> bool:
    """After optimization, split over several partitions (the header's `num_partitions`): only
    there did a partitioner choose each matmul's local shapes."""
    try:
        partitions = int(module.attributes.get("num_partitions", "1"))
    except ValueError:
        return False
    return module.is_scheduled and partitions > 1


def partitioned_key(inst: Instruction, shapes: dict[str, Shape]) -> tuple | None:
    """A matmul's opcode and per-device FLOPs, a reduce's `_reduce_key`, or None for another op
    (or one whose operands are out of sight)."""
    if inst.opcode == "reduce":
        return _reduce_key(inst, shapes)
    if inst.opcode not in MATMUL_OPCODES or len(inst.operands) < 2:
        return None
    lhs, rhs = shapes.get(inst.operands[0]), shapes.get(inst.operands[1])
    if lhs is None or rhs is None or lhs.is_tuple or rhs.is_tuple or inst.shape.is_tuple:
        return None
    if inst.opcode == "dot":
        numbers = inst.dot_dimension_numbers
        return "dot", dot_flops(lhs, inst.shape, numbers.lhs_contracting if numbers else ())
    if inst.conv_dim_labels is None:
        return None
    return "convolution", convolution_flops(inst, lhs, rhs, inst.shape)


def _reduced(inst: Instruction) -> tuple[int, ...] | None:
    try:
        return tuple(sorted(int(d) for d in inst.attributes.get("dimensions", "").strip("{}").split(",") if d.strip()))
    except ValueError:
        return None


def _reduce_key(inst: Instruction, shapes: dict[str, Shape]) -> tuple | None:
    """A reduce of one array: its result, the operand's element type and the dimensions it keeps,
    not the extents of those it reduces. Sharded, the partitioner may give the recompute's reduce
    a shard of the reduced dimension, its partial sums all-reduced after, where the forward reduces
    the whole dimension on each device (TPU draw 45, FSDP: a layer norm's sums over the features,
    `[2,64,64] -> [2,64]` in the forward, `[2,64,16] -> [2,64]` plus an all-reduce in the
    recompute): the same sum, fewer FLOPs on each device."""
    if len(inst.operands) != 2 or inst.shape.is_tuple:
        return None
    operand = shapes.get(inst.operands[0])
    dims = _reduced(inst)
    if operand is None or operand.is_tuple or not dims or max(dims) >= len(operand.dims):
        return None
    kept = tuple(None if d in dims else extent for d, extent in enumerate(operand.dims))
    return "reduce", shape_key(inst.shape), operand.element_type, dims, kept


def partitioned_alike(inst: Instruction, twin: Instruction, shapes: dict[str, Shape]) -> bool:
    """Can `inst` and `twin`, of one `partitioned_key`, be one op partitioned two ways? Matmuls
    of equal per-device FLOPs are; reduces where each reduced extent of one is a whole multiple of
    the other's (one reduces a shard of what the other reduces whole)."""
    if inst.opcode != "reduce":
        return True
    mine, theirs = shapes.get(inst.operands[0]), shapes.get(twin.operands[0])
    if mine is None or theirs is None:
        return False
    dims = _reduced(inst) or ()
    pairs = [(mine.dims[d], theirs.dims[d]) for d in dims]
    return all(a and b and (a % b == 0 or b % a == 0) for a, b in pairs) and any(a != b for a, b in pairs)
