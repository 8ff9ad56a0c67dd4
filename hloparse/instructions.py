"""One instruction statement (`[ROOT] %name = shape opcode(operands), attr=value, ...`) -> Instruction.

The full decoder: every form XLA reads, with errors. (The common compiled form takes the fast
path in fast_path.py first, which shares the patterns and the shape cache below.) It works on the
statement text with a handful of regular expressions and bracket scans instead of a token-level
grammar. Errors carry an offset into the statement; the caller turns it into a line and column.
"""

from __future__ import annotations

import re
from typing import Iterator

from hloparse import opcodes
from hloparse.attribute_names import unknown_attribute
from hloparse.attributes import AttributeSyntaxError, find_close, iter_top_level, split_top_level
from hloparse.call_sites import CALL_ATTRIBUTES, call_sites, wrapped_computation_name
from hloparse.ir import CallSite, Instruction, Shape
from hloparse.shapes import ShapeSyntaxError, parse_shape, shape_at


class StatementError(ValueError):
    def __init__(self, message: str, offset: int, expected: str = "") -> None:
        super().__init__(message)
        self.offset = offset
        self.expected = expected


class UnreadableHead(StatementError):
    """Not even `[ROOT] name =` could be read: the statement is not an instruction as written."""


class NextStatementAt(Exception):
    """Another statement starts at `offset` on the same line (XLA's parser allows it)."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


# Computations written inline as attribute values (`to_apply={ ... }`) are collected here by
# decode_statement as (name, body text, offset of the body in the statement).
InlineComputations = list[tuple[str, str, int]]


_HEAD = re.compile(r"\s*(ROOT\s+)?%?([A-Za-z0-9_][\w.\-]*)\s*=\s*")
_OPCODE = re.compile(r"\s*(?:/\*.*?\*/\s*)*([a-z][a-z0-9\-]*)\s*\(", re.S)  # a /* comment */ may precede it
_ATTR = re.compile(r"\s*([A-Za-z_][\w\-.]*)\s*=\s*", re.S)
_OPERAND_NAME = re.compile(r"%?([A-Za-z0-9_][\w.\-]*)")
# An unterminated comment runs to the end: matching `/\*.*?\*/` from every `/*` of a long run
# of them would rescan the rest of the text each time.
_INDEX_COMMENT = re.compile(r"/\*.*?(?:\*/|\Z)", re.S)
_KNOWN = frozenset(opcodes.ARITY)
_shape_cache: dict[str, Shape] = {}  # shape text as written before the opcode -> Shape
_ONLY_SHAPE = re.compile(r"[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?")
_BRACKETED = re.compile(r"\[[^\]]*\]|\{[^}]*\}")
_EMBEDDED_STATEMENT = re.compile(
    r"\s(?:ROOT\s+)?%?[A-Za-z0-9_][\w.\-]*\s*=\s*(?:\(|b\(|[a-z][a-z0-9]*\[|[a-z][a-z0-9\-]*\()"
)
_SHAPED_OPERAND = re.compile(r"([a-z][a-z0-9]*\[[^\]]*\](?:\{[^{}]*\})?)\s+%([\w.\-]+)")
_PERCENT_NAME = re.compile(r"%([\w.\-]+)")
_ATTR_SPLIT = re.compile(r",\s*([A-Za-z_][\w\-.]*)\s*=\s*")
_STARTS_STATEMENT = re.compile(r"\s*(?:ROOT\s+)?%?[A-Za-z0-9_][\w.\-]*\s*=\s*(?:\(|b\(|[a-z][a-z0-9]*\[)")
_SHAPELESS = re.compile(r"(?!b\()[a-z][a-z0-9\-]*\s*\(")  # `add(...)` straight after '='
_NESTED = re.compile(r"\s*(?:(?:\(|b\(|[a-z][a-z0-9]*\[)[^%]*?[\]})]\s*)?[a-z][a-z0-9\-]*\s*\(", re.S)

def _cached_shape(text: str) -> Shape | None:
    """parse_shape through the decoder's cache; None if the text is not a shape."""
    try:
        shape = parse_shape(text)
    except ShapeSyntaxError:
        return None
    if len(_shape_cache) < 50_000:
        _shape_cache[text] = shape
    return shape


