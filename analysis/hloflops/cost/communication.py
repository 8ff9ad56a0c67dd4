"""Bytes one device sends over the interconnect for one execution of a collective.

With n the number of devices in the collective's group and S the bytes of its operand(s), the
standard ring algorithms send, per device:

    all-reduce            2 (n-1)/n x S        (reduce-scatter, then all-gather)
    all-gather              (n-1)/n x S_out    (= (n-1) x S_in)
    reduce-scatter          (n-1)/n x S_in
    all-to-all              (n-1)/n x S        (ragged-all-to-all: S is the input buffer)
    collective-permute      S                  (a device that sends; pairs {i,i} move nothing)
    collective-broadcast    S                  (each device but the last forwards the buffer)
    send                    S                  (to the host, `is_host_transfer=true`: nothing)

n = 1 moves nothing. Each result is rounded up to whole bytes. The async forms count once: the
`-start` op (or the op an `async-start` wraps) sends, `-done` and `recv` send nothing. Groups of
different sizes in one op: the largest group's figure, the busiest device's. An op whose groups
cannot be decoded, or whose shapes contradict its group size, is uncounted (with the reason),
never guessed. The module is one device's program, so these are per-device bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from hloflops.cost.collectives import GroupSyntaxError, participants, parse_source_target_pairs
from hloflops.cost.fused_collectives import FusedRole, fused_roles, reduce_scatter_parts
from hloflops.cost.shapes import elements, size
from hloparse.ir import Computation, Instruction, Module, Shape


@dataclass(frozen=True, slots=True)
class Sent:
    """One execution of one instruction: bytes sent per device, or why that is unknown."""

    bytes: int = 0
    group_size: int | None = None  # devices in the (largest) group; None for point-to-point
    uncounted: str | None = None


NOTHING = Sent()


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _array_bytes(shape: Shape) -> int:
    if not shape.is_tuple:  # the common case, without a generator
        return size(shape) if shape.is_array else 0
    return sum(size(leaf) for leaf in shape.leaves() if leaf.is_array)


def _array_elements(shape: Shape) -> int:
    if not shape.is_tuple:
        return elements(shape) if shape.is_array else 0
    return sum(elements(leaf) for leaf in shape.leaves() if leaf.is_array)


def _operands(comp: Computation, inst: Instruction) -> list[Shape]:
    return list(comp.operand_shapes(inst))


def all_reduce_bytes(s: int, n: int) -> int:
    return _ceil_div(2 * (n - 1) * s, n) if n > 1 else 0


def all_gather_bytes(s_out: int, n: int) -> int:
    return _ceil_div((n - 1) * s_out, n) if n > 1 else 0


def reduce_scatter_bytes(s_in: int, n: int) -> int:
    return _ceil_div((n - 1) * s_in, n) if n > 1 else 0


def all_to_all_bytes(s: int, n: int) -> int:
    return _ceil_div((n - 1) * s, n) if n > 1 else 0


@dataclass(frozen=True, slots=True)
class _Ctx:
    module: Module
    comp: Computation
    inst: Instruction
    replicas: int
    partitions: int

    def group_size(self) -> int:
        return participants(self.inst.opcode, self.inst.attributes, self.replicas, self.partitions).largest

    def mismatch(self, what: str, ratio_: int, n: int) -> Sent:
        """Shapes that say `ratio_` devices take part where the groups say `n`: uncounted."""
        return Sent(uncounted=f"{what} {ratio_} devices but its groups hold {n} (replica_count={self.replicas}, "
                              f"num_partitions={self.partitions})")

    def operand_bytes(self) -> int:
        return sum(_array_bytes(s) for s in _operands(self.comp, self.inst))

    def operand_elements(self) -> int:
        return sum(_array_elements(s) for s in _operands(self.comp, self.inst))


def _all_reduce(ctx: _Ctx) -> Sent:
    n = ctx.group_size()
    return Sent(all_reduce_bytes(ctx.operand_bytes(), n), n)


def _gathered(ctx: _Ctx) -> Shape:
    """The result arrays of an all-gather: all-gather-start's shape is (operands, results)."""
    shape = ctx.inst.shape
    if ctx.inst.opcode == "all-gather-start" and shape.is_tuple and len(shape.tuple_shapes) == 2:
        return shape.tuple_shapes[1]
    return shape


def _all_gather(ctx: _Ctx) -> Sent:
    n = ctx.group_size()
    out = _gathered(ctx)
    if _array_elements(out) != n * ctx.operand_elements():
        ratio_ = _array_elements(out) // max(1, ctx.operand_elements())
        return ctx.mismatch("all-gather result / operands says", ratio_, n)
    return Sent(all_gather_bytes(_array_bytes(out), n), n)


