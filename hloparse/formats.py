"""Which format a file's bytes are in, read off its first bytes.

Users hold their programs in more forms than HLO text: XLA's proto dumps (`.hlo.pb`, an
`HloProto` wrapping the `HloModuleProto`), XProf's `*.hlo_proto.pb`, jax.profiler's
`*.xplane.pb`, StableHLO/MHLO text (`lowered.as_text()`, `JAX_DUMP_IR_TO`'s `.mlir`), gzip of
any of these, and beside them notes, logs and XLA's side files. `sniff` says which one a file
is, so that each is read by what reads it, and a file that holds no HLO is named for what it is
(batch lists it as skipped; the CLI says what it looks like and what to do) instead of being
reported as a parse error at line 1.

Only the head of the file is looked at (a few KB; a gzip head is inflated up to that much).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from hloparse import protowire

GZIP_MAGIC = b"\x1f\x8b"
HEAD_BYTES = 64 << 10  # how much of a file the sniff reads

# Kinds of input.
HLO_TEXT = "HLO text"
STABLEHLO = "StableHLO/MHLO (MLIR) text"
HLO_MODULE_PROTO = "HloModuleProto (binary)"
HLO_PROTO = "HloProto (binary)"
XSPACE = "jax.profiler XSpace (xplane.pb)"
PROTO_TEXT = "protobuf text format (pbtxt)"
OTHER_TEXT = "text that is not HLO"
OTHER_BINARY = "binary data that is not an HLO proto"
EMPTY = "an empty file"

READABLE = frozenset({HLO_TEXT, STABLEHLO, HLO_MODULE_PROTO, HLO_PROTO, XSPACE})


@dataclass(frozen=True, slots=True)
class Sniffed:
    kind: str  # one of the kinds above
    gzipped: bool = False
    detail: str = ""  # for OTHER_*: what the head looks like (its first line, quoted)

    @property
    def is_module(self) -> bool:
        """Does the file hold HLO, in any form hloflops reads?"""
        return self.kind in READABLE

    def describe(self) -> str:
        what = f"gzip of {self.kind}" if self.gzipped else self.kind
        return f"{what} ({self.detail})" if self.detail else what


# The first line that says something, past blank lines and comments.
_MLIR_START = re.compile(r"(?:module\b|func\.func\b|#loc|#map|\"builtin\.module\"|\"func\.func\"|"
                         r"stablehlo\.|mhlo\.|\"?(?:stablehlo|mhlo)\.)")
# `[ENTRY] [%]name [(signature)] {` opens a computation; a module may be written without its header.
_HEADING = re.compile(r"(?:ENTRY\s+)?%?[A-Za-z_][\w.\-]*\s*(?:\(.*\)\s*->\s*.*)?\{\s*$")
_PROTO_TEXT = re.compile(r"(?:hlo_module|name|computations|entry_computation_name)\s*[:{]")


def sniff(head: bytes, name: str = "") -> Sniffed:
    """The format of a file from its first bytes (`HEAD_BYTES` are enough) and its name."""
    if head[:2] == GZIP_MAGIC:
        try:
            inner = zlib.decompressobj(wbits=31).decompress(head, HEAD_BYTES)
        except zlib.error as e:
            return Sniffed(OTHER_BINARY, True, f"corrupt gzip data: {e}")
        inner_name = name[:-3] if name.endswith(".gz") else name
        found = sniff(inner, inner_name)
        return Sniffed(found.kind, True, found.detail)
    if not head.strip():
        return Sniffed(EMPTY)
    text = _as_text(head)
    if text is None:
        # Text with a bad byte further on is still text (the reader says where the byte is).
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as e:
            before = _as_text(head[: e.start])
            if before is not None and e.start >= 16 and _sniff_text(before).kind in (HLO_TEXT, STABLEHLO):
                return _sniff_text(before)
        return _sniff_binary(head, name)
    return _sniff_text(text)


def _as_text(head: bytes) -> str | None:
    """The head as text, or None when it is binary (a multi-byte character cut at the end is fine)."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:
            return None
        text = head[: e.start].decode("utf-8")
    # A proto can be valid UTF-8 (short names, small varints): its first bytes give it away (a key,
    # often a newline, then a length below 32). Text may hold control characters further on.
    first = text.lstrip()[:1]
    if "\x00" in text or (first and not first.isprintable()):
        return None
    return text


def _first_line(text: str) -> str:
    in_comment = False
    for raw in text.splitlines():
        line = raw.strip()
        if in_comment:
            end = line.find("*/")
            if end < 0:
                continue
            line, in_comment = line[end + 2:].strip(), False
        if line.startswith("/*"):
            end = line.find("*/", 2)
            if end < 0:
                in_comment = True
                continue
            line = line[end + 2:].strip()
        if line and not line.startswith("//"):
            return line
    return ""


def _sniff_text(text: str) -> Sniffed:
    line = _first_line(text)
    if line.startswith("HloModule") and (len(line) == 9 or not (line[9].isalnum() or line[9] == "_")):
        return Sniffed(HLO_TEXT)
    if _MLIR_START.match(line):
        return Sniffed(STABLEHLO)
    if _HEADING.match(line):
        return Sniffed(HLO_TEXT)
    if _PROTO_TEXT.match(line):
        return Sniffed(PROTO_TEXT)
    shown = line if len(line) <= 60 else line[:57] + "..."
    return Sniffed(OTHER_TEXT, detail=f"first line {shown!r}; no HloModule line or computation heading")


def _sniff_binary(head: bytes, name: str) -> Sniffed:
    fields = protowire.top_level_fields(head)
    if fields is None or not fields:
        return Sniffed(OTHER_BINARY, detail=f"starts with bytes {head[:8].hex(' ')}")
    if name.endswith("xplane.pb"):
        return Sniffed(XSPACE)
    kind = protowire.hlo_proto_kind(head)
    if kind == "module":
        return Sniffed(HLO_MODULE_PROTO)
    if kind == "wrapped":
        return Sniffed(HLO_PROTO)
    if kind == "xspace":
        return Sniffed(XSPACE)
    return Sniffed(OTHER_BINARY, detail="a protobuf message, but not an HloProto, HloModuleProto or XSpace")


def read_head(path: str, size: int = HEAD_BYTES) -> bytes:
    with open(path, "rb") as f:
        return f.read(size)