def decode_statement(
    stmt: str, computation: str, nested: list[Instruction] | None = None, inline: InlineComputations | None = None
) -> tuple[Instruction, list[Instruction]]:
    """Decode one instruction statement. Returns the instruction and, for the `op-start` async
    shorthand, the instructions of the computation XLA synthesises around the wrapped op.
    Operands written as instructions (`add(f32[] parameter(0), ...)`) are appended to `nested`."""
    head = _HEAD.match(stmt)
    if head is None:
        raise UnreadableHead("expected an instruction", 0, "[ROOT] name = shape opcode(operands)")
    is_root = head.group(1) is not None
    name = head.group(2)
    pos = head.end()
    shape: Shape | None
    space = stmt.find(" ", pos)
    shape = _shape_cache.get(stmt[pos:space]) if space > 0 else None
    if shape is not None and stmt[space + 1 : space + 2] != "{":  # not `f32[2] {1,0}`
        pos = space
    elif shape is None and _SHAPELESS.match(stmt, pos):
        shape = None  # XLA infers it; so do we, once the whole module is read (infer.py)
    else:
        try:
            shape, end = shape_at(stmt, pos)
        except ShapeSyntaxError as e:
            raise StatementError(str(e), e.offset, e.expected) from None
        if end == space and len(_shape_cache) < 50_000:
            _shape_cache[stmt[pos:end]] = shape
        pos = end
    op = _OPCODE.match(stmt, pos)
    if op is None:
        raise StatementError("expected an opcode followed by '('", pos, "an opcode such as add(")
    opcode = op.group(1)
    open_pos = op.end() - 1
    close = stmt.find(")", open_pos)
    if close < 0 or "(" in stmt[open_pos + 1 : close] or '"' in stmt[open_pos + 1 : close]:
        try:
            close = find_close(stmt, open_pos)
        except AttributeSyntaxError as e:
            raise StatementError(str(e), e.offset, e.expected or "')'") from None
    attributes: dict[str, str] = {}
    operands, operand_shapes = _operands(stmt, opcode, open_pos + 1, close, attributes, name, computation, nested)
    written = len(attributes)  # the operands' part may hold a constant's literal or a parameter's number
    _attributes(stmt, close + 1, attributes)
    if "device_ids" in attributes:
        _join_mesh_device_ids(attributes)
    if len(attributes) > written:
        _check_attribute_names(stmt, opcode, list(attributes)[written:], close + 1)

    wrapped: list[Instruction] = []
    if inline is not None and not CALL_ATTRIBUTES.isdisjoint(attributes):
        _inline_computations(stmt, f"{computation}.{name}", attributes, inline)
    if opcode not in _KNOWN:
        base = opcodes.async_shorthand_base(opcode)
        if base is None:  # XLA's list of opcodes is closed: a misspelt one is an error, as there
            raise StatementError(f"unknown opcode {opcode[:40]!r}", op.start(1), "an HLO opcode such as add")
        opcode, wrapped = _async_shorthand(name, opcode, base, shape, operands, attributes, computation)
    calls: tuple[CallSite, ...] = ()
    if wrapped or not CALL_ATTRIBUTES.isdisjoint(attributes):
        try:
            calls = call_sites(opcode, attributes, name, bool(wrapped))
        except AttributeSyntaxError as e:
            raise StatementError(str(e), 0, e.expected) from None
    inst = new_instruction(name, opcode, shape, operands, attributes, calls, is_root, computation, operand_shapes)
    return inst, wrapped


def new_instruction(
    name: str,
    opcode: str,
    shape: Shape | None,
    operands: tuple[str, ...],
    attributes: dict[str, str],
    calls: tuple[CallSite, ...],
    is_root: bool,
    computation: str,
    operand_shapes: tuple[Shape | None, ...] | None,
    line: int = 0,
    column: int = 0,
) -> Instruction:
    """Instruction(...) without the frozen dataclass's per-field object.__setattr__ (see _Unfrozen)."""
    return unfrozen_instruction(name, opcode, shape, operands, attributes, calls, is_root, line, column, computation,
                                operand_shapes)


class _Unfrozen:
    """Instruction's slot layout without the frozen __setattr__: plain slot stores fill a fresh
    object, which then becomes an Instruction (a __class__ switch CPython allows between classes
    of the same slots), at half the cost of twelve slot-descriptor calls."""

    __slots__ = Instruction.__slots__


_new = object.__new__


def unfrozen_instruction(name: str, opcode: str, shape: Shape | None, operands: tuple[str, ...],
                         attributes: dict[str, str], calls: tuple[CallSite, ...], is_root: bool, line: int,
                         column: int, computation: str, operand_shapes: tuple[Shape | None, ...] | None
                         ) -> Instruction:
    """A fresh Instruction, filled through _Unfrozen's slots. A function, not _Unfrozen's
    __init__: Python 3.11 calls a class's __init__ with its arguments packed in a tuple, a plain
    function without (mixtral's 43,714 instructions: 19 M machine instructions less)."""
    inst = _new(_Unfrozen)
    inst.name = name
    inst.opcode = opcode
    inst.shape = shape
    inst.operands = operands
    inst.attributes = attributes
    inst.calls = calls
    inst.is_root = is_root
    inst.line = line
    inst.column = column
    inst.computation = computation
    inst.inline_operand_shapes = operand_shapes
    inst._decoded = None
    inst.__class__ = Instruction  # type: ignore[assignment]
    return inst  # type: ignore[return-value]


