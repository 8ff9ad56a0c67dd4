"""Every form a program comes in, read into HLO text: plain or gzip HLO text, XLA's proto dumps
(`HloProto`, `HloModuleProto`, gzip or not), jax.profiler's `*.xplane.pb` (every program it
carries), and StableHLO/MHLO text. The text is then parsed as any other (`hloparse.parse`), so
every form gives the numbers its text dump gives.

Protos and StableHLO are turned into text by XLA itself, through jaxlib (imported only then):
`HloModule.from_serialized_hlo_module_proto(...).to_string()` and
`mlir.mlir_module_to_xla_computation(...)`. Without jax, a proto is printed by
`hloparse.proto_text` (the wire format and XLA's field numbers; a field it does not read is an
error naming it), and StableHLO is a one-line error that names the format and the fix. Which
program an `.xplane.pb` holds is read without jax (`hloparse.protowire`).
"""

from __future__ import annotations

from dataclasses import dataclass

from hloparse import formats, protowire
from hloparse.errors import HloParseError
from hloparse.gzipped import GZIP_MAGIC, InflateError, inflate

NEEDS_JAX = "python3 -m pip install 'hloflops[jax]'"
METADATA_PLANE = b"/host:metadata"  # where jax.profiler's XSpace keeps the programs' HloProtos
HLO_PROTO_STAT = b"Hlo Proto"


@dataclass(frozen=True, slots=True)
class Program:
    name: str  # as XLA named it: the module name, or `name(program_id)` in a profile
    text: str


def _error(path: str, message: str, expected: str = "") -> HloParseError:
    return HloParseError(message, file=path, line=1, column=1, expected=expected)


def programs_of(data: bytes, path: str) -> list[Program]:
    """Every program the file's bytes hold (one, except for a profile's XSpace)."""
    if data[:2] == GZIP_MAGIC:
        try:
            data = inflate(data)
        except InflateError as e:
            raise HloParseError(str(e), file=path, line=1, column=1, text="(binary gzip data)",
                                expected="a complete gzip stream") from None
    found = formats.sniff(data[: formats.HEAD_BYTES], path.removesuffix(".gz"))
    kind = found.kind
    if kind == formats.HLO_TEXT:
        return [Program("", _utf8(data, path))]
    if kind == formats.STABLEHLO:
        return [Program("", stablehlo_to_hlo_text(_utf8(data, path), path))]
    if kind in (formats.HLO_PROTO, formats.HLO_MODULE_PROTO):
        try:
            module = protowire.module_proto_of(data)
        except protowire.WireError as e:
            raise _error(path, f"a damaged {kind}: {e}", "a complete serialized proto") from None
        return [Program(protowire.module_name_of(module), module_proto_to_hlo_text(module, path))]
    if kind == formats.XSPACE:
        return [Program(name, module_proto_to_hlo_text(module, path)) for name, module in xspace_modules(data, path)]
    if kind == formats.PROTO_TEXT:
        raise _error(path, "this is a protobuf in text format (pbtxt), not HLO text",
                     "HLO text (compiled.as_text(), --xla_dump_hlo_as_text) or a binary .hlo.pb")
    if kind == formats.OTHER_BINARY:
        raise _error(path, f"not HLO: binary data that is not an HLO proto ({found.detail}); not UTF-8 text either",
                     "HLO text, an HloProto/HloModuleProto (.hlo.pb) or a profile's .xplane.pb")
    if kind == formats.EMPTY:
        raise _error(path, "empty input", "'HloModule name'")
    # Text that is not HLO: the parser says where and what it expected, with the hint.
    return [Program("", _utf8(data, path))]