def _reduce_scatter(ctx: _Ctx) -> Sent:
    n = ctx.group_size()
    if ctx.operand_elements() != n * _array_elements(ctx.inst.shape):
        return ctx.mismatch("reduce-scatter operands / result says",
                            ctx.operand_elements() // max(1, _array_elements(ctx.inst.shape)), n)
    return Sent(reduce_scatter_bytes(ctx.operand_bytes(), n), n)


def _all_to_all(ctx: _Ctx) -> Sent:
    n = ctx.group_size()
    return Sent(all_to_all_bytes(ctx.operand_bytes(), n), n)


def _ragged_all_to_all(ctx: _Ctx) -> Sent:
    # How much of the input goes out is decided at run time (send_sizes); the static figure
    # spreads the whole input buffer evenly, as all-to-all does.
    n = ctx.group_size()
    return Sent(all_to_all_bytes(_array_bytes(_operands(ctx.comp, ctx.inst)[0]), n), n)


def _collective_permute(ctx: _Ctx) -> Sent:
    if "slice_sizes" in ctx.inst.attributes:
        return Sent(uncounted="in-place collective-permute with slices: the bytes sent are not modelled")
    pairs = parse_source_target_pairs(ctx.inst.attributes.get("source_target_pairs", "{}"))
    operands = _operands(ctx.comp, ctx.inst)  # combined permutes send every operand
    sends = any(source != target for source, target in pairs)
    return Sent(sum(_array_bytes(s) for s in operands) if sends else 0, None)


def _collective_broadcast(ctx: _Ctx) -> Sent:
    n = ctx.group_size()
    return Sent(ctx.operand_bytes() if n > 1 else 0, n)


def _send(ctx: _Ctx) -> Sent:
    if ctx.inst.attributes.get("is_host_transfer", "false").strip().lower() == "true":
        return NOTHING
    return Sent(_array_bytes(_operands(ctx.comp, ctx.inst)[0]), None)


SENDERS: dict[str, Callable[[_Ctx], Sent]] = {
    "all-reduce": _all_reduce,
    "all-reduce-start": _all_reduce,
    "all-gather": _all_gather,
    "all-gather-start": _all_gather,
    "reduce-scatter": _reduce_scatter,
    "all-to-all": _all_to_all,
    "ragged-all-to-all": _ragged_all_to_all,
    "collective-permute": _collective_permute,
    "collective-permute-start": _collective_permute,
    "collective-broadcast": _collective_broadcast,
    "send": _send,
}


def device_counts(module: Module) -> tuple[int, int]:
    """(replica_count, num_partitions) of the module header; 1 where absent."""
    counts = []
    for key in ("replica_count", "num_partitions"):
        try:
            counts.append(max(1, int(module.attributes.get(key, "1"))))
        except ValueError:
            counts.append(1)
    return counts[0], counts[1]


def sent_bytes(module: Module, comp: Computation, inst: Instruction,
               counts: tuple[int, int] | None = None) -> Sent:
    """What one execution of `inst` sends per device (NOTHING for non-collectives)."""
    sender = SENDERS.get(inst.opcode)
    if sender is None:
        return NOTHING
    replicas, partitions = counts or device_counts(module)
    try:
        return sender(_Ctx(module, comp, inst, replicas, partitions))
    except (GroupSyntaxError, IndexError, KeyError, ValueError) as error:
        return Sent(uncounted=f"cannot decode its groups: {error}")


# What a sender reads besides the shapes and the device counts (channel_id only as present or not).
_READ = ("use_global_device_ids", "replica_groups", "slice_sizes", "source_target_pairs", "is_host_transfer")


def _fused(role: FusedRole, module: Module, comp: Computation, inst: Instruction, devices: tuple[int, int]) -> Sent:
    """What a collective inside a fusion body sends (hloflops.cost.fused_collectives)."""
    if role.kind == "async copy":
        return NOTHING
    if role.kind == "unknown":
        return Sent(uncounted=role.why)
    sent = sent_bytes(module, comp, inst, devices)  # "async start": the collective itself
    if role.kind == "reduce-scatter" and sent.uncounted is None:
        n, parts = sent.group_size or 1, reduce_scatter_parts(comp, inst) or 0
        if n != parts:
            return _Ctx(module, comp, inst, *devices).mismatch("all-reduce-scatter fusion's slice says", parts, n)
        return Sent(reduce_scatter_bytes(sum(map(_array_bytes, comp.operand_shapes(inst))), n), n)
    return sent


class SentBytes:
    """`sent_bytes` of a module's instructions, worked out once per distinct collective: a
    module repeats the same all-reduce (shapes, groups) thousands of times, and each costs a
    dozen small calls. Shapes are compared by identity (the parser shares one per shape text).
    Collectives inside fusion bodies (TPU's async collectives and all-reduce-scatter fusions)
    are charged by their role there."""

    def __init__(self, module: Module):
        self.module = module
        self.devices = device_counts(module)
        self.known: dict[tuple, Sent] = {}
        self.fused = fused_roles(module)

    def of(self, comp: Computation, inst: Instruction) -> Sent:
        if inst.opcode not in SENDERS:
            return NOTHING
        if comp.is_fusion_body and (comp.name, inst.name) in self.fused:
            return _fused(self.fused[comp.name, inst.name], self.module, comp, inst, self.devices)
        attributes = inst.attributes
        try:
            operands = tuple(map(id, comp.operand_shapes(inst)))
        except KeyError:  # an operand the computation lacks: sent_bytes says why, for this one
            return sent_bytes(self.module, comp, inst, self.devices)
        key = (inst.opcode, id(inst.shape), operands, "channel_id" in attributes, *map(attributes.get, _READ))
        sent = self.known.get(key)
        if sent is None:
            sent = self.known[key] = sent_bytes(self.module, comp, inst, self.devices)
        return sent