def _operands(
    stmt: str,
    opcode: str,
    start: int,
    end: int,
    attributes: dict[str, str],
    user: str,
    computation: str,
    nested: list[Instruction] | None,
) -> tuple[tuple[str, ...], tuple[Shape | None, ...] | None]:
    body = stmt[start:end]
    if opcode == "constant":
        attributes["literal"] = body.strip()
        return (), None
    if opcode == "parameter":
        number = body.strip()
        if not (number.isdigit() and number.isascii()):
            raise StatementError("parameter expects its number", start, "parameter(N)")
        if len(number) > 19 or int(number) > 2**63 - 1:
            raise StatementError("parameter number beyond int64", start, "parameter(N), N an int64")
        attributes["parameter_number"] = number
        return (), None
    if not body.strip():
        return (), None
    if (
        "%" in body
        and "#" not in body
        and "(" not in body
        and "/*" not in body
        and _BRACKETED.sub("", body).count(",") + 1 == body.count("%")
    ):
        # Compiled modules write every operand as `%name` or `shape %name`, as fast_path.decode_fast reads
        # them: keep the shapes, for the validator to hold them to the operands' own.
        pairs = _SHAPED_OPERAND.findall(body)
        if len(pairs) != body.count("%"):
            return tuple(_PERCENT_NAME.findall(body)), None
        declared = tuple([_shape_cache.get(text) or _cached_shape(text) for text, _ in pairs])
        if None not in declared:
            return tuple([operand for _, operand in pairs]), declared
        # a shape that does not parse: the general path below says where
    names: list[str] = []
    shapes: list[Shape | None] = []
    any_shape = False
    try:
        # All spans at once when few; a long run of commas is read lazily, so that its first empty
        # piece fails before a list of a span per character is made.
        spans = (split_top_level(stmt, start, end) if end - start < 100_000
                 else _checked(iter_top_level(stmt, start, end)))
    except AttributeSyntaxError as e:
        raise StatementError(str(e), e.offset, e.expected) from None
    for s, e in spans:
        piece = stmt[s:e]
        if "/*" in piece:
            piece = _INDEX_COMMENT.sub(" ", piece)
        piece = piece.strip()
        m = _operand(piece)
        if m is None and piece[:1] != "%" and not _NESTED.match(piece):
            m = _glued_operand(piece)  # `(s32[], f32[])%name` or `f32[2]name`: no space needed
        if m is None and nested is not None and _NESTED.match(piece):
            # An operand written as an instruction: XLA names it `<opcode>.anon`.
            auto = f"{user}.operand{len(names)}.anon"
            try:
                inner, wrapped = decode_statement(f"{auto} = {piece.strip()}", computation, nested)
            except StatementError as err:
                raise StatementError(str(err), s, err.expected) from None
            if wrapped:
                raise StatementError("an async op cannot be written as an operand", s, "[shape] %name")
            nested.append(inner)
            names.append(auto)
            shapes.append(inner.shape)
            any_shape = True
            continue
        if m is None and _ONLY_SHAPE.fullmatch(piece):
            continue  # XLA reads a lone `f32[],` as the shape of the operand after it
        if m is None:
            raise StatementError(f"cannot parse operand {piece.strip()!r}", s, "[shape] %name")
        shape_text, operand = m
        if "#" in operand:
            operand = _compact_tuple_access(operand, computation, nested, s)
        if shape_text:
            try:
                shapes.append(parse_shape(shape_text))
            except ShapeSyntaxError as err:
                raise StatementError(str(err), s + err.offset, err.expected) from None
            any_shape = True
        else:
            shapes.append(None)
        names.append(operand)
    return tuple(names), (tuple(shapes) if any_shape else None)


def _glued_operand(piece: str) -> re.Match[str] | None:
    """`shape name` with nothing between them, re-spaced for _OPERAND (None if it is not that)."""
    try:
        _, end = shape_at(piece, 0)
    except ShapeSyntaxError:
        return None
    return _operand(piece[:end] + " " + piece[end:].lstrip())


