"""Who takes part in a collective: replica groups in every syntax XLA prints, and the group mode.

    {{0,1},{2,3}}                        explicit groups
    {}                                   empty: every replica / partition / device (by mode)
    [2,4]<=[8]   [2,4]<=[4,2]T(1,0)       iota: iota(8) reshaped, transposed, cut into 2 groups of 4
    mesh['x'=2,'y'=4] {'x'}              mesh axes: the devices that differ only along x
    mesh['x'=8] {'x':(1)2}               a sub-axis (pre-size 1, size 2) of x

Whose ids the groups hold follows XLA's `GetCollectiveOpGroupMode`: without a channel_id they
are replica ids (cross-replica); with one, all-to-all / collective-permute / collective-broadcast
group partition ids (cross-partition), while all-reduce / all-gather / reduce-scatter group
replica ids across every partition (cross-replica-and-partition) unless
`use_global_device_ids=true` makes them flattened device ids. Everything here is exact ints;
text it cannot read raises `GroupSyntaxError`, which the caller reports as "uncounted".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from itertools import product
from typing import Mapping, Sequence

CROSS_REPLICA = "cross_replica"
CROSS_PARTITION = "cross_partition"
CROSS_REPLICA_AND_PARTITION = "cross_replica_and_partition"
FLATTENED_ID = "flattened_id"

# Opcodes whose use_global_device_ids is a bool in XLA (absent = false); for the others it does
# not exist, which XLA passes on as "no value".
_HAS_GLOBAL_IDS_FLAG = frozenset({
    "all-reduce", "all-reduce-start", "reduce-scatter", "all-gather", "all-gather-start",
})


class GroupSyntaxError(ValueError):
    """Replica groups or source-target pairs that this decoder cannot read."""


def group_mode(opcode: str, has_channel_id: bool, use_global_device_ids: bool | None) -> str:
    """XLA's GetCollectiveOpGroupMode for one instruction."""
    flag = bool(use_global_device_ids) if opcode in _HAS_GLOBAL_IDS_FLAG else None
    if not has_channel_id:
        if flag:
            raise GroupSyntaxError("use_global_device_ids=true needs a channel_id")
        return CROSS_REPLICA
    if flag is None:
        return CROSS_PARTITION
    return FLATTENED_ID if flag else CROSS_REPLICA_AND_PARTITION


def _ints(text: str) -> list[int]:
    text = text.strip()
    if not text:
        return []
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise GroupSyntaxError(f"expected integers, got {text!r}") from None


def _product(values: Sequence[int]) -> int:
    n = 1
    for v in values:
        n *= v
    return n


def _transposed_iota(dims: Sequence[int], perm: Sequence[int]) -> list[int]:
    """iota(prod(dims)) reshaped to `dims`, transposed by `perm`, flattened row-major."""
    if sorted(perm) != list(range(len(dims))):
        raise GroupSyntaxError(f"T{tuple(perm)} is not a permutation of {len(dims)} dimensions")
    strides = [_product(dims[i + 1:]) for i in range(len(dims))]
    out_dims = [dims[p] for p in perm]
    return [sum(idx[i] * strides[perm[i]] for i in range(len(perm)))
            for idx in product(*(range(d) for d in out_dims))]


def _chunks(ids: list[int], size: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(ids[i:i + size]) for i in range(0, len(ids), size))


_IOTA = re.compile(r"\[([\d,\s]+)\]\s*<=\s*\[([\d,\s]+)\]\s*(?:T\(([\d,\s]+)\))?")


def _iota_groups(text: str) -> tuple[tuple[int, ...], ...]:
    m = _IOTA.fullmatch(text)
    if m is None:
        raise GroupSyntaxError(f"bad iota replica groups {text!r}")
    shape, dims = _ints(m.group(1)), _ints(m.group(2))
    perm = _ints(m.group(3)) if m.group(3) else list(range(len(dims)))
    if len(shape) != 2 or _product(shape) != _product(dims):
        raise GroupSyntaxError(f"iota groups {text!r}: [groups,size] must hold every id of {dims}")
    return _chunks(_transposed_iota(dims, perm), shape[1])