def _utf8(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        start = data.rfind(b"\n", 0, e.start) + 1
        end = data.find(b"\n", e.start)
        bad_line = data[start: end if end >= 0 else len(data)].decode("utf-8", errors="replace")
        raise HloParseError("file is not UTF-8 text", file=path, line=line, column=e.start - start + 1,
                            text=bad_line.strip(), expected="UTF-8 text") from None


def format_hint(text: str) -> str:
    """For a parse error at the start of a text: what the text looks like when it is not HLO."""
    found = formats.sniff(text[: formats.HEAD_BYTES].encode("utf-8", "replace"))
    if found.kind == formats.STABLEHLO:
        return (f"this looks like {found.kind}, not HLO text: analyze() and the CLI convert it through jax "
                f"({NEEDS_JAX}), or pass compiled.as_text()")
    if found.kind == formats.PROTO_TEXT:
        return "this looks like a protobuf in text format (pbtxt), not HLO text"
    if found.kind == formats.OTHER_TEXT:
        return "this does not look like HLO text: no HloModule line or computation heading"
    return ""


# ---- through jaxlib, or the wire reader ----------------------------------------------------
def _hlo_module_class():  # noqa: ANN202
    """jaxlib's HloModule, or None without jax."""
    try:
        from jaxlib import _hlo  # jaxlib 0.10 on

        return _hlo.HloModule
    except ImportError:
        pass
    try:
        from jax._src.lib import xla_client  # older jaxlib: the same class in its extension

        return xla_client._xla.HloModule
    except (ImportError, AttributeError):
        return None


def module_proto_to_hlo_text(module_proto: bytes, path: str, *, use_jax: bool = True) -> str:
    """A serialized HloModuleProto as HLO text: XLA's own printing where jax is installed (the
    text its dumps hold, so the same numbers by construction), else `hloparse.proto_text`'s, which
    names any field it does not read."""
    cls = _hlo_module_class() if use_jax else None
    if cls is not None:
        try:
            return cls.from_serialized_hlo_module_proto(module_proto).to_string()
        except Exception as e:  # noqa: BLE001 - XLA refused the proto: say what it said, on one line
            raise _error(path, f"XLA could not read the HLO proto: {' '.join(str(e).split())[:200]}") from None
    from hloparse.proto_text import UnsupportedProto, module_text

    try:
        return module_text(module_proto)
    except UnsupportedProto as e:
        raise _error(path, f"an HLO proto: {e}; reading it needs jax ({NEEDS_JAX}), or dump HLO text "
                     "(--xla_dump_hlo_as_text, compiled.as_text())", "HLO text") from None
    except protowire.WireError as e:
        raise _error(path, f"a damaged HLO proto: {e}", "a complete serialized proto") from None


def stablehlo_to_hlo_text(text: str, path: str) -> str:
    """StableHLO/MHLO text (`lowered.as_text()`) as XLA's HLO text, through jaxlib's converter."""
    try:
        from jax._src.lib import xla_client
    except ImportError:
        raise _error(path, f"this is {formats.STABLEHLO}, not HLO text: converting it needs jax ({NEEDS_JAX}), "
                     "or pass compiled.as_text()", "HLO text") from None
    try:
        computation = xla_client._xla.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False,
                                                                          return_tuple=False)
    except Exception as e:  # noqa: BLE001 - MLIR's parser refused it: its message, on one line
        raise _error(path, f"jax could not convert the StableHLO: {' '.join(str(e).split())[:200]}") from None
    module = computation.get_hlo_module() if hasattr(computation, "get_hlo_module") else None
    return module.to_string() if module is not None else computation.as_hlo_text()


# ---- profiles -------------------------------------------------------------------------------
def xspace_modules(data: bytes, path: str) -> list[tuple[str, bytes]]:
    """(name, HloModuleProto bytes) of every program in a jax.profiler XSpace, named as XProf names
    them (`jit_f(6)`: module name and program id)."""
    out: list[tuple[str, bytes]] = []
    try:
        for number, _wire, plane in protowire.fields(data):
            if number != 1 or bytes(protowire._first(plane, 2) or b"") != METADATA_PLANE:
                continue
            stat_names: dict[int, bytes] = {}
            events = []
            for field, _w, value in protowire.fields(plane):
                if field == 5:  # map entry: 1 key, 2 XStatMetadata
                    meta = protowire._first(value, 2)
                    if meta is not None:
                        stat_names[protowire._first(meta, 1) or 0] = bytes(protowire._first(meta, 2) or b"")
                elif field == 4:  # map entry: 1 key, 2 XEventMetadata
                    meta = protowire._first(value, 2)
                    if meta is not None:
                        events.append(meta)
            for meta in events:
                name = bytes(protowire._first(meta, 2) or b"").decode("utf-8", "replace")
                for field, _w, stat in protowire.fields(meta):
                    if field == 5 and stat_names.get(protowire._first(stat, 1) or 0) == HLO_PROTO_STAT:
                        proto = protowire._first(stat, 6)
                        if proto is not None:
                            out.append((name, protowire.module_proto_of(bytes(proto))))
    except protowire.WireError as e:
        raise _error(path, f"a damaged XSpace (xplane.pb): {e}") from None
    if not out:
        raise _error(path, "this profile holds no HLO program (no HloProto in its /host:metadata plane)",
                     "a jax.profiler trace of jitted programs")
    return sorted(out)



def load_programs(path: str) -> list[Program]:
    with open(path, "rb") as f:
        return programs_of(f.read(), path)