def _operand(piece: str) -> tuple[str | None, str] | None:
    """`[shape] %name[#i#j...]` (stripped) -> (shape text or None, name), or None. A scan, not
    one regular expression: `(.*?)\\s+name` backtracks quadratically over a run of blanks."""
    parts = piece.rsplit(None, 1)
    if not parts:
        return None
    m = _OPERAND_NAME.match(parts[-1])
    if m is None:
        return None
    name = m.group(1)
    rest = parts[-1][m.end():]
    if rest and (rest[0] != "#" or not all(i.isdigit() and i.isascii() for i in rest[1:].split("#"))):
        return None
    return (parts[0] if len(parts) == 2 else None), name + rest


MAX_TUPLE_ACCESS_CHAIN = 64


def _compact_tuple_access(operand: str, computation: str, nested: list[Instruction] | None, offset: int) -> str:
    """`%t#1#0` (newer XLA) is get-tuple-element(get-tuple-element(t, 1), 0): add those
    instructions (named `t#1` and `t#1#0`; the builder drops repeats) and use the last."""
    if nested is None:
        raise StatementError(f"compact tuple access {operand!r} is not allowed here", offset, "a name")
    base, *indices = operand.split("#")
    if len(indices) > MAX_TUPLE_ACCESS_CHAIN:
        # Each index is an instruction of its own: a chain as long as the file would cost hundreds
        # of bytes per character. No tuple nests this deep in practice (jaxlib 0.10.2 does not
        # read the syntax at all).
        raise StatementError(f"compact tuple access chain of {len(indices)} indices", offset,
                             f"at most {MAX_TUPLE_ACCESS_CHAIN} '#index' steps")
    name = base
    for index in indices:
        element = f"{name}#{index}"
        nested.append(new_instruction(element, "get-tuple-element", None, (name,), {"index": index}, (), False,
                                      computation, None))
        name = element
    return name


def _attributes(stmt: str, start: int, attributes: dict[str, str]) -> None:
    rest = stmt[start:]
    if not rest.strip():
        return
    parts = _ATTR_SPLIT.split(rest)
    if not parts[0].strip() and len(parts) > 1 and all(_balanced(v) for v in parts[2::2]):
        # The common case: no value contains ", key=" (checked by the balance of every value).
        offset = len(parts[0])
        for k in range(1, len(parts), 2):
            offset += len(parts[k - 1]) if k > 1 else 0
            value = parts[k + 1]
            if " = " in value:
                embedded = _embedded_statement(value)
                if embedded is not None:
                    # `..., to_apply=sum ROOT x = ...`: a second statement on the same line.
                    value_start = start + rest.find(value, offset)
                    raise NextStatementAt(value_start + embedded)
        for k in range(1, len(parts), 2):
            key = parts[k]
            if key in attributes:
                raise StatementError(f"attribute {key!r} appears twice", start, "each attribute once")
            attributes[key] = parts[k + 1].strip()
        return
    if "/*" in rest and not rest.lstrip().startswith(","):
        rest = _INDEX_COMMENT.sub(" ", rest)
    if not rest.lstrip().startswith(","):
        if _HEAD.match(rest) and _SHAPELESS.match(rest, _HEAD.match(rest).end()) or _STARTS_STATEMENT.match(rest):
            raise NextStatementAt(start + len(rest) - len(rest.lstrip()))
        raise StatementError(f"unexpected text after operands: {rest.strip()[:30]!r}", start, "',' or end of line")
    try:
        spans = split_top_level(stmt, start) if len(stmt) - start < 100_000 else _checked(iter_top_level(stmt, start))
    except AttributeSyntaxError as e:
        raise StatementError(str(e), e.offset, e.expected) from None
    next(spans := iter(spans))  # the text before the first comma: blank, checked above
    for s, e in spans:
        m = _ATTR.match(stmt, s, e)
        if m is None:
            if not stmt[s:e].strip():
                continue  # a trailing comma
            raise StatementError(f"expected attribute=value, got {stmt[s:e].strip()[:30]!r}", s, "attribute=value")
        key = m.group(1)
        if key in attributes and key not in ("literal", "parameter_number"):
            raise StatementError(f"attribute {key!r} appears twice", s, "each attribute once")
        attributes[key] = stmt[m.end():e].strip()


def _join_mesh_device_ids(attributes: dict[str, str]) -> None:
    """TPU prints a mesh's device order between the mesh and its axes, `replica_groups=mesh['a'=2,
    'b'=2], device_ids=([2,2]T(1,0)) {'a'}`, so the split at top-level commas cuts the value in two:
    the second half is part of replica_groups, not an attribute of its own."""
    groups = attributes.get("replica_groups", "")
    if groups.startswith("mesh[") and groups.endswith("]"):
        attributes["replica_groups"] = f"{groups}, device_ids={attributes.pop('device_ids')}"