def _explicit_groups(text: str) -> tuple[tuple[int, ...], ...]:
    body = text.strip()[1:-1].strip()
    if not body:
        return ()
    groups = re.findall(r"\{([^{}]*)\}", body)
    if re.sub(r"\{[^{}]*\}", "", body).replace(",", "").strip():
        raise GroupSyntaxError(f"bad replica groups {text!r}")
    return tuple(tuple(_ints(g)) for g in groups)


# mesh['x'=2,'y'=4] or mesh['x'=2,'y'=4, device_ids=(3,2,1,0)], then {'x'} / {'x':(1)2} / {0}; XLA
# itself prints the device order after the mesh: mesh['x'=2,'y'=4], device_ids=(3,2,1,0) {'x'}, or
# as a transposed iota, device_ids=([2,4]T(1,0)) (iota(8) reshaped to [2,4], transposed, flattened).
_MESH = re.compile(r"mesh\s*\[(.*?)\]\s*(?:,\s*device_ids\s*=\s*\(((?:[^()]|\([^()]*\))*)\)\s*)?\{(.*)\}", re.S)
_IOTA_IDS = re.compile(r"\s*\[([\d,\s]+)\]\s*(?:T\(([\d,\s]+)\))?\s*")


def _device_ids(text: str) -> list[int]:
    """`3,2,1,0` or `[2,4]T(1,0)`: the mesh's devices in order."""
    iota = _IOTA_IDS.fullmatch(text)
    if iota is None:
        return _ints(text)
    dims = _ints(iota.group(1))
    return _transposed_iota(dims, _ints(iota.group(2)) if iota.group(2) else list(range(len(dims))))
_AXIS = re.compile(r"\s*'([^']*)'\s*=\s*(\d+)\s*")
_REF = re.compile(r"\s*(?:'([^']*)'|(\d+))\s*(?::\s*\(\s*(\d+)\s*\)\s*(\d+))?\s*")


