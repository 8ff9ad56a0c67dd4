"""Shape text -> Shape, with a cache: a large module has fewer than a hundred distinct shapes."""

from __future__ import annotations

import re

from hloparse.ir import ELEMENT_BYTES, NON_ARRAY_TYPES, Layout, Shape


class ShapeSyntaxError(ValueError):
    """Raised with the offset (into the shape text) where the shape stopped making sense."""

    def __init__(self, message: str, offset: int, expected: str) -> None:
        super().__init__(message)
        self.offset = offset
        self.expected = expected


class NotAPermutation(ShapeSyntaxError):
    """A layout that is no permutation of the dimensions: XLA's parser reads it, its verifier and
    our cost rules do not (README, "Untrusted input")."""


# XLA's lexer allows blanks between the element type and its dimensions (`s32 [5696,10,4]`).
_ARRAY = re.compile(r"([a-z][a-z0-9]*)[ \t]*\[([^\]]*)\](?:[ \t]*\{([^{}]*)\})?")
INT64_MAX = 2**63 - 1  # XLA reads dimensions (and most integers) as int64: beyond is a syntax error
_VALID_TYPES = frozenset(ELEMENT_BYTES) | NON_ARRAY_TYPES
_cache: dict[str, Shape] = {}


def parse_shape(text: str) -> Shape:
    """Parse a complete shape; the text must contain nothing else (surrounding spaces allowed)."""
    shape = _cache.get(text)
    if shape is not None:
        return shape
    stripped = text.strip()
    shape, end = shape_at(stripped, 0)
    if end != len(stripped):
        raise ShapeSyntaxError(f"unexpected text after shape: {stripped[end:end + 20]!r}", end, "end of shape")
    if len(_cache) < 100_000:
        _cache[text] = shape
    return shape


def shape_at(text: str, pos: int) -> tuple[Shape, int]:
    """Parse the shape that starts at `pos`; return it and the offset just past it."""
    if pos < len(text) and text[pos] == "(":
        return _tuple_at(text, pos)
    if text.startswith("b(", pos):  # a buffer: b(f32[4]) wraps the array it holds
        inner, end = shape_at(text, pos + 2)
        if end >= len(text) or text[end] != ")":
            raise ShapeSyntaxError("expected ')' closing the buffer shape", end, "')'")
        return Shape("buffer", tuple_shapes=(inner,)), end + 1
    match = _ARRAY.match(text, pos)
    if match is None:
        raise ShapeSyntaxError(f"expected a shape at {text[pos:pos + 20]!r}", pos, "a shape such as f32[2,3]{1,0}")
    key = match.group(0)
    cached = _cache.get(key)
    if cached is not None:
        return cached, match.end()
    element_type, dims_text, layout_text = match.groups()
    if element_type not in _VALID_TYPES:
        raise ShapeSyntaxError(f"unknown element type {element_type!r}", pos, "an element type such as f32")
    dims: list[int] = []
    dynamic: list[bool] = []
    if dims_text.strip():
        for raw in dims_text.split(","):
            raw = raw.strip()
            is_dynamic = raw.startswith("<=")
            if is_dynamic:
                raw = raw[2:].strip()
            if raw == "?":  # unbounded dynamic dimension
                dims.append(-1)
                dynamic.append(True)
                continue
            if not (raw.isdigit() and raw.isascii()):
                raise ShapeSyntaxError(f"bad dimension {raw[:30]!r}", pos + len(element_type) + 1, "a dimension size")
            raw = raw.lstrip("0") or "0"
            if len(raw) > 19 or int(raw) > INT64_MAX:  # (the length first: int() of 10^6 digits is slow)
                raise ShapeSyntaxError(f"dimension {raw[:30]} is beyond int64", pos + len(element_type) + 1,
                                       f"a dimension size up to {INT64_MAX}")
            dims.append(int(raw))
            dynamic.append(is_dynamic)
    if element_type in NON_ARRAY_TYPES and dims:
        raise ShapeSyntaxError(f"{element_type} takes no dimensions", pos, f"{element_type}[]")
    layout = _layout(layout_text, len(dims), pos) if layout_text is not None else None
    shape = Shape(element_type, tuple(dims), tuple(dynamic) if any(dynamic) else (), layout)
    _cache[key] = shape
    return shape, match.end()


def _layout(text: str, rank: int, pos: int) -> Layout:
    head, _, details = text.partition(":")
    head = head.strip()
    try:
        minor_to_major = tuple(int(x) for x in head.split(",")) if head else ()
    except ValueError:
        raise ShapeSyntaxError(f"bad layout {{{text}}}", pos, "a layout such as {1,0}") from None
    if minor_to_major and len(minor_to_major) != rank:  # XLA's parser rejects this one itself
        raise ShapeSyntaxError(f"Dimensions size is {rank}, but minor to major size is {len(minor_to_major)}", pos,
                               f"a layout of {rank} dimensions")
    if minor_to_major and sorted(minor_to_major) != list(range(rank)):
        raise NotAPermutation(f"layout {{{text}}} is not a permutation of {rank} dimensions", pos, "a valid layout")
    return Layout(minor_to_major, details.strip())


def _tuple_at(text: str, pos: int) -> tuple[Shape, int]:
    elements: list[Shape] = []
    i = pos + 1
    n = len(text)
    while True:
        i = _skip_space_and_comments(text, i)
        if i < n and text[i] == ")":
            if elements and text[i - 1] == ",":
                raise ShapeSyntaxError("trailing comma in tuple shape", i, "a shape")
            return Shape("tuple", tuple_shapes=tuple(elements)), i + 1
        element, i = shape_at(text, i)
        elements.append(element)
        i = _skip_space_and_comments(text, i)
        if i < n and text[i] == ",":
            i += 1
        elif i >= n or text[i] != ")":
            raise ShapeSyntaxError("expected ',' or ')' in tuple shape", i, "',' or ')'")


def _skip_space_and_comments(text: str, i: int) -> int:
    n = len(text)
    while i < n:
        c = text[i]
        if c in " \t\n\r":
            i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ShapeSyntaxError("unterminated comment", i, "*/")
            i = end + 2
        else:
            break
    return i