def _check_attribute_names(stmt: str, opcode: str, names: list[str], start: int) -> None:
    """XLA's parser rejects an attribute its opcode does not declare (a misspelt name too)."""
    bad = unknown_attribute(opcode, names)
    if bad is not None:
        at = stmt.find(bad, start)
        raise StatementError(f"unexpected attribute {bad[:40]!r} on {opcode}", max(at, start),
                             "an attribute this opcode takes")


def _checked(spans: Iterator[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Spans of a huge piece of text, streamed, with its syntax errors raised as StatementError."""
    try:
        yield from spans
    except AttributeSyntaxError as e:
        raise StatementError(str(e), e.offset, e.expected) from None


def _embedded_statement(value: str) -> int | None:
    """Offset of a statement that starts inside `value` at nesting depth 0, if any."""
    for m in _EMBEDDED_STATEMENT.finditer(value):
        if _balanced(value[: m.start()]):
            return m.start() + 1
    return None


def _balanced(value: str) -> bool:
    return (
        value.count("{") == value.count("}")
        and value.count("(") == value.count(")")
        and value.count("[") == value.count("]")
        and value.count('"') % 2 == 0
    )


def _inline_computations(stmt: str, name: str, attributes: dict[str, str], inline: InlineComputations) -> None:
    for key in CALL_ATTRIBUTES.intersection(attributes):
        value = attributes[key]
        body = value.strip()
        if body.startswith("{") and "=" in body and "(" in body:
            inner = f"{name}.{key}.inline"
            offset = stmt.find(value)
            inline.append((inner, body[1:-1], offset + value.find("{") + 1))
            attributes[key] = inner


# Attributes that belong to the async wrapper rather than to the op it wraps.
_ASYNC_ONLY = frozenset({"async_execution_thread", "async_group_id", "async_wrapped_opcode"})
# Kept on the async-start as well as on the op it wraps.
_SHARED = frozenset({"metadata", "frontend_attributes", "control-predecessors"})


def _async_shorthand(
    name: str,
    opcode: str,
    base: str,
    shape: Shape | None,
    operands: tuple[str, ...],
    attributes: dict[str, str],
    computation: str,
) -> tuple[str, list[Instruction]]:
    """`x = ((operands), result, ctx) all-to-all-start(...)` is XLA's shorthand for an async-start
    whose wrapped computation holds one all-to-all. Build that computation; the -update and -done
    forms simply become async-update and async-done."""
    suffix = opcode[len(base):]
    attributes["async_wrapped_opcode"] = base
    if suffix != "-start":
        return ("async-update" if suffix == "-update" else "async-done"), []
    if shape is None or not (shape.is_tuple and len(shape.tuple_shapes) >= 2 and shape.tuple_shapes[0].is_tuple):
        raise StatementError(
            f"{opcode} must have a tuple shape ((operand shapes), result shape, ...)", 0, "((operands), result, ...)"
        )
    operand_shapes = shape.tuple_shapes[0].tuple_shapes
    if len(operand_shapes) != len(operands):
        raise StatementError(
            f"{opcode} has {len(operands)} operands but its shape lists {len(operand_shapes)}", 0, "matching counts"
        )
    comp = wrapped_computation_name(name)
    params = [
        Instruction(
            name=f"{name}.param_{i}",
            opcode="parameter",
            shape=s,
            operands=(),
            attributes={"parameter_number": str(i)},
            computation=comp,
        )
        for i, s in enumerate(operand_shapes)
    ]
    inner_attributes = {k: v for k, v in attributes.items() if k not in _ASYNC_ONLY}
    inner = Instruction(
        name=f"{name}.wrapped",
        opcode=base,
        shape=shape.tuple_shapes[1],
        operands=tuple(p.name for p in params),
        attributes=inner_attributes,
        calls=_wrapped_call_sites(base, inner_attributes, name),
        is_root=True,
        computation=comp,
    )
    for key in list(attributes):
        if key not in _ASYNC_ONLY and key not in _SHARED:
            del attributes[key]
    attributes["async_wrapped_opcode"] = base
    return "async-start", params + [inner]


def _wrapped_call_sites(opcode: str, attributes: dict[str, str], start_name: str) -> tuple[CallSite, ...]:
    """The call sites of the op an async shorthand wraps."""
    try:
        return call_sites(opcode, attributes, f"{start_name}.wrapped", False)
    except AttributeSyntaxError as e:
        raise StatementError(str(e), 0, e.expected) from None
