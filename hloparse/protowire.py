"""The protobuf wire format, as far as hloflops needs it: walking a message's fields, to tell
which HLO container a file is and to take the `HloModuleProto`s out of it.

A message is a run of fields, each a varint key (field number << 3 | wire type) and a value:
wire type 0 a varint, 1 eight bytes, 2 a varint length and that many bytes (strings, bytes,
nested messages, packed repeats), 5 four bytes. Field numbers are XLA's and TSL's, read off
`xla/service/hlo.proto` and `tsl/profiler/protobuf/xplane.proto`:

- HloProto: 1 hlo_module (HloModuleProto), 3 buffer_assignment.
- HloModuleProto: 1 name, 2 entry_computation_name, 3 computations, 4 host_program_shape, 5 id.
- XSpace: 1 planes (XPlane), 4 hostnames.
- XPlane: 1 id, 2 name, 3 lines, 4 event_metadata (map<int64, XEventMetadata>: entries with
  1 key, 2 value), 5 stat_metadata (map<int64, XStatMetadata>), 6 stats.
- XEventMetadata: 1 id, 2 name, 3 metadata (bytes), 4 display_name, 5 stats (XStat), 6 child_id.
- XStatMetadata: 1 id, 2 name. XStat: 1 metadata_id, 2 double, 3 uint64, 4 int64, 5 str, 6 bytes,
  7 ref (an XStatMetadata id whose name is the value).
"""

from __future__ import annotations

from typing import Iterator

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


def read_varint(data: bytes | memoryview, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(data):
            raise WireError("a varint runs past the end of the data")
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise WireError("a varint longer than 10 bytes")


def fields(data: bytes | memoryview, *, partial: bool = False) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of each field of a message: an int for varints and fixed
    numbers, a memoryview for length-delimited values. `partial`: the data is a file's head, so a
    last field cut short ends the walk instead of raising WireError."""
    view = memoryview(data)
    i, n = 0, len(view)
    while i < n:
        try:
            key, i = read_varint(view, i)
        except WireError:
            if partial:
                return
            raise
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire == VARINT:
            try:
                value, i = read_varint(view, i)
            except WireError:
                if partial:
                    return
                raise
            yield number, wire, value
        elif wire in (FIXED64, FIXED32):
            size = 8 if wire == FIXED64 else 4
            if i + size > n:
                if partial:
                    return
                raise WireError("a fixed-size field runs past the end of the data")
            yield number, wire, int.from_bytes(view[i:i + size], "little")
            i += size
        elif wire == LEN:
            length, i = read_varint(view, i)
            if i + length > n:
                if partial:
                    yield number, wire, view[i:n]
                    return
                raise WireError(f"field {number} runs past the end of the data")
            yield number, wire, view[i:i + length]
            i += length
        else:
            raise WireError(f"wire type {wire} (groups are not used by XLA's messages)")


def top_level_fields(data: bytes) -> list[tuple[int, int]] | None:
    """(number, wire type) of the fields of a file's head, or None when it is not protobuf."""
    try:
        return [(number, wire) for number, wire, _ in fields(data, partial=True)]
    except WireError:
        return None


def _is_name(value: object) -> bool:
    if not isinstance(value, memoryview) or not 0 < len(value) <= 4096:
        return False
    try:
        text = bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return text.isprintable()


def _first(data: bytes | memoryview, number: int) -> object:
    try:
        for n, _wire, value in fields(data, partial=True):
            if n == number:
                return value
    except WireError:
        return None
    return None


def hlo_proto_kind(data: bytes | memoryview) -> str | None:
    """"module" (an HloModuleProto: field 1 its name), "wrapped" (an HloProto: field 1 an
    HloModuleProto), "xspace" (planes named like `/host:metadata`), or None."""
    first = _first(data, 1)
    if not isinstance(first, memoryview):
        return None
    if _is_name(first) and _first(data, 3) is not None:
        return "module"
    if _is_name(_first(first, 1)):
        return "wrapped"
    plane_name = _first(first, 2)
    if _is_name(plane_name) and bytes(plane_name).startswith(b"/"):
        return "xspace"
    return None


def module_proto_of(data: bytes) -> bytes:
    """The HloModuleProto bytes of an HloModuleProto or an HloProto (XLA's `.hlo.pb` dumps)."""
    kind = hlo_proto_kind(data)
    if kind == "module":
        return data
    if kind == "wrapped":
        for number, wire, value in fields(data):
            if number == 1 and wire == LEN:
                return bytes(value)
    raise WireError("neither an HloModuleProto nor an HloProto")


def module_name_of(module_proto: bytes | memoryview) -> str:
    name = _first(module_proto, 1)
    return bytes(name).decode("utf-8", "replace") if isinstance(name, memoryview) else ""


def module_name_in_head(head: bytes | memoryview) -> str:
    """The module name from the first bytes of an HloModuleProto or HloProto, "" if not one."""
    kind = hlo_proto_kind(head)
    if kind == "wrapped":
        head = _first(head, 1)
    elif kind != "module":
        return ""
    return module_name_of(head)
