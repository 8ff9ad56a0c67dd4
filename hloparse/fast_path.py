"""The parser's hot path: instructions in the common compiled form, decoded by one
regular-expression match each (decode_fast for a statement, decode_lines straight off the module
text for the splitter's walk). Anything they do not vouch for (None) goes to the full decoder in
instructions.py, which reports errors; tests hold the two to the same result on the corpus.
"""

from __future__ import annotations

import re

from hloparse import opcodes
from hloparse.attribute_names import ALLOWED, ANY_OPCODE
from hloparse.attributes import AttributeSyntaxError
from hloparse.call_sites import CALL_ATTRIBUTES, call_sites
from hloparse.instructions import (_ATTR_SPLIT, _BRACKETED, _INDEX_COMMENT, _PERCENT_NAME, _SHAPED_OPERAND,
                                   NextStatementAt, StatementError, _attributes, _cached_shape, _shape_cache,
                                   unfrozen_instruction)
from hloparse.ir import CallSite, Instruction, Shape

_OPCODE_NAMES = {op: op for op in opcodes.ARITY}
# The opcodes whose operands are instruction names (a parameter's is its number, a constant's its literal).
_OPERATOR_NAMES = {op: op for op in opcodes.ARITY if op not in ("parameter", "constant")}
_KEY_NAMES: dict[str, str] = {}  # attribute keys, one string each (a few dozen in any module)


# Attribute values, one string each: the same metadata, dimensions, kind, ... recur on thousands
# of instructions (80,683 instructions of a transformer carry 855 distinct metadata values), and a
# module's memory is most of its parse time. Raw text as split (checked by decode_fast) -> the
# value, stripped. Emptied at each module's start (forget_values).
_VALUES: dict[str, str] = {}


def _value(raw: str) -> str:
    value = raw.strip()
    if len(_VALUES) < 100_000:
        _VALUES[raw] = value
    return value


def forget_values() -> None:
    _VALUES.clear()
    _TAILS.clear()
    _PREFIXES.clear()


def _key_name(key: str) -> str:
    if len(_KEY_NAMES) < 1024:  # bounded: a long batch of odd files must not grow it forever
        _KEY_NAMES[key] = key
    return key


# Possessive (`*+`, `?+`): each repeat is followed by what it cannot match, so giving back is
# useless, and not keeping the state to give back makes the match some 15% faster (an optional
# group `(...)?` is a repeat too: `?+` spares it the backtracking frame, -6% a line). (A line
# whose name is `ROOT` fails here for want of giving `ROOT ` back: the full decoder reads it.)
# ` = ` is tried as one literal before the general blanks around '='. Names are spelt
# `A-Za-z0-9_`, not `\w`: an ASCII class is a table look-up per character where `\w` asks
# Unicode (mixtral's lines match 30% faster); a name beyond ASCII is the full decoder's.
_FAST_TEXT = (
    r"(ROOT[ \t]++)?+%?+([A-Za-z0-9_][A-Za-z0-9_.\-]*+)(?: = |[ \t]*+=[ \t]*+)"
    r"([a-z][a-z0-9]*+\[[^\]]*+\](?:\{[^{}]*+\})?+|\([^()]*+\))"  # an array, or a tuple of arrays
    r"[ \t]++([a-z][a-z0-9\-]*+)\("
    # the operands: `%a, %b` (as current XLA prints them), `a, b` (jax's HLO dialect: no '%', no
    # shapes), or anything else without brackets or quotes, for the code below to read
    r"(?:(%[A-Za-z0-9_.\-]++(?:, %[A-Za-z0-9_.\-]++)*+)"
    r"|([A-Za-z_][A-Za-z0-9_.\-]*+(?:, ?[A-Za-z_][A-Za-z0-9_.\-]*+)*+)|([^()\"]*+))\)"
)
_FAST = re.compile(r"[ \t]*+" + _FAST_TEXT)

