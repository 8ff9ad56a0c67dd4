"""What XLA's parser checks in the module header (`HloModule name, key=value, ...`): the name is
an identifier, each attribute is one XLA knows, given once, and the few whose values it reads
eagerly are well-formed (the entry computation layout's shapes, booleans). Facts from
`hlo_parser.cc`'s ParseHloModule, each put to XLA itself (tests/untrusted/test_hostile_xla_acceptance.py).
"""

from __future__ import annotations

import re

from hloparse.attributes import AttributeSyntaxError, find_close, iter_top_level
from hloparse.shapes import NotAPermutation, ShapeSyntaxError, parse_shape

# The header attributes jaxlib 0.10.2's parser declares (any other: "unexpected attribute").
HEADER_ATTRIBUTES = frozenset({
    "alias_passthrough_params", "allow_spmd_sharding_propagation_to_output",
    "allow_spmd_sharding_propagation_to_parameters", "buffer_donor", "entry_computation_layout", "frontend_attributes",
    "input_output_alias", "is_scheduled", "num_partitions", "origin_recovery_table", "replica_count",
})
_BOOLEAN = frozenset({"is_scheduled", "alias_passthrough_params"})
_NAME = re.compile(r"[A-Za-z_][\w.\-]*:?")  # `HloModule m:` is read as `m`
_COMMENT = re.compile(r"/\*.*?(?:\*/|\Z)", re.S)  # an unterminated one runs to the end: no rescanning
_KEY = re.compile(r"[A-Za-z_][\w.\-]*")


class HeaderError(ValueError):
    """A header XLA rejects: the message, an offset into the piece checked, what was expected."""

    def __init__(self, message: str, offset: int, expected: str) -> None:
        super().__init__(message)
        self.offset = offset
        self.expected = expected


def check_module_name(name: str) -> None:
    if _NAME.fullmatch(name) is None:
        raise HeaderError(f"bad module name {name[:40]!r}", 0, "a name of letters, digits, '_', '.' and '-'")


def check_attribute(key: str, value: str, seen: dict[str, str]) -> None:
    if _KEY.fullmatch(key) is None:
        raise HeaderError(f"expects an attribute name, got {key[:40]!r}", 0, "attribute=value")
    if key not in HEADER_ATTRIBUTES:
        raise HeaderError(f"unexpected header attribute {key[:40]!r}", 0,
                          "one of " + ", ".join(sorted(HEADER_ATTRIBUTES)))
    if key in seen:
        raise HeaderError(f"header attribute {key!r} appears twice", 0, "each attribute once")
    if key in _BOOLEAN and value not in ("true", "false"):
        raise HeaderError(f"{key} expects true or false, got {value[:40]!r}", 0, "true or false")
    if key == "entry_computation_layout":
        _check_program_shape(value)


def _check_program_shape(value: str) -> None:
    """`{(param shape, ...)->result shape}`: every shape must parse (XLA does not hold them to the
    entry computation's, so neither do we)."""
    expected = "{(parameter shapes)->result shape}"
    if not (value.startswith("{") and value.endswith("}")):
        raise HeaderError("entry_computation_layout must be {...}", 0, expected)
    inner = _COMMENT.sub(" ", value[1:-1]).strip()  # XLA prints `/*index=5*/` before every fifth shape
    if _all_parse(_ARRAYS_TO_ARRAY.fullmatch(inner)):
        return
    try:
        if not inner.startswith("("):
            raise HeaderError("expects ( before the parameter shape list", 0, expected)
        close = find_close(inner, 0)
        arrow = inner[close + 1:].lstrip()
        if not arrow.startswith("->"):
            raise HeaderError("expects -> after the parameter shapes", 0, expected)
        for s, e in iter_top_level(inner, 1, close):
            if inner[s:e].strip() or e < close:
                _check_shape(inner[s:e])
        _check_shape(arrow[2:])
    except (AttributeSyntaxError, ShapeSyntaxError) as e:
        raise HeaderError(f"entry_computation_layout: {e}", 0, expected) from None


# `(f32[2]{0}, s32[]) -> (f32[2]{0}, s32[])`, the form nearly every layout takes: its shapes are
# checked without the bracket-by-bracket scans below, which are left to say what is wrong with any
# other. (No bracket or quote inside a shape but a layout's `T(8,128)`: the scans would see the
# same structure.)
_PLAIN = r'[^(){}\[\]"]'
_ARRAY = rf"[a-z][a-z0-9]*\[{_PLAIN}*\](?:\{{(?:{_PLAIN}|\({_PLAIN}*\))*\}})?"
_ARRAYS = rf"\(\s*(?:(?:{_ARRAY}\s*,\s*)*{_ARRAY})?\s*\)"
_ARRAYS_TO_ARRAY = re.compile(rf"({_ARRAYS})\s*->\s*({_ARRAY}|{_ARRAYS})")
_ARRAY_TEXT = re.compile(_ARRAY)


def _all_parse(m: re.Match[str] | None) -> bool:
    """Does every shape of a matched simple layout parse?"""
    if m is None:
        return False
    try:
        for text in _ARRAY_TEXT.findall(m.group(1)):
            _check_shape(text)
        _check_shape(m.group(2))
    except ShapeSyntaxError:
        return False
    return True


def _check_shape(text: str) -> None:
    try:
        parse_shape(text)
    except NotAPermutation:
        pass  # XLA's parser takes it, and nothing here uses the entry layout's layouts


def program_shape(value: str) -> tuple[list, object] | None:
    """The (parameter shapes, result shape) of an `entry_computation_layout` value already checked
    by check_attribute, or None where it does not take the usual `{(...)->...}` form."""
    inner = _COMMENT.sub(" ", value.strip()[1:-1]).strip()
    if not inner.startswith("("):
        return None
    try:
        close = find_close(inner, 0)
        arrow = inner[close + 1:].lstrip()
        if not arrow.startswith("->"):
            return None
        params = [_shape_ignoring_layout(inner[s:e]) for s, e in iter_top_level(inner, 1, close) if inner[s:e].strip()]
        return params, _shape_ignoring_layout(arrow[2:])
    except (AttributeSyntaxError, ShapeSyntaxError):
        return None


def _shape_ignoring_layout(text: str):  # noqa: ANN202 - an hloparse Shape
    try:
        return parse_shape(text)
    except NotAPermutation:  # XLA's parser takes such a layout here; only the dimensions matter
        return parse_shape(re.sub(r"\{[^{}]*\}", "", text))
