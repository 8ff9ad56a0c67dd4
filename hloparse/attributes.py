"""Scanning helpers and decoders for HLO attribute values.

The parser keeps attribute values as raw text; these functions decode the ones the analysis
needs, on first use. Each raises AttributeSyntaxError with an offset into the value text.
"""

from __future__ import annotations

import re
from typing import Iterator

from hloparse.values import ConvDimLabels, WindowDim


class AttributeSyntaxError(ValueError):
    def __init__(self, message: str, offset: int = 0, expected: str = "") -> None:
        super().__init__(message)
        self.offset = offset
        self.expected = expected


# Strings (with escapes), comments, brackets and commas: everything that decides nesting.
# Strings unrolled and possessive (`"(?:[^"\\]|\\.)*"` keeps ~170 bytes of backtracking state a character), and an
# unterminated comment runs to the end (not a rescan of the rest from every '/*').
_SIGNIFICANT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*+"?|/\*.*?(?:\*/|\Z)|[(){}\[\],]', re.S)
_OPEN = {"(": ")", "{": "}", "[": "]"}
_CLOSE = frozenset(")}]")


def _nested_groups(levels: int) -> str:
    """A bracket group nested at most `levels` deep, holding no quote (comments whole, a lone '/'
    as text): what iter_top_level's scan would step through bracket by bracket, with no error and
    no comma at its depth. (Brackets of any kind: the scan counts depth, not kinds.)"""
    text = r"(?:[^(){}\[\]\"/]++|/(?!\*)|/\*(?:[^*]++|\*(?!/))*+\*/)"
    group = rf"[([{{]{text}*+[)\]}}]"
    for _ in range(levels - 1):
        group = rf"[([{{](?:{text}|{group})*+[)\]}}]"
    return group


# _SIGNIFICANT, and whole groups nested up to 8 deep taken in one match (a module header's
# entry_computation_layout and input_output_alias: 25,000 brackets and commas in mixtral's, a
# Python step each). Each character is read by at most the 8 attempts of its enclosing groups.
_SIGNIFICANT_OR_GROUP = re.compile(
    r'"[^"\\]*(?:\\.[^"\\]*)*+"?|/\*.*?(?:\*/|\Z)|' + _nested_groups(8) + r"|[(){}\[\],]", re.S)


def find_close(text: str, open_pos: int) -> int:
    """Offset of the bracket that closes the one at `open_pos` (strings and comments skipped)."""
    stack: list[str] = []
    for m in _SIGNIFICANT.finditer(text, open_pos):
        tok = m.group()
        c = tok[0]
        if c in _OPEN:
            stack.append(_OPEN[c])
        elif c in _CLOSE:
            if not stack or stack.pop() != c:
                raise AttributeSyntaxError(f"unbalanced {c!r}", m.start(), "matching brackets")
            if not stack:
                return m.start()
        elif c == '"' and (len(tok) < 2 or tok[-1] != '"' or tok.endswith('\\"') and not _closed(tok)):
            raise AttributeSyntaxError("unterminated string", m.start(), 'a closing "')
    raise AttributeSyntaxError(f"no closing bracket for {text[open_pos]!r}", len(text), _OPEN.get(text[open_pos], ""))


def _closed(tok: str) -> bool:
    # '"abc\\"' ends with an escaped backslash followed by a real quote.
    backslashes = len(tok) - 1 - len(tok[:-1].rstrip("\\"))
    return backslashes % 2 == 0


def split_top_level(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """(start, end) spans of the comma-separated pieces of text[start:end] at nesting depth 0."""
    return list(iter_top_level(text, start, end))


def iter_top_level(text: str, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int]]:
    """split_top_level's spans one by one: a caller that stops at the first bad piece does not
    pay for a list of a million `,,,,` pieces first."""
    end = len(text) if end is None else end
    depth = 0
    piece_start = start
    for m in _SIGNIFICANT_OR_GROUP.finditer(text, start, end):
        token = m.group()
        c = token[0]
        if c in _OPEN:
            if len(token) == 1:
                depth += 1  # (else a whole group: the depth it leaves is the depth it found)
        elif c in _CLOSE:
            depth -= 1
            if depth < 0:
                raise AttributeSyntaxError(f"unbalanced {c!r}", m.start(), "matching brackets")
        elif c == ",":
            if depth == 0:
                yield piece_start, m.start()
                piece_start = m.end()
        elif c == '"' and not (len(m.group()) >= 2 and m.group().endswith('"') and _closed(m.group())):
            raise AttributeSyntaxError("unterminated string", m.start(), 'a closing "')
    if depth != 0:
        raise AttributeSyntaxError("unbalanced brackets", end, "a closing bracket")
    yield piece_start, end


