"""Check a constant's literal against its shape: nesting, element counts and value ranges.

Values are not kept (the cost analysis never needs them); this only rejects what XLA's parser
rejects, such as `f16[] constant(-65520)` (rounds to infinity) or `s4[] constant(8)`.
"""

from __future__ import annotations

import re

from hloparse.ir import Shape


class LiteralError(ValueError):
    def __init__(self, message: str, expected: str = "") -> None:
        super().__init__(message)
        self.expected = expected


_TOKEN = re.compile(r"[-+]?nan\([^)]*\)|[{}(),]|[^\s{}(),]+")
_COMMENT = re.compile(r"/\*.*?(?:\*/|\Z)", re.S)  # unterminated: to the end, not a rescan per '/*'

_INT_RANGE = {
    "s1": (-1, 0), "s2": (-2, 1), "s4": (-8, 7), "s8": (-(2**7), 2**7 - 1), "s16": (-(2**15), 2**15 - 1),
    "s32": (-(2**31), 2**31 - 1), "s64": (-(2**63), 2**63 - 1),
    "u1": (0, 1), "u2": (0, 3), "u4": (0, 15), "u8": (0, 2**8 - 1), "u16": (0, 2**16 - 1),
    "u32": (0, 2**32 - 1), "u64": (-(2**63), 2**64 - 1),  # XLA reads u64 values as int64 too: -1 is 2**64-1
}
_MANTISSA_BITS = {"f16": 10, "bf16": 7, "f32": 23, "f64": 52}  # a NaN payload must fit, and not be 0
# (largest finite value, half an ulp at that value): anything at or beyond their sum rounds to
# infinity (or is out of range for types without infinity).
_FLOAT_LIMIT = {
    "f16": (65504.0, 16.0),
    "bf16": (3.3895313892515355e38, 2.0**119),
    "f32": (3.4028234663852886e38, 2.0**103),
    "f64": (1.7976931348623157e308, 0.0),
    "f8e5m2": (57344.0, 4096.0), "f8e4m3fn": (448.0, 16.0), "f8e4m3b11fnuz": (30.0, 1.0),
    "f8e4m3fnuz": (240.0, 8.0), "f8e5m2fnuz": (57344.0, 4096.0), "f8e4m3": (240.0, 8.0),
    "f8e3m4": (15.5, 0.25), "f4e2m1fn": (6.0, 1.0), "f8e8m0fnu": (1.7014118346046923e38, 2.0**126),
}
_COMPLEX_PART = {"c64": "f32", "c128": "f64"}
_NO_NAN_PAYLOAD = frozenset(t for t in _FLOAT_LIMIT if t.startswith(("f8", "f4")))


def check_literal(text: str, shape: Shape) -> None:
    text = _COMMENT.sub(" ", text).strip()
    if not text:
        raise LiteralError("constant has no literal", "a literal value")
    if text in ("{...}", "..."):
        return  # XLA elides large constants when printing
    tokens = _TOKEN.findall(text)
    pos = _value(tokens, 0, shape)
    if pos != len(tokens):
        raise LiteralError(f"unexpected {tokens[pos]!r} token after the literal", "end of the literal")


def _value(tokens: list[str], pos: int, shape: Shape) -> int:
    if shape.is_tuple:
        pos = _expect(tokens, pos, "(")
        for i, element in enumerate(shape.tuple_shapes):
            if i:
                pos = _expect(tokens, pos, ",")
            pos = _value(tokens, pos, element)
        return _expect(tokens, pos, ")")
    if shape.element_type in ("token", "opaque", "buffer"):
        return pos
    if shape.rank and pos < len(tokens) and tokens[pos] != "{":
        return _scalar(tokens, pos, shape.element_type)  # XLA broadcasts a scalar literal
    return _array(tokens, pos, shape, 0)


