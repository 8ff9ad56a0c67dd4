"""The values inside an HloModuleProto printed as HLO text writes them: shapes and layouts,
literals, metadata, windows, convolution dim_labels, replica groups, shardings (`hloparse.proto_text`
prints the instructions and the module with them). Field numbers from XLA's `xla_data.proto`."""

from __future__ import annotations

import math
import struct
from typing import Iterable

from hloparse.protowire import fields


class UnsupportedProto(ValueError):
    """A field of the proto that this printer does not know (named in the message)."""


# xla_data.proto's PrimitiveType.
ELEMENT_TYPES = {
    1: "pred", 30: "s1", 26: "s2", 21: "s4", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 31: "u1", 27: "u2", 22: "u4",
    6: "u8", 7: "u16", 8: "u32", 9: "u64", 10: "f16", 11: "f32", 16: "bf16", 12: "f64", 19: "f8e5m2", 28: "f8e4m3",
    20: "f8e4m3fn", 23: "f8e4m3b11fnuz", 29: "f8e3m4", 24: "f8e5m2fnuz", 25: "f8e4m3fnuz", 32: "f4e2m1fn",
    33: "f8e8m0fnu", 15: "c64", 18: "c128", 13: "tuple", 14: "opaque", 17: "token", 34: "buffer",
}
INT64_WRAP = 1 << 64
UNBOUNDED = -(1 << 63)  # an unbounded dynamic dimension (`?` in the text)


# ---- reading a message into {field: [values]} ---------------------------------------------
class Message:
    """A message's fields by number, each a list of raw values (ints or memoryviews)."""

    __slots__ = ("values", "what")

    def __init__(self, data: bytes | memoryview | None, what: str) -> None:
        self.what = what
        self.values: dict[int, list] = {}
        if data is not None:
            for number, _wire, value in fields(data):
                self.values.setdefault(number, []).append(value)

    def check(self, known: Iterable[int], names: dict[int, str] | None = None) -> None:
        # A field left at its default (an empty message, a zero) says nothing, known or not.
        unknown = {n for n in set(self.values) - set(known)
                   if any((len(v) if isinstance(v, memoryview) else v) for v in self.values[n])}
        if unknown:
            n = min(unknown)
            label = (names or {}).get(n, f"field {n}")
            raise UnsupportedProto(f"{self.what}: {label} is not read without jax")

    def has(self, n: int) -> bool:
        return n in self.values

    def int(self, n: int, default: int = 0) -> int:
        values = self.ints(n)
        return values[-1] if values else default

    def ints(self, n: int) -> list[int]:
        out: list[int] = []
        for v in self.values.get(n, ()):
            if isinstance(v, memoryview):  # packed
                i = 0
                while i < len(v):
                    x, i = _varint(v, i)
                    out.append(x - INT64_WRAP if x >= 1 << 63 else x)
            else:
                out.append(v - INT64_WRAP if v >= 1 << 63 else v)
        return out

    def bool(self, n: int) -> bool:
        return bool(self.int(n))

    def str(self, n: int) -> str:
        v = self.values.get(n)
        return bytes(v[-1]).decode("utf-8", "replace") if v else ""

    def strs(self, n: int) -> list[str]:
        return [bytes(v).decode("utf-8", "replace") for v in self.values.get(n, ())]

    def bytes(self, n: int) -> bytes:
        v = self.values.get(n)
        return bytes(v[-1]) if v else b""

    def msg(self, n: int, what: str) -> Message | None:
        v = self.values.get(n)
        return Message(v[-1], what) if v else None

    def msgs(self, n: int, what: str) -> list[Message]:
        return [Message(v, what) for v in self.values.get(n, ())]

    def floats(self, n: int, fmt: str) -> list[float]:
        size = struct.calcsize(fmt)
        out: list[float] = []
        for v in self.values.get(n, ()):
            if isinstance(v, memoryview):
                out.extend(x for (x,) in struct.iter_unpack("<" + fmt, bytes(v)))
            else:  # an unpacked fixed-width value
                out.append(struct.unpack("<" + fmt, int(v).to_bytes(size, "little"))[0])
        return out