# The same instruction as a whole line of the module text, for the statement splitter's walk
# (statements.py): its indentation, the groups above (none of them may run past the line's end,
# hence the `\n` added to every negated class), the attributes to the end of the line, the line
# break, and a following line that starts another statement, as the splitter requires of a
# one-line statement. A line that does not end in `,` `=` `{` `(` `[` (nor in a blank: the
# splitter looks at the last character that is not one). The caller checks that the line's
# parentheses balance, which a regular expression cannot.
INSTRUCTION_LINE = re.compile(
    r"([ \t]*+)" + _FAST_TEXT.replace("[^", "[^\n") + r"([^\n]*+)(?<![,={(\[\s])\n"
    r"(?=[ \t]*+(?:%|\}|ROOT |[A-Za-z0-9_.\-]++ = (?:[a-z][a-z0-9]*+\[|\()))"  # `name = shape`: jax's names lack '%'
)


def decode_fast(stmt: str, computation: str, line: int = 0, column: int = 0) -> Instruction | None:
    """The common form of a compiled module's instruction, in one regular-expression match:
    an array or flat tuple shape, `%`-named operands, attributes with no `, key=` inside their values. Returns
    None for anything else; decode_statement then does the full job (and reports errors)."""
    m = _FAST.match(stmt)
    if m is None:
        return None
    return _decoded(*m.groups(), stmt[m.end():], computation, line, column)


def decode_lines(text: str, offset: int, computation: str, line: int, out: list[Instruction]) -> int:
    """Decode the module's lines from `offset` on (the first is `line`) while each is a whole
    INSTRUCTION_LINE that decode_fast reads, appending the instructions to `out`; returns the
    offset where it stopped. It stops after a ROOT line, which the caller counts.
    One regular-expression match per line and no line string, Statement or generator step: the
    hot path of the parser."""
    match, count = INSTRUCTION_LINE.match, text.count
    append = out.append
    m = match(text, offset)
    while m is not None:
        indent, root, name, shape_text, opcode, names, bare, body, tail = m.groups()
        end = m.end()
        # The splitter runs on while a line's parentheses are open. The operands and a tuple shape
        # are balanced as matched: only the attributes and an array's layout may hold others.
        if ("(" in tail or ")" in tail or shape_text[0] != "(" and ("(" in shape_text or ")" in shape_text)) and (
                count("(", offset, end) != count(")", offset, end)):
            break
        shape = _shape_cache.get(shape_text) if names is not None and not tail else None
        plain_opcode = _OPERATOR_NAMES.get(opcode) if shape is not None else None
        if plain_opcode is not None:
            # The commonest line by far (mixtral: 31,000 of 43,714): `%n = f32[2]{0} add(%a, %b)`,
            # a known shape, `%` operands, nothing after them. What _decoded makes of it, without
            # its call and the tests of everything such a line lacks.
            inst = unfrozen_instruction(name, plain_opcode, shape, tuple(names[1:].split(", %")), {}, (),
                                        root is not None, line, len(indent) + 1, computation, None)
        else:
            inst = _decoded(root, name, shape_text, opcode, names, bare, body, tail, computation, line,
                            len(indent) + 1)
            if inst is None:
                break
        append(inst)
        if root is not None:
            return end  # the computation's end, as a rule: the caller counts its roots
        line += 1
        offset = end
        m = match(text, end)
    return offset


