"""The token-level grammar of HLO text (the second half of hlo.lark), for error reports and tests.

hloparse.parse does not run it: the fast parser feeds Lark whole statements and decodes their
inside by hand (see the top of hlo.lark). This grammar is the reference: `parse_tree` parses text
with it into a Lark tree, and `explain` says where a text stops making sense and what the grammar
expected there. The parser's error path uses it when the hand-written decoder cannot read even
the head (`[ROOT] name =`) of an instruction.

The parser (LALR, contextual lexer, all start symbols) is built on first use, about 0.2 s, and
kept for the life of the process.
"""

from __future__ import annotations

import threading
from pathlib import Path

from lark import Lark, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken
from lark.lexer import PatternStr

from hloparse.errors import HloParseError

GRAMMAR_PATH = Path(__file__).with_name("hlo.lark")

# The token level's start symbols: a whole module, or one statement as the statement splitter
# (hloparse/statements.py) cuts it.
STARTS = (
    "hlo_module",
    "module_header_statement",
    "table_name_statement",
    "table_row_statement",
    "computation_heading_statement",
    "instruction_statement",
    "computation_end",
)

_lock = threading.Lock()
_parser: Lark | None = None
_readable: dict[str, str] = {}


def grammar_text() -> str:
    """The whole of hlo.lark: both levels, one Lark grammar."""
    return GRAMMAR_PATH.read_text()


def _lark() -> Lark:
    global _parser
    if _parser is None:
        with _lock:
            if _parser is None:
                parser = Lark(grammar_text(), parser="lalr", lexer="contextual", start=list(STARTS),
                              maybe_placeholders=False)
                _readable.update(_readable_terminals(parser))
                _parser = parser
    return _parser


def parse_tree(text: str, start: str = "hlo_module") -> Tree:
    """Parse `text` with the token-level grammar from `start` (one of STARTS) into a Lark tree.

    Raises HloParseError (never a Lark exception) at the first token the grammar rejects, with its
    1-based line and column, the line's text and what the grammar expected there."""
    _check_start(start)
    parser = _lark()
    try:
        return parser.parse(text, start=start)
    except UnexpectedInput as e:
        offset, expected, got = _describe(text, e)
    line = text.count("\n", 0, offset) + 1
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    source_line = text[line_start: line_end if line_end >= 0 else len(text)]
    raise HloParseError(f"unexpected {got}", line=line, column=offset - line_start + 1, text=source_line.strip(),
                        expected=expected)


def explain(text: str, start: str) -> tuple[int, str] | None:
    """Where the token-level grammar, parsing `text` from `start` (one of STARTS), rejects it:
    the offset into `text` of the first token it cannot take (len(text) when the text ends too
    early) and a readable list of what it expected there; None when it accepts the whole text.

    Meant for error paths: any text is fine (only a wrong `start` or a non-str `text` raise), and
    after the first call (which builds the parser) a statement takes well under a millisecond."""
    if not isinstance(text, str):
        raise TypeError(f"explain() takes the text as str, not {type(text).__name__}")
    _check_start(start)
    parser = _lark()
    try:
        parser.parse(text, start=start)
    except UnexpectedInput as e:
        offset, expected, _ = _describe(text, e)
        return offset, expected
    return None


def _check_start(start: str) -> None:
    if start not in STARTS:
        raise ValueError(f"unknown start symbol {start!r}; the grammar starts at one of {', '.join(STARTS)}")


def _describe(text: str, error: UnexpectedInput) -> tuple[int, str, str]:
    """(offset, expected, what was found) for a Lark error on `text`."""
    if isinstance(error, UnexpectedToken):
        token = error.token
        expected_names = error.expected
        if token.type == "$END":
            offset = len(text.rstrip())  # just past the last token: where more was needed
            got = "end of input"
        else:
            offset = token.start_pos if token.start_pos is not None else 0
            got = repr(_shorten(str(token)))
    elif isinstance(error, UnexpectedCharacters):
        offset = error.pos_in_stream
        expected_names = error.allowed
        words = text[offset: offset + 20].split()
        got = repr(_shorten(words[0] if words else text[offset: offset + 1]))
    else:  # pragma: no cover - LALR raises only the two above (UnexpectedEOF is Earley's)
        offset = getattr(error, "pos_in_stream", None) or 0
        expected_names = set()
        got = "input"
    offset = max(0, min(offset, len(text)))
    return offset, _readable_set(expected_names), got


def _shorten(s: str) -> str:
    s = " ".join(s.split())
    return s if len(s) <= 30 else s[:27] + "..."


# ---- readable names for terminals ------------------------------------------------------------------

_NAMED = {
    "NAME": "a name",
    "PNAME": "a %name",
    "INT": "an integer",
    "NEG_INT": "a negative integer",
    "DECIMAL": "a number",
    "HEX_NUMBER": "a hex number",
    "STRING": "a string",
    "SQ_STRING": "a 'quoted' axis name",
    "ELEMENT_TYPE": "a shape such as f32[2,3]",
    "PRIMITIVE_TYPE": "an element type such as f32",
    "LAYOUT_OPEN": "a layout such as {1,0}",
    "BUFFER_OPEN": "b(",
    "MODULE_NAME": "a module name",
    "TUPLE_INDEX": "#index",
    "DIM_X": "'x'",
    "PAD_SEP": "'_'",
    "DIGIT_NAME": "a name",
    "DIM_LEVEL": "a dimension level type (D, C, S or H)",
    "DATA_LABELS": "dimension labels such as b01f",
    "KERNEL_LABELS": "kernel labels such as 01io",
    "COMPARISON_DIRECTION": "EQ, NE, LT, LE, GT or GE",
    "SUBGROUP_TYPE": "manual, replicated, maximal or unreduced",
    "AXIS_SET_KEY": "unreduced, replicated or manual",
    "SPARSE_OPERAND": "lhs or rhs",
    "ALIAS_KIND": "may-alias or must-alias",
    "OPAQUE_TEXT": "text",
    "ELLIPSIS": "...",
    "INF": "inf",
    "NAN": "nan",
    "BOOLEAN": "true or false",
    "KW_HLOMODULE": "HloModule",
    "KW_ENTRY": "ENTRY",
    "KW_ROOT": "ROOT",
    "KW_PARAMETER": "parameter(",
    "KW_CONSTANT": "constant(",
    "KW_FILE_NAMES": "FileNames",
    "KW_FUNCTION_NAMES": "FunctionNames",
    "KW_FILE_LOCATIONS": "FileLocations",
    "KW_STACK_FRAMES": "StackFrames",
    "$END": "end of input",
}


def _readable_terminals(parser: Lark) -> dict[str, str]:
    names = dict(_NAMED)
    for terminal in parser.terminals:
        if isinstance(terminal.pattern, PatternStr):
            names[terminal.name] = f"'{terminal.pattern.value}'"
        elif terminal.name.endswith("_KEY"):
            names[terminal.name] = "an attribute name"
        else:
            names.setdefault(terminal.name, terminal.name.lower().replace("_", " "))
    return names


def _readable_set(terminal_names: set[str] | frozenset[str]) -> str:
    words = sorted({_readable.get(n, n) for n in terminal_names})
    if not words:
        return "nothing more"
    if len(words) > 12:
        words = words[:12] + ["..."]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


__all__ = ["parse_tree", "explain", "grammar_text", "STARTS", "GRAMMAR_PATH"]