def unquote(raw: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == '"' and raw[-1] == '"':
        body = raw[1:-1]
        if "\\" not in body:
            return body
        return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)
    return raw


def parse_int_list(raw: str) -> tuple[int, ...]:
    """`{1,2}`, `{}` or a bare `3` -> ints."""
    body = raw.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    body = body.strip()
    if not body:
        return ()
    try:
        return tuple(int(x) for x in body.split(","))
    except ValueError:
        raise AttributeSyntaxError(f"expected a list of integers, got {raw!r}", 0, "{i,j,...}") from None


# `key="string"`, `key={1,2}` (profile_type) or `key=bare`; fields may be comma-separated.
_MD_FIELD = re.compile(r'[\s,]*([A-Za-z_][\w]*)=("[^"\\]*(?:\\.[^"\\]*)*+"|\{[^{}]*\}|[^\s,}]+)')


def parse_metadata(raw: str) -> dict[str, str]:
    """`{op_name="a/b" source_file="x.py" source_line=3}` -> {"op_name": "a/b", ...}."""
    body = raw.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    result: dict[str, str] = {}
    pos = 0
    while pos < len(body):
        m = _MD_FIELD.match(body, pos)
        if m is None:
            if body[pos:].strip(" \t\n,"):
                raise AttributeSyntaxError(f"bad metadata near {body[pos:pos + 20]!r}", pos + 1, "key=value")
            break
        result[m.group(1)] = unquote(m.group(2))
        pos = m.end()
    return result


_WINDOW_FIELD = re.compile(r"\s*(size|stride|pad|lhs_dilate|rhs_dilate|rhs_reversal)=(\S+)")


def parse_window(raw: str) -> tuple[WindowDim, ...]:
    """`{size=3x3 stride=2x2 pad=0_1x0_1 lhs_dilate=1x1 rhs_dilate=2x2}` -> one WindowDim a dim."""
    body = raw.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    fields: dict[str, list[str]] = {}
    pos = 0
    while pos < len(body):
        m = _WINDOW_FIELD.match(body, pos)
        if m is None:
            if body[pos:].strip():
                raise AttributeSyntaxError(f"bad window field near {body[pos:pos + 20]!r}", pos, "size=, stride=, pad=")
            break
        fields[m.group(1)] = m.group(2).split("x")
        pos = m.end()
    if not fields:
        return ()
    rank = len(fields.get("size", next(iter(fields.values()))))
    if any(len(v) != rank for k, v in fields.items() if k != "rhs_reversal"):
        raise AttributeSyntaxError("window fields disagree on the number of dimensions", 0, f"{rank} dimensions")
    dims = []
    try:
        for i in range(rank):
            lo, hi = 0, 0
            if "pad" in fields:
                pad = fields["pad"][i].split("_")
                if len(pad) != 2:
                    raise AttributeSyntaxError(
                        "expects padding_low and padding_high separated by '_'", 0, "low_high"
                    )
                lo, hi = int(pad[0]), int(pad[1])
            dims.append(
                WindowDim(
                    size=int(fields["size"][i]) if "size" in fields else 1,
                    stride=int(fields["stride"][i]) if "stride" in fields else 1,
                    pad_low=lo,
                    pad_high=hi,
                    lhs_dilation=int(fields["lhs_dilate"][i]) if "lhs_dilate" in fields else 1,
                    rhs_dilation=int(fields["rhs_dilate"][i]) if "rhs_dilate" in fields else 1,
                    reversal=i < len(fields.get("rhs_reversal", ())) and fields["rhs_reversal"][i] == "1",
                )
            )
    except ValueError:
        raise AttributeSyntaxError(f"bad number in window {raw!r}", 0, "integers") from None
    return tuple(dims)