def _decoded(root: str | None, name: str, shape_text: str, opcode: str, names: str | None, bare: str | None,
             body: str | None, tail: str, computation: str, line: int, column: int) -> Instruction | None:
    """The instruction whose pieces the fast patterns matched, or None if they do not vouch for it.
    This runs once per instruction of every module, so it is written for speed, in one piece."""
    opcode = _OPCODE_NAMES.get(opcode)  # one shared string per opcode (a module holds 200k of them)
    if opcode is None:
        return None
    shape = _shape_cache.get(shape_text) or _cached_shape(shape_text)
    if shape is None:
        return None
    attributes: dict[str, str] = {}
    operand_shapes: tuple[Shape, ...] | None = None
    if body is None:
        body = names or bare
    if opcode == "parameter":
        if not body.isdigit() or len(body) > 9:  # odd or huge numbers: the full decoder checks them
            return None
        attributes["parameter_number"] = body
        operands: tuple[str, ...] = ()
    elif opcode == "constant":
        attributes["literal"] = body.strip()
        operands = ()
    elif not body:
        operands = ()
    elif names is not None:
        operands = tuple(names[1:].split(", %"))
    elif "%" in body and "#" not in body and _BRACKETED.sub("", body).count(",") + 1 == body.count("%"):
        if "/*" in body:
            body = _INDEX_COMMENT.sub("", body)
        pairs = _SHAPED_OPERAND.findall(body)
        if len(pairs) == body.count("%"):  # every operand written `shape %name`: keep the shapes
            operands = tuple([operand for _, operand in pairs])
            operand_shapes = tuple([_shape_cache.get(text) or _cached_shape(text) for text, _ in pairs])
            if None in operand_shapes:
                return None
        else:
            operands = tuple(_PERCENT_NAME.findall(body))
    elif bare is not None:
        operands = tuple(bare.replace(" ", "").split(","))
    else:
        return None
    calls: tuple[CallSite, ...] = ()
    if tail and not tail.isspace():
        cut = tail.find(_METADATA)  # metadata comes last, as XLA prints it, and is most often distinct
        decoded = _with_last(opcode, tail, cut, "metadata", cut + 11) if cut >= 0 else None  # all allow it
        first = decoded is not None  # a fresh dict, this instruction's own
        if not first:
            key = (opcode, tail)
            decoded = _TAILS.get(key, _UNSEEN)
            first = decoded is _UNSEEN
            if first:
                decoded = _last_attribute(opcode, tail) or _tail_attributes(opcode, tail)
                if len(_TAILS) < 50_000:
                    _TAILS[key] = decoded
            if decoded is None:
                return None
        written, calls = decoded
        if not attributes:
            # Each instruction owns its dict: the first with this text takes the one just made
            # (nothing changes it), later ones a copy (most texts occur once in some modules).
            attributes = written if first else written.copy()
        elif written.keys().isdisjoint(attributes):
            attributes.update(written)  # after the parameter number or literal, as written
        else:
            return None  # an attribute written twice: the full decoder says so
    return unfrozen_instruction(name, opcode, shape, operands, attributes, calls, root is not None, line, column,
                                computation, operand_shapes)


# The attributes after the operands, decoded once per (opcode, text): a module's instructions
# repeat some ten times over what follows their operands (mixtral: 43,714 instructions, 4,401
# distinct), and splitting that text is most of a fast decode. (opcode, text) -> (attributes,
# call sites), or None where decode_fast must leave the instruction to the full decoder. Emptied
# at each module's start (forget_values), like _VALUES.
_TAILS: dict[tuple[str, str], tuple[dict[str, str], tuple[CallSite, ...]] | None] = {}
_UNSEEN = object()


# Most instructions of a traced module end in `, metadata={op_name="..." ...}`, distinct per
# instruction (gemma4: 15,035 distinct tails in 19,205 instructions), and a reduce's tail ends in
# `, to_apply=%region_N`, distinct per reduce (mixtral: 3,809), so a cache of whole tails mostly
# misses there. _with_last takes the last attribute off by a find instead, and decodes (and
# caches) only what is written before it: most often nothing, else the few distinct `, dimensions=
# {0}` and the like. (opcode, text before the last attribute) -> as _TAILS, the plain split alone.
_METADATA = ", metadata={"
_PREFIXES: dict[tuple[str, str], tuple[dict[str, str], tuple[CallSite, ...]] | None] = {}


def _last_attribute(opcode: str, tail: str) -> tuple[dict[str, str], tuple[CallSite, ...]] | None:
    """_tail_attributes(opcode, tail) through _with_last, taking the text from the tail's last `, `
    on as its last attribute; None where that is not sure."""
    cut = tail.rfind(", ")
    eq = tail.find("=", cut) if cut >= 0 else -1
    if eq < 0:
        return None
    key = tail[cut + 2:eq]
    if key not in ALLOWED.get(opcode, ANY_OPCODE):  # (allowed: all plain names)
        return None
    decoded = _with_last(opcode, tail, cut, _KEY_NAMES.get(key) or _key_name(key), eq + 1)
    if decoded is not None and key in CALL_ATTRIBUTES:
        try:  # the call sites of all the attributes, as _tail_attributes reads them
            return decoded[0], call_sites(opcode, decoded[0], "", False)
        except AttributeSyntaxError:
            return None
    return decoded