def _array(tokens: list[str], pos: int, shape: Shape, depth: int) -> int:
    if depth == shape.rank:
        if pos < len(tokens) and tokens[pos] == "{" and shape.rank:
            raise LiteralError(f"expects nested array in rank {shape.rank}, but sees larger", "a scalar")
        return _scalar(tokens, pos, shape.element_type)
    if pos >= len(tokens) or tokens[pos] != "{":
        if depth == 0 and shape.rank and pos < len(tokens) and tokens[pos] not in "{}(),":
            # `constant(1)` for a rank>0 shape is not allowed; XLA wants nested braces.
            raise LiteralError(f"expects nested array in rank {shape.rank}, but sees a scalar", "'{'")
        got = tokens[pos] if pos < len(tokens) else "end of literal"
        raise LiteralError(f"unexpected {got!r} token", "'{'")
    pos += 1
    count = 0
    while pos < len(tokens) and tokens[pos] != "}":
        if count and tokens[pos] == ",":
            pos += 1  # XLA also accepts nested arrays with the comma left out
        if depth + 1 < shape.rank and (pos >= len(tokens) or tokens[pos] != "{"):
            raise LiteralError(f"expects nested array in rank {shape.rank}, but sees a scalar", "'{'")
        pos = _array(tokens, pos, shape, depth + 1)
        count += 1
    pos = _expect(tokens, pos, "}")
    dim = shape.dims[depth]
    if count != dim and dim >= 0 and not shape.dynamic:
        raise LiteralError(f"expects {dim} elements in dimension {depth}, but sees {count}", f"{dim} elements")
    return pos


def _scalar(tokens: list[str], pos: int, element_type: str) -> int:
    if element_type in _COMPLEX_PART:
        pos = _expect(tokens, pos, "(")
        part = _COMPLEX_PART[element_type]
        pos = _scalar(tokens, pos, part)
        pos = _expect(tokens, pos, ",")
        pos = _scalar(tokens, pos, part)
        return _expect(tokens, pos, ")")
    if pos >= len(tokens):
        raise LiteralError("literal ends early", "a value")
    token = tokens[pos]
    if element_type == "pred":
        if token not in ("true", "false", "0", "1"):
            raise LiteralError(f"{token!r} is not a pred value", "true or false")
        return pos + 1
    if element_type in _INT_RANGE:
        try:
            value = int(token, 0) if token.lower().startswith(("0x", "-0x")) else int(token)
        except ValueError:
            if token in ("true", "false"):
                return pos + 1
            raise LiteralError(f"{token!r} is not an integer", "an integer") from None
        lo, hi = _INT_RANGE[element_type]
        if not lo <= value <= hi:
            raise LiteralError(f"value {token} is out of range for literal's primitive type "
                               f"{element_type.upper()}", f"{lo}..{hi}")
        return pos + 1
    if element_type in _FLOAT_LIMIT:
        _check_float(token, element_type)
        return pos + 1
    raise LiteralError(f"constants of type {element_type} are not supported", "a numeric type")


def _check_float(token: str, element_type: str) -> None:
    low = token.lower()
    if low.lstrip("-+").startswith("nan"):
        if "(" in low or "0x" in low:
            payload = low[low.find("0x"):].rstrip(")") if "0x" in low else ""
            if element_type in _NO_NAN_PAYLOAD:
                raise LiteralError(f"tries to set NaN payload {payload} on {element_type}", "nan without a payload")
            bits = _MANTISSA_BITS.get(element_type)
            try:
                value = int(payload, 16)
            except ValueError:
                raise LiteralError(f"bad NaN payload in {token!r}", "nan(0x...) with a hexadecimal payload") from None
            if bits is not None and not 0 < value < 2**bits:
                raise LiteralError(f"tries to set NaN payload {payload} to a literal of type {element_type}",
                                   f"a payload in 0x1..{2**bits - 1:#x}")
        return
    if low.lstrip("-+") in ("inf", "infinity"):
        return
    try:
        value = float(token)
    except ValueError:
        raise LiteralError(f"{token!r} is not a number", "a floating-point value") from None
    largest, half_ulp = _FLOAT_LIMIT[element_type]
    if value != value:
        return
    if abs(value) == float("inf") or (half_ulp and abs(value) >= largest + half_ulp) or (
        not half_ulp and abs(value) > largest
    ):
        raise LiteralError(f"value {token} is out of range for literal's primitive type {element_type.upper()}",
                           f"|value| <= {largest}")


def _expect(tokens: list[str], pos: int, want: str) -> int:
    if pos >= len(tokens) or tokens[pos] != want:
        got = tokens[pos] if pos < len(tokens) else "end of literal"
        raise LiteralError(f"unexpected {got!r} token", f"'{want}'")
    return pos + 1