def parse_padding(raw: str) -> tuple[tuple[int, int, int], ...]:
    """`0_1x2_3_1` -> ((low, high, interior), ...) for pad's padding= attribute."""
    dims = []
    for part in raw.strip().split("x"):
        nums = part.split("_")
        if len(nums) not in (2, 3):
            raise AttributeSyntaxError(f"bad padding {part!r}", 0, "low_high or low_high_interior")
        try:
            values = [int(x) for x in nums]
        except ValueError:
            raise AttributeSyntaxError(f"bad padding {part!r}", 0, "integers") from None
        dims.append((values[0], values[1], values[2] if len(values) == 3 else 0))
    return tuple(dims)


def parse_dim_labels(raw: str) -> ConvDimLabels:
    """`b01f_01io->b01f`: b/f batch and feature, i/o kernel features, digits spatial dims."""
    text = raw.strip()
    m = re.fullmatch(r"([a-z0-9?]+)_([a-z0-9?]+)->([a-z0-9?]+)", text)  # '?': a dimension with no role
    if m is None:
        raise AttributeSyntaxError(f"bad dim_labels {raw!r}", 0, "labels such as b01f_01io->b01f")
    lhs, rhs, out = m.groups()

    def spatial(labels: str, which: str) -> tuple[int, ...]:
        digits = sorted((c, i) for i, c in enumerate(labels) if c.isdigit())
        if [int(c) for c, _ in digits] != list(range(len(digits))):
            raise AttributeSyntaxError(f"bad spatial labels in {which} {labels!r}", 0, "0, 1, 2, ... once each")
        return tuple(i for _, i in digits)

    def one(labels: str, char: str, which: str) -> int:
        # XLA's parser leaves a role without its label at the proto's default, dimension 0
        # (`012_012->012`, as in XProf's tests: XLA parses and costs it).
        if labels.count(char) > 1:
            raise AttributeSyntaxError(f"{which} labels {labels!r} have more than one {char!r}", 0, char)
        return labels.index(char) if char in labels else 0

    labels = ConvDimLabels(
        input_batch=one(lhs, "b", "input"),
        input_feature=one(lhs, "f", "input"),
        input_spatial=spatial(lhs, "input"),
        kernel_input_feature=one(rhs, "i", "kernel"),
        kernel_output_feature=one(rhs, "o", "kernel"),
        kernel_spatial=spatial(rhs, "kernel"),
        output_batch=one(out, "b", "output"),
        output_feature=one(out, "f", "output"),
        output_spatial=spatial(out, "output"),
    )
    if not (len(labels.input_spatial) == len(labels.kernel_spatial) == len(labels.output_spatial)):
        raise AttributeSyntaxError(f"dim_labels {raw!r} disagree on spatial rank", 0, "equal spatial ranks")
    for part, roles in ((lhs, "bf"), (rhs, "io"), (out, "bf")):
        n = sum(c in part for c in roles)
        if len(part.replace("?", "")) != n + len(labels.input_spatial):
            raise AttributeSyntaxError(f"dim_labels {raw!r} has unknown labels", 0, "b, f, i, o and digits")
    return labels


_SLICE_DIM = re.compile(r"\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]")


def parse_slice(raw: str) -> tuple[tuple[int, int, int], ...]:
    body = raw.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    dims = []
    for start, end in split_top_level(body):
        piece = body[start:end].strip()
        if not piece:
            continue
        m = _SLICE_DIM.fullmatch(piece)
        if m is None:
            raise AttributeSyntaxError(f"bad slice {piece!r}", start, "[start:limit:stride]")
        dims.append((int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)))
    return tuple(dims)


_ONE_NAME = re.compile(r"%?([\w.\-:]+)")


def parse_computation_list(raw: str) -> tuple[str, ...]:
    """`{%a, %b}` or `%a` -> names without '%'."""
    single = _ONE_NAME.fullmatch(raw)
    if single is not None:  # the usual `calls=%fused_computation.12`
        return (single.group(1),)
    body = raw.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    names = tuple(p.strip().lstrip("%") for p in body.split(",") if p.strip())
    for n in names:
        if not re.fullmatch(r"[\w.\-:]+", n):
            raise AttributeSyntaxError(f"bad computation name {n!r}", 0, "a computation name")
    return names