def _with_last(opcode: str, tail: str, cut: int, key: str, start: int
               ) -> tuple[dict[str, str], tuple[CallSite, ...]] | None:
    """_tail_attributes(opcode, tail) with a fresh dict (the call sites of the text before `cut`
    alone), for a tail whose `, key=` at `cut` starts its last attribute, its value at `start`;
    None where that is not sure (the general path then decides). The split of the whole tail is
    the split of the text before `cut` (no separator can run over the comma at `cut`), then `key`
    and its value, if the value holds no separator itself."""
    raw = tail[start:]
    value = _VALUES.get(raw)  # a split's piece: it holds no separator and passed the checks below
    if value is None:
        if "," in raw and _ATTR_SPLIT.search(raw) or (
                raw.count("{") != raw.count("}") or raw.count('"') % 2 or " = " in raw):
            return None
        value = _value(raw)
    if not cut:
        return {key: value}, ()
    prefix = (opcode, tail[:cut])
    decoded = _PREFIXES.get(prefix, _UNSEEN)
    if decoded is _UNSEEN:
        decoded = _tail_attributes(opcode, prefix[1], plain_only=True)
        if len(_PREFIXES) < 50_000:
            _PREFIXES[prefix] = decoded
    if decoded is None or key in decoded[0]:
        return None
    attributes = decoded[0].copy()
    attributes[key] = value
    return attributes, decoded[1]


def _tail_attributes(opcode: str, tail: str, plain_only: bool = False
                     ) -> tuple[dict[str, str], tuple[CallSite, ...]] | None:
    """`, key=value, ...` after an instruction's operands -> its attributes and call sites (which
    depend on nothing else), or None if they are not the plain form decode_fast reads (nor, unless
    plain_only, values holding `, key=` that the full decoder reads)."""
    parts = _ATTR_SPLIT.split(tail)
    if parts[0] and not parts[0].isspace():
        return None
    allowed = ALLOWED.get(opcode, ANY_OPCODE)
    attributes: dict[str, str] | None = {}
    for k in range(1, len(parts), 2):
        key = parts[k]
        if key in attributes or key not in allowed:
            return None
        raw = parts[k + 1]
        value = _VALUES.get(raw)  # a value seen before has passed the checks below
        if value is None:
            # A split inside a value leaves braces or quotes unbalanced on both sides of it (no
            # attribute value nests `, key=` in parentheses or brackets alone).
            if raw.count("{") != raw.count("}") or raw.count('"') % 2 or " = " in raw:
                attributes = None if plain_only else _bracketed_attributes(tail, allowed)
                break
            value = _value(raw)
        attributes[_KEY_NAMES.get(key) or _key_name(key)] = value
    if attributes is None:
        return None
    calls: tuple[CallSite, ...] = ()
    if not CALL_ATTRIBUTES.isdisjoint(attributes):
        try:
            calls = call_sites(opcode, attributes, "", False)  # the name only names async wrappers
        except AttributeSyntaxError:
            return None  # an inline computation, or a mistake the full decoder reports
    return attributes, calls


def _bracketed_attributes(tail: str, allowed: frozenset[str]) -> dict[str, str] | None:
    """The attributes of a tail whose values hold `, key=` themselves (mixtral's custom-calls:
    `backend_config={attn_heads = 32 : i64, ...}`), read as the full decoder reads them (once per
    distinct tail, not once per instruction); None where it would report an error or the next
    statement."""
    attributes: dict[str, str] = {}
    try:
        _attributes(tail, 0, attributes)
    except (StatementError, NextStatementAt):
        return None
    return attributes if allowed.issuperset(attributes) else None