def _varint(data: memoryview, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _ints(values: Iterable[int]) -> str:
    return "{" + ",".join(str(v) for v in values) + "}"


# ---- shapes -----------------------------------------------------------------------------
def shape_text(m: Message) -> str:
    m.check({2, 3, 4, 5, 6}, {2: "element_type", 3: "dimensions", 4: "tuple_shapes", 5: "layout"})
    kind = ELEMENT_TYPES.get(m.int(2))
    if kind is None:
        raise UnsupportedProto(f"{m.what}: element type {m.int(2)} is not read without jax")
    if kind == "tuple":
        return "(" + ", ".join(shape_text(s) for s in m.msgs(4, m.what)) + ")"
    if kind in ("token", "opaque"):
        return f"{kind}[]"
    if kind == "buffer":
        raise UnsupportedProto(f"{m.what}: buffer shapes are not read without jax")
    dims = m.ints(3)
    dynamic = m.ints(6)
    text = ",".join("?" if d == UNBOUNDED else ("<=" if i < len(dynamic) and dynamic[i] else "") + str(d)
                    for i, d in enumerate(dims))
    layout = m.msg(5, m.what + " layout")
    printed = layout_text(layout) if layout is not None else ""
    return f"{kind}[{text}]" + ("" if printed == "{}" else printed)  # XLA prints a scalar's as nothing


def layout_text(m: Message) -> str:
    m.check({1, 6, 7, 8, 16}, {9: "dim_level_types", 10: "physical_shape", 11: "index_primitive_type",
                               12: "pointer_primitive_type", 15: "dynamic_shape_metadata_prefix_bytes",
                               17: "split_configs"})
    details = ""
    tiles = m.msgs(6, m.what)
    if tiles:
        details += "T" + "".join("(" + ",".join("*" if d == -9223372036854775808 else str(d) for d in t.ints(1)) + ")"
                                 for t in tiles)
    if m.int(16) > 1:
        details += f"L({m.int(16)})"
    if m.int(7):
        details += f"E({m.int(7)})"
    if m.int(8):
        details += f"S({m.int(8)})"
    return "{" + ",".join(map(str, m.ints(1))) + (":" + details if details else "") + "}"


# ---- literals ---------------------------------------------------------------------------
def _float_text(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x)


def literal_values(m: Message, kind: str) -> list[str]:
    if kind == "pred":
        return ["true" if v else "false" for v in m.ints(2)]
    ints = {"s32": 4, "s64": 5, "u32": 6, "u64": 7}
    if kind in ints:
        values = m.ints(ints[kind])
        if kind in ("u32", "u64"):
            values = [v % INT64_WRAP for v in values]
        return [str(v) for v in values]
    small = {"s8": (15, "b"), "u8": (3, "B"), "s16": (17, "h"), "u16": (16, "H")}
    if kind in small:
        n, fmt = small[kind]
        return [str(v) for (v,) in struct.iter_unpack("<" + fmt, m.bytes(n))]
    if kind == "f32":
        return [_float_text(v) for v in m.floats(8, "f")]
    if kind == "f64":
        return [_float_text(v) for v in m.floats(9, "d")]
    if kind == "f16":
        return [_float_text(v) for (v,) in struct.iter_unpack("<e", m.bytes(11))]
    if kind == "bf16":
        raw = m.bytes(13)
        return [_float_text(struct.unpack("<f", b"\x00\x00" + raw[i:i + 2])[0]) for i in range(0, len(raw), 2)]
    raise UnsupportedProto(f"{m.what}: {kind} constants are not read without jax")


LARGE_CONSTANT = 10  # elements: XLA's printer elides larger constants in its dumps (print_large_constants=false)


def literal_text(m: Message) -> str:
    shape = m.msg(1, m.what + " shape")
    if shape is None:
        raise UnsupportedProto(f"{m.what}: a literal without a shape")
    kind = ELEMENT_TYPES.get(shape.int(2), "?")
    if kind == "tuple":
        return "(" + ", ".join(literal_text(t) for t in m.msgs(10, m.what)) + ")"
    dims = shape.ints(3)
    if dims and math.prod(dims) > LARGE_CONSTANT:
        return "{...}"  # as XLA's dumps print a large constant (its values change no cost)
    values = literal_values(m, kind)
    if not dims:
        return values[0] if values else "0"
    if math.prod(dims) != len(values):
        raise UnsupportedProto(f"{m.what}: a literal of {len(values)} values for {dims}")

    def nest(level: int, start: int) -> tuple[str, int]:
        if level == len(dims):
            return values[start], start + 1
        parts = []
        for _ in range(dims[level]):
            part, start = nest(level + 1, start)
            parts.append(part)
        return "{" + ", ".join(parts) + "}", start

    return nest(0, 0)[0]


# ---- attribute values ---------------------------------------------------------------------
def metadata_text(m: Message) -> str:
    m.check({1, 2, 3, 4, 8, 9, 12, 15, 16, 17, 18, 19})
    parts = []
    for n, key in ((1, "op_type"), (2, "op_name"), (3, "source_file")):
        if m.str(n):
            parts.append(f"{key}={_quote(m.str(n))}")
    for n, key in ((4, "source_line"), (17, "source_end_line"), (18, "source_column"), (19, "source_end_column")):
        if m.int(n):
            parts.append(f"{key}={m.int(n)}")
    if m.str(12):
        parts.append(f"deduplicated_name={_quote(m.str(12))}")
    if m.int(15):
        parts.append(f"stack_frame_id={m.int(15)}")
    if m.str(16):
        parts.append(f"scheduling_name={_quote(m.str(16))}")
    return "{" + " ".join(parts) + "}"


def window_text(m: Message) -> str:
    dims = m.msgs(1, m.what)
    for d in dims:
        d.check({1, 2, 3, 4, 5, 6, 7})
    parts = ["size=" + "x".join(str(d.int(1)) for d in dims)]
    if any(d.int(2, 1) != 1 for d in dims):
        parts.append("stride=" + "x".join(str(d.int(2, 1)) for d in dims))
    if any(d.int(3) or d.int(4) for d in dims):
        parts.append("pad=" + "x".join(f"{d.int(3)}_{d.int(4)}" for d in dims))
    if any(d.int(6, 1) != 1 for d in dims):
        parts.append("lhs_dilate=" + "x".join(str(d.int(6, 1)) for d in dims))
    if any(d.int(5, 1) != 1 for d in dims):
        parts.append("rhs_dilate=" + "x".join(str(d.int(5, 1)) for d in dims))
    if any(d.bool(7) for d in dims):
        parts.append("rhs_reversal=" + "x".join(str(int(d.bool(7))) for d in dims))
    return "{" + " ".join(parts) + "}"


def dim_labels_text(m: Message) -> str:
    """As XLA prints them: '?' everywhere, then the roles in order, then the spatial digits, each
    overwriting the last (a role left at its default, dimension 0, under a digit or another role
    is printed as XLA prints it: `b01_o01->b01` comes back as `f01_o01->f01`, the same numbers)."""
    m.check({3, 4, 6, 7, 8, 9, 10, 11, 12})

    def labels(roles: list[tuple[int, str]], spatial: list[int]) -> str:
        rank = max([d for d, _ in roles] + spatial) + 1
        out = ["?"] * rank
        for dim, char in roles:
            out[dim] = char
        for i, dim in enumerate(spatial):
            out[dim] = str(i)
        return "".join(out)

    lhs = labels([(m.int(7), "b"), (m.int(8), "f")], m.ints(11))
    rhs = labels([(m.int(3), "i"), (m.int(4), "o")], m.ints(6))
    out = labels([(m.int(9), "b"), (m.int(10), "f")], m.ints(12))
    return f"{lhs}_{rhs}->{out}"


def replica_groups_text(groups: list[Message]) -> str:
    return "{" + ",".join(_ints(g.ints(1)) for g in groups) + "}"


def device_list_text(m: Message) -> str:
    m.check({1, 2})
    iota = m.msg(2, m.what)
    if iota is None:
        return replica_groups_text(m.msgs(1, m.what))
    iota.check({1, 2, 3, 4})
    text = f"[{iota.int(1)},{iota.int(2)}]<=[{','.join(map(str, iota.ints(3)))}]"
    perm = iota.ints(4)
    if perm and perm != sorted(perm):
        text += f"T({','.join(map(str, perm))})"
    return text


SHARDING_TYPES = {0: "replicated", 1: "maximal", 2: "tuple", 3: "other", 4: "manual", 5: "unknown", 6: "unreduced"}


def sharding_text(m: Message) -> str:
    m.check({1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
    kind = SHARDING_TYPES.get(m.int(1), "?")
    if kind == "tuple":
        return "{" + ", ".join(sharding_text(s) for s in m.msgs(5, m.what)) + "}"
    if kind in ("replicated", "manual", "unknown", "unreduced"):
        return "{" + kind + "}"
    if kind == "maximal":
        return "{maximal device=" + str(m.ints(4)[0] if m.ints(4) else 0) + "}"
    if kind != "other":
        raise UnsupportedProto(f"{m.what}: sharding type {m.int(1)} is not read without jax")
    dims = m.ints(3)
    text = "{devices=[" + ",".join(map(str, dims)) + "]"
    if m.ints(9):
        text += "<=[" + ",".join(map(str, m.ints(9))) + "]"
        perm = m.ints(10)
        if perm and perm != sorted(perm):
            text += "T(" + ",".join(map(str, perm)) + ")"
    else:
        text += ",".join(map(str, m.ints(4)))
    if m.bool(6):
        text += " last_tile_dim_replicate"
    if m.ints(8):
        text += " last_tile_dims={" + ", ".join(SHARDING_TYPES.get(t, "?") for t in m.ints(8)) + "}"
    return text + "}"


def frontend_attributes_text(m: Message) -> str:
    m.check({1})
    pairs = []
    for entry in m.msgs(1, m.what):
        pairs.append((entry.str(1), entry.str(2)))
    return "{" + ",".join(f"{k}={_quote(v)}" for k, v in sorted(pairs)) + "}"