def _mesh_groups(text: str) -> tuple[tuple[int, ...], ...]:
    m = _MESH.fullmatch(text.strip())
    if m is None:
        raise GroupSyntaxError(f"bad mesh replica groups {text!r}")
    header, refs = m.group(1), m.group(3)
    device_ids = _device_ids(m.group(2)) if m.group(2) is not None else None
    ids_at = header.find("device_ids")
    if ids_at >= 0:
        found = re.fullmatch(r"\s*device_ids\s*=\s*\(([\d,\s]*)\)\s*", header[ids_at:])
        if found is None:
            raise GroupSyntaxError(f"bad mesh device_ids in {text!r}")
        device_ids = _ints(found.group(1))
        header = header[:ids_at].rstrip().rstrip(",")
    names, sizes = [], []
    for piece in header.split(","):
        axis = _AXIS.fullmatch(piece)
        if axis is None:
            raise GroupSyntaxError(f"bad mesh axis {piece!r}")
        names.append(axis.group(1))
        sizes.append(int(axis.group(2)))
    total = _product(sizes)
    if device_ids is not None and len(device_ids) != total:
        raise GroupSyntaxError(f"mesh of {total} devices lists {len(device_ids)} device_ids")
    # Each referenced axis (or sub-axis) becomes a dimension of its own after reshaping its mesh
    # axis into [pre, size, rest]; the groups run over those dimensions, the rest index groups.
    by_axis: dict[int, list[tuple[int, int]]] = {}
    for piece in refs.split(","):
        ref = _REF.fullmatch(piece)
        if ref is None:
            raise GroupSyntaxError(f"bad mesh axis reference {piece!r}")
        index = names.index(ref.group(1)) if ref.group(1) is not None and ref.group(1) in names else None
        if index is None:
            index = int(ref.group(2)) if ref.group(2) is not None else -1
        if not 0 <= index < len(sizes):
            raise GroupSyntaxError(f"{piece.strip()!r} is not an axis of the mesh")
        pre, size = (int(ref.group(3)), int(ref.group(4))) if ref.group(3) else (1, sizes[index])
        by_axis.setdefault(index, []).append((pre, size))
    dims: list[int] = []
    grouped: list[int] = []
    for index, full in enumerate(sizes):
        prefix = 1
        for pre, size in sorted(by_axis.get(index, [])):
            if pre % prefix or full % (pre * size):
                raise GroupSyntaxError(f"sub-axis ({pre}){size} does not divide axis of size {full}")
            if pre != prefix:
                dims.append(pre // prefix)
            grouped.append(len(dims))
            dims.append(size)
            prefix = pre * size
        if prefix != full or not by_axis.get(index):
            dims.append(full // prefix)
    perm = [d for d in range(len(dims)) if d not in grouped] + grouped
    order = _transposed_iota(dims, perm)
    ids = order if device_ids is None else [device_ids[i] for i in order]
    return _chunks(ids, _product(dims[g] for g in grouped))


@lru_cache(maxsize=4096)  # a module repeats a handful of group texts thousands of times
def parse_replica_groups(raw: str) -> tuple[tuple[int, ...], ...]:
    """The groups a `replica_groups=` value names; () is the empty list (everyone, by mode)."""
    text = raw.strip()
    if text.startswith("{") and text.endswith("}"):
        return _explicit_groups(text)
    if text.startswith("["):
        return _iota_groups(text)
    if text.startswith("mesh"):
        return _mesh_groups(text)
    raise GroupSyntaxError(f"unknown replica groups syntax {raw!r}")


def parse_source_target_pairs(raw: str) -> tuple[tuple[int, int], ...]:
    pairs = _explicit_groups(raw.strip())
    if any(len(p) != 2 for p in pairs):
        raise GroupSyntaxError(f"source_target_pairs must be {{source,target}} pairs: {raw!r}")
    return tuple((p[0], p[1]) for p in pairs)


@dataclass(frozen=True, slots=True)
class Participants:
    """How many devices take part in each group of one collective."""

    mode: str
    sizes: tuple[int, ...]  # one entry per group, in devices (partitions multiplied in)

    @property
    def largest(self) -> int:
        return max(self.sizes, default=1)


def participants(opcode: str, attributes: Mapping[str, str], replica_count: int,
                 num_partitions: int) -> Participants:
    """The group sizes of a collective from its attributes and the module's device counts."""
    get = attributes.get
    return _participants(opcode, get("channel_id") is not None, get("use_global_device_ids"),
                         get("replica_groups"), replica_count, num_partitions)


@lru_cache(maxsize=4096)  # a module repeats a handful of collective signatures thousands of times
def _participants(opcode: str, has_channel_id: bool, flag: str | None, raw: str | None, replica_count: int,
                  num_partitions: int) -> Participants:
    mode = group_mode(opcode, has_channel_id, None if flag is None else flag.strip().lower() == "true")
    groups = parse_replica_groups(raw) if raw is not None else ()
    if not groups:
        if mode == FLATTENED_ID:
            raise GroupSyntaxError("empty replica groups cannot hold flattened device ids")
        everyone = {CROSS_REPLICA: replica_count, CROSS_PARTITION: num_partitions,
                    CROSS_REPLICA_AND_PARTITION: replica_count * num_partitions}[mode]
        return Participants(mode, (everyone,))
    for group in groups:
        if len(set(group)) != len(group):
            raise GroupSyntaxError(f"device {group} appears twice in one replica group")
    scale = num_partitions if mode == CROSS_REPLICA_AND_PARTITION else 1
    return Participants(mode, tuple(len(g) * scale for g in groups))
