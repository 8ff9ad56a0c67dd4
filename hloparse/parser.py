"""HLO text -> Module.

Three stages: the statement splitter turns text into statements (bracket-aware, so an
instruction may span lines); Lark (grammar in hlo.lark) checks their order and calls the
builders below as it reduces each rule; the validator (validate.py) rejects modules that are
well-formed text but inconsistent. Every failure surfaces as one HloParseError.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedInput, UnexpectedToken
from lark.lexer import Lexer

from hloparse.attributes import AttributeSyntaxError, find_close, iter_top_level, split_top_level
from hloparse.header import HeaderError, check_attribute, check_module_name
from hloparse.errors import HloParseError, error_at_end
from hloparse.grammar import explain
from hloparse.allocation import long_lived_objects
from hloparse.fast_path import decode_fast, decode_lines, forget_values
from hloparse.instructions import (
    NextStatementAt,
    StatementError,
    UnreadableHead,
    decode_statement,
)
from hloparse.ir import Computation, Instruction, Module, Shape
from hloparse.shapes import ShapeSyntaxError, parse_shape
from hloparse.stack_frames import stack_frames
from hloparse.headings import COMP_NAME, NEXT_HEADING, SIMPLE_SIGNATURE
from hloparse.statements import (Statement, blank_multiline_comments, new_statement, one_statement_per_line,
                                 split_statements)

_MODULE_HEAD = re.compile(r"\s*HloModule\s+([^\s,]+)\s*")


def parse(text: str, path: str | None = None) -> Module:
    """Parse HLO text. Raises HloParseError (and nothing else) for bad input."""
    source = path or "<string>"
    text = blank_multiline_comments(text) if isinstance(text, str) else text
    try:
        try:
            with long_lived_objects():
                return _Builder(text, source).build()
        except HloParseError as error:
            # Its traceback holds the failed builder's frames and all they read: let them go
            # before the text is read a second time (peak memory on hostile input).
            error.__traceback__ = None
            rearranged = one_statement_per_line(text)
            if rearranged is None:
                raise
            try:
                with long_lived_objects():
                    module = _Builder(rearranged[0], source).build()
            except HloParseError:
                raise error from None  # the original text's error is the one that makes sense
            origins = rearranged[1]
            for _, inst in module.instructions():
                if 0 < inst.line <= len(origins):
                    line, shift = origins[inst.line - 1]
                    set_location(inst, line, inst.column + shift)
            return module
    except HloParseError as error:
        if error.line <= 2:
            from hloparse.inputs import format_hint

            hint = format_hint(text) if isinstance(text, str) else ""
            if hint:
                raise HloParseError(f"{error.message}; {hint}", file=error.file, line=error.line,
                                    column=error.column, text=error.text, expected=error.expected) from None
        raise
    except RecursionError:
        raise HloParseError("input nested too deeply", file=source, line=1, column=1) from None
    except Exception as e:  # a bug of ours must still reach the user as one clear line
        raise HloParseError(f"internal parser error ({type(e).__name__}: {e}); please report it", file=source,
                            line=1, column=1) from e


def load(path: str | os.PathLike[str]) -> Module:
    """Read and parse a module from a file: HLO text, plain or gzip, or any other form
    `hloparse.inputs` reads (HLO protos, a profile holding one program, StableHLO through jax).
    A file that cannot be read raises the OSError Python raises (FileNotFoundError,
    IsADirectoryError, PermissionError): that is not a parse error, and callers catch it as they
    catch it from open()."""
    from hloparse.inputs import programs_of

    path = os.fspath(path)
    programs = programs_of(Path(path).read_bytes(), path)
    if len(programs) != 1:
        names = ", ".join(p.name for p in programs[:5]) + (", ..." if len(programs) > 5 else "")
        raise HloParseError(f"this profile holds {len(programs)} programs ({names})", file=path, line=1, column=1,
                            expected="one program: analyse the directory (hloflops DIR) or use "
                            "hloparse.inputs.load_programs")
    return parse(programs[0].text, path=path)


def _offset_of_line(text: str, line: int) -> int:
    """Offset of the first character of 1-based `line` in text."""
    offset = 0
    for _ in range(line - 1):
        offset = text.index("\n", offset) + 1
    return offset


def _column_at(st: Statement, offset: int) -> int:
    """1-based column in the file of st.text[offset] (st.column is that of its first non-blank)."""
    line_start = st.text.rfind("\n", 0, offset) + 1
    if line_start == 0:
        return st.column - (len(st.text) - len(st.text.lstrip(" \t"))) + offset
    return offset - line_start + 1


def new_computation(name: str, instructions: tuple[Instruction, ...], is_entry: bool = False,
                    execution_thread: str | None = None, line: int = 0) -> Computation:
    """Computation(...) without the frozen dataclass's per-field object.__setattr__: a module of
    thousands of small fusion computations makes one each."""
    comp = _new_object(Computation)
    comp.__dict__.update(name=name, instructions=instructions, is_entry=is_entry, execution_thread=execution_thread,
                         line=line, is_fusion_body=False)
    return comp


_new_object = object.__new__


def set_location(inst: Instruction, line: int, column: int) -> None:
    """The builder owns the instructions it just decoded; placing them is their last assignment."""
    object.__setattr__(inst, "line", line)
    object.__setattr__(inst, "column", column)


class _StatementLexer(Lexer):
    """Feeds Lark the statements produced by split_statements (one token each)."""

    def __init__(self, lexer_conf) -> None:  # noqa: ANN001 - Lark's signature
        pass

    def lex(self, data):  # noqa: ANN001, ANN201 - Lark's signature
        for kind, statement in data:
            yield Token(kind, statement, line=statement.line, column=statement.column)


class _NoTree(Transformer):
    """The builder's handlers make the IR as the statements arrive; Lark only has to check their
    order, so its rules build nothing (no parse tree is ever materialised)."""

    def _nothing(self, children: list) -> None:  # noqa: ANN001
        return None

    start = module_header = stack_table = computation = instruction = _nothing


_GRAMMAR_PATH = Path(__file__).with_name("hlo.lark")
TOKEN_LEVEL_MARKER = "// ---- TOKEN LEVEL"  # hlo.lark's second half, which only grammar.py compiles
_lark: Lark | None = None


def _structure_parser() -> Lark:
    global _lark
    if _lark is None:
        statement_level = _GRAMMAR_PATH.read_text().partition(TOKEN_LEVEL_MARKER)[0]
        _lark = Lark(statement_level, parser="lalr", lexer=_StatementLexer, transformer=_NoTree())
    return _lark


# One token object per kind, fed again and again: the rules build nothing from them, and an
# error is located from the statement being fed (making a Token per statement cost 2 us each).
_TOKENS = {kind: Token(kind, "") for kind in
           ("MODULE_HEADER", "TABLE_NAME", "TABLE_ROW", "COMPUTATION_HEADER", "INSTRUCTION", "COMPUTATION_END")}

_READABLE = {
    "MODULE_HEADER": "'HloModule name'",
    "TABLE_NAME": "a stack-frame table",
    "TABLE_ROW": "a table row",
    "COMPUTATION_HEADER": "a computation heading such as 'ENTRY %main {'",
    "INSTRUCTION": "an instruction",
    "COMPUTATION_END": "'}'",
    "$END": "end of input",
}


# ---- building the IR ---------------------------------------------------------------------

class _Builder:
    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source

    def error(self, message: str, statement: Statement, offset: int = 0, expected: str = "") -> HloParseError:
        """An error at `offset` into a statement's text, located in the file."""
        text = statement.text
        offset = max(0, min(offset, len(text)))
        line = statement.line + text.count("\n", 0, offset)
        line_start = text.rfind("\n", 0, offset) + 1
        if line_start == 0:
            column = statement.column + offset - (len(text) - len(text.lstrip())) if offset else statement.column
        else:
            column = offset - line_start + 1
        source_line = text[line_start:].split("\n", 1)[0].strip()
        return HloParseError(message, file=self.source, line=line, column=max(column, 1), text=source_line,
                             expected=expected)

    def build(self) -> Module:
        if not self.text.strip():
            raise HloParseError("empty input", file=self.source, line=1, column=1, expected="'HloModule name'")
        forget_values()  # the previous module's attribute values need not stay alive
        self.header: dict[str, str] = {}
        self.module_name = ""
        self.tables: dict[str, list[Statement]] = {}
        self.computations: list[Computation] = []
        self.signatures: dict[str, tuple[Statement, str, int]] = {}  # heading, signature text, its offset
        self.entry_name: str | None = None
        self.pending: list[Instruction] = []
        self.may_chain = False  # the walk may close the computation and open the next (see _walk)
        self.shapeless = False  # some instruction may lack a shape: run the inference
        self.extra: list[Computation] = []  # synthesised async-wrapped computations
        self.last_statement = Statement("", 1, 1)
        self.compact_names: set[tuple[str, str]] = set()
        try:
            # Streamed, not listed: a 30 MB module's statements need not all be alive at once.
            self._parse_structure(split_statements(self.text, walk=self._walk))
        except UnexpectedToken as e:
            statement = getattr(e, "statement", None)
            expected = " or ".join(sorted(_READABLE.get(t, t) for t in e.expected))
            got = _READABLE.get(e.token.type, e.token.type)
            if statement is None:
                last = self.last_statement
                raise self.error(f"found {got}", last, len(last.text.rstrip()),
                                 expected) from None
            raise self.error(f"found {got}", statement, 0, expected) from None
        except UnexpectedInput as e:  # pragma: no cover - every token comes from our own splitter
            raise HloParseError(str(e), file=self.source, line=1, column=1) from None
        finally:
            forget_values()  # nor this one's, once decoded (the decoded tails are objects a caller's gc.freeze holds)
        if not self.computations:  # e.g. a file cut short inside the header's stack-frame tables
            inside = f" in the header's {list(self.tables)[-1]} table," if self.tables else ""
            raise error_at_end(f"the text ends{inside} before any computation", self.text, file=self.source,
                               expected="a computation such as 'ENTRY %main { ... }'")
        from hloparse.infer import infer_missing_shapes
        from hloparse.validate import validate

        if self.shapeless:
            infer_missing_shapes(self.computations + self.extra, self)

        computations = tuple(self.computations + self.extra)
        entry = self.entry_name or self.computations[-1].name
        module = Module(
            name=self.module_name,
            computations=computations,
            entry_name=entry,
            attributes=self.header,
            stack_frames=stack_frames(self.tables),
            path=None if self.source == "<string>" else self.source,
        )
        validate(module, self)  # which also marks the fusion bodies, as it walks the call sites
        return module

    def _parse_structure(self, tokens: Iterator[tuple[str, Statement]]) -> None:
        """Run the LALR parser over the statements, building the IR as rules reduce."""
        parser = _structure_parser()
        interactive = parser.parse_interactive()
        feed = interactive.feed_token
        on_instruction = self._on_instruction
        handlers = {"MODULE_HEADER": self._on_module_header, "TABLE_NAME": self._on_table_name,
                    "TABLE_ROW": self._on_table_row, "COMPUTATION_HEADER": self._on_computation_header,
                    "COMPUTATION_END": self._on_computation_end}
        inside = False
        # Inside a computation, instructions are all the grammar allows besides its closing brace,
        # and inside a stack-frame table, rows; so Lark is shown only instructions and rows that
        # stand outside one (to report them): its per-token cost stays off the hot path.
        statement = self.last_statement
        in_table = False
        after_end = deferred = False  # Lark's state: just after a COMPUTATION_END; a heading held back
        for kind, statement in tokens:
            if kind == "INSTRUCTION":
                if inside:
                    # Most instructions decode in one match (the walk took most of those already;
                    # it may also have moved on to the next computation, hence self.current).
                    text, line, column = statement
                    inst = decode_fast(text, self.current[0], line, column)
                    if inst is not None:
                        if inst.is_root:
                            self._count_root(statement, inst)
                        self.pending.append(inst)
                        continue
                    on_instruction(statement, True)  # the full decoder, without a second fast try
                    continue
                else:
                    try:  # always an error (so never while a heading is held back: that is inside)
                        feed(_TOKENS[kind])
                    except UnexpectedToken as e:
                        e.statement = statement  # type: ignore[attr-defined]
                        raise
                on_instruction(statement)
                continue
            if kind == "TABLE_ROW" and in_table:
                self.current_table.append(statement)
                continue
            inside = kind == "COMPUTATION_HEADER"
            in_table = kind == "TABLE_NAME"
            # A heading right after a closing brace, then instructions, then its own closing
            # brace leave Lark where they found it: that pair is not fed (4,002 computations
            # cost 2 feeds each); any other token first feeds the heading it held back.
            if inside and after_end and not deferred:
                deferred = True
            elif kind == "COMPUTATION_END" and deferred:
                deferred = False
            else:
                if deferred:
                    feed(_TOKENS["COMPUTATION_HEADER"])  # accepted after a closing brace
                    deferred = False
                try:
                    feed(_TOKENS[kind])
                except UnexpectedToken as e:
                    e.token = Token(kind, statement.text, line=statement.line, column=statement.column)
                    e.statement = statement  # type: ignore[attr-defined]
                    raise
                after_end = kind == "COMPUTATION_END"
            handlers[kind](statement)
            # A computation whose heading Lark did not see may be closed by the walk, with the
            # next one opened, leaving Lark where it was (see _walk).
            self.may_chain = deferred
        self.last_statement = statement
        if deferred:
            feed(_TOKENS["COMPUTATION_HEADER"])
        interactive.feed_eof()

    def _walk(self, text: str, offset: int, line: int) -> tuple[int, int]:
        """split_statements' walk: the current computation's one-line instructions from `offset` on,
        then, while its ROOT line is followed by a lone `}` and a one-line heading, the next ones'
        (mixtral's 4,000 small reducers cost the splitter and Lark's loop nothing)."""
        first = line
        while True:
            pending = self.pending
            taken = len(pending)
            offset = decode_lines(text, offset, self.current[0], line, pending)
            line += len(pending) - taken
            if len(pending) == taken or not pending[-1].is_root:
                break
            if self.roots:  # a second ROOT, located at its line
                start = text.rfind("\n", 0, offset - 1) + 1
                self._count_root(Statement(text[start:offset - 1], pending[-1].line, pending[-1].column), pending[-1])
            self.roots, self.root = 1, pending[-1]
            m = NEXT_HEADING.match(text, offset) if self.may_chain else None
            heading = m and m.group(1)
            if not heading or heading.count("(") + heading.count("{") + heading.count("[") != (
                    heading.count(")") + heading.count("}") + heading.count("]") + 1):
                break  # (brackets left open: the splitter runs the heading on, to its statement and error)
            self._on_computation_end(new_statement(Statement, ("}", line, 1)))
            line += m.group().count("\n") - 1  # the heading's line
            indent = len(heading) - len(heading.lstrip())
            self._on_computation_header(new_statement(Statement, (heading, line, indent + 1)))
            line += 1
            offset = m.end()
        return offset, line - first

    # Handlers, in the order the grammar allows them.
    def _on_module_header(self, st: Statement) -> None:
        m = _MODULE_HEAD.match(st.text)
        if m is None:
            raise self.error("expected a module name after HloModule", st, len(st.text) - len(st.text.lstrip()) + 9,
                             "a module name")
        try:
            check_module_name(m.group(1))
        except HeaderError as e:
            raise self.error(str(e), st, m.start(1), e.expected) from None
        self.module_name = m.group(1).rstrip(":")
        rest_start = m.end()
        rest = st.text[rest_start:]
        if not rest.strip():
            return
        if not rest.lstrip().startswith(","):
            raise self.error(f"unexpected text {rest.strip()[:30]!r} after the module name", st, rest_start, "','")
        spans = iter_top_level(st.text, rest_start)
        try:
            next(spans)  # the text before the first comma: blank, checked above
            for s, e in spans:
                piece = st.text[s:e]
                key, eq, value = piece.partition("=")
                if not eq or not key.strip():
                    raise self.error(f"expected attribute=value, got {piece.strip()[:30]!r}", st, s,
                                     "attribute=value")
                try:
                    check_attribute(key.strip(), value.strip(), self.header)
                except HeaderError as e:
                    raise self.error(str(e), st, s + len(piece) - len(piece.lstrip()), e.expected) from None
                self.header[key.strip()] = value.strip()
        except AttributeSyntaxError as e:
            raise self.error(str(e), st, e.offset, e.expected) from None

    def _on_table_name(self, st: Statement) -> None:
        self.current_table = self.tables.setdefault(st.text, [])

    def _on_table_row(self, st: Statement) -> None:
        self.current_table.append(st)

    def _on_computation_header(self, st: Statement) -> None:
        text = st.text.rstrip()
        m = COMP_NAME.match(text) if text[-1:] == "{" else None
        if m is None:
            raise self.error("expected a computation heading", st, 0, "[ENTRY] %name [(params) -> shape] {")
        is_entry, name, signature = m.group(1) is not None, m.group(2), text[m.end():-1]
        if is_entry:
            if self.entry_name is not None:
                raise self.error("expects only one ENTRY computation", st, 0, "a single ENTRY")
            self.entry_name = name
        if name in self.signatures:
            raise self.error(f"computation {name!r} is defined twice", st, m.start(2), "unique computation names")
        # Parsed on demand: only the result shape is always needed (to check the root against).
        # A heading the quick pattern does not vouch for is parsed now, to report its errors.
        self.signatures[name] = (st, signature, m.end())
        if signature and not SIMPLE_SIGNATURE.fullmatch(signature):
            self._signature(st, signature, m.end())
        self.current = (name, is_entry, st)
        self.pending = []
        self.roots = 0
        self.root: Instruction | None = None

    def _signature(self, st: Statement, text: str, offset: int) -> tuple[tuple[Shape, ...] | None, Shape | None]:
        body = text.strip()
        if not body:
            return None, None
        lead = offset + (len(text) - len(text.lstrip()))
        try:
            if not body.startswith("("):
                raise self.error("expected '(' to start the parameter list", st, lead, "(name: shape, ...)")
            close = find_close(body, 0)
            params: list[Shape] = []
            inner = body[1:close]
            if inner.strip():
                for s, e in split_top_level(inner):
                    m = re.fullmatch(r"\s*%?[\w.\-]+\s*:?\s*(.*)", inner[s:e], re.S)
                    if m is None or not m.group(1).strip():
                        raise self.error("expected 'name: shape' in the parameter list", st, lead + 1 + s,
                                         "name: shape")
                    params.append(parse_shape(m.group(1)))
            tail = body[close + 1:].strip()
            if not tail.startswith("->"):
                raise self.error("expected '->' and the result shape", st, lead + close + 1, "-> shape")
            result = parse_shape(tail[2:])
        except (AttributeSyntaxError, ShapeSyntaxError) as e:
            raise self.error(str(e), st, lead + e.offset, e.expected) from None
        return tuple(params), result

    def _on_instruction(self, st: Statement, fast_path_tried: bool = False) -> None:
        name = self.current[0]
        inst = None if fast_path_tried else decode_fast(st.text, name, st.line, st.column)
        if inst is not None:
            if inst.is_root:
                self._count_root(st, inst)
            self.pending.append(inst)
            return
        nested: list[Instruction] = []
        inline: list[tuple[str, str, int]] = []
        try:
            inst, wrapped = decode_statement(st.text, name, nested, inline)
        except StatementError as e:
            if isinstance(e, UnreadableHead) and len(st.text) < 100_000:
                # The decoder could not read even `[ROOT] name =`: the reference grammar can say
                # where the text stops making sense and what it wanted there. (It reads some
                # 0.4 MB/s, hence the bound: a huge literal must not make an error slow.)
                found = explain(st.text, "instruction_statement")
                if found is not None:
                    offset, expected = found
                    words = st.text[offset:].split()
                    got = repr(words[0][:30]) if words else "end of statement"
                    raise self.error(f"unexpected {got} in an instruction", st, offset, expected) from None
            raise self.error(str(e), st, e.offset, e.expected) from None
        except NextStatementAt as split:
            self._on_instruction(Statement(st.text[: split.offset], st.line, st.column))
            self._on_instruction(self._sub_statement(st, split.offset, st.text[split.offset:]))
            return
        if inst.shape is None or any(i.shape is None for i in nested) or inline:
            self.shapeless = True  # XLA lets these be written without a shape: infer.py fills them in
        for inner_name, body, offset in inline:
            self._inline_computation(inner_name, self._sub_statement(st, offset, body))
        line, column = st.line, st.column
        for extra in nested:
            if extra.opcode == "get-tuple-element" and "#" in extra.name:
                # `%t#1` used again: one instruction serves both uses (a set, not a scan of the
                # computation so far: that was quadratic in a long chain of tuple accesses).
                key = (name, extra.name)
                if key in self.compact_names:
                    continue
                self.compact_names.add(key)
            set_location(extra, line, column)
            self.pending.append(extra)
        # The builder owns these fresh objects; setting the location here saves a copy.
        set_location(inst, line, column)
        if inst.is_root:
            self._count_root(st, inst)
        self.pending.append(inst)
        if wrapped:
            for w in wrapped:
                object.__setattr__(w, "line", line)
                object.__setattr__(w, "column", column)
            self.extra.append(new_computation(wrapped[0].computation, tuple(wrapped), line=line))

    def _count_root(self, st: Statement, inst: Instruction) -> None:
        self.roots += 1
        self.root = inst
        if self.roots > 1:
            raise self.error("one computation should have only one ROOT", st, 0, "a single ROOT")

    def _sub_statement(self, st: Statement, offset: int, text: str) -> Statement:
        """The statement `text`, which starts at `offset` in st.text, located in the file."""
        lead = len(text) - len(text.lstrip(" \t"))
        return Statement(text, st.line + st.text.count("\n", 0, offset), _column_at(st, offset + lead))

    def _inline_computation(self, name: str, body: Statement) -> None:
        """A computation written as an attribute value: `to_apply={ x = ... ROOT y = ... }`."""
        saved = (self.current, self.pending, self.roots, self.root)
        self.current, self.pending, self.roots = (name, False, body), [], 0
        for kind, statement in split_statements(body.text, in_computation=True):
            if kind != "INSTRUCTION":
                raise self.error("expected an instruction in the inline computation", body, 0, "an instruction")
            shifted = self._sub_statement(body, _offset_of_line(body.text, statement.line), statement.text)
            self._on_instruction(shifted)
        if not self.pending:
            raise self.error("empty inline computation", body, 0, "at least one instruction")
        self.computations.insert(0, new_computation(name, tuple(self.pending), line=body.line))
        self.current, self.pending, self.roots, self.root = saved

    def _on_computation_end(self, st: Statement) -> None:
        name, is_entry, head = self.current
        rest = st.text.strip()[1:].strip()
        thread = None
        if rest:
            m = re.fullmatch(r',\s*execution_thread\s*=\s*"([^"]*)"', rest)
            if m is None:
                raise self.error(f"unexpected text after '}}': {rest[:30]!r}", st, st.text.index("}") + 1,
                                 'end of line or , execution_thread="..."')
            thread = m.group(1)
        if not self.pending:
            raise self.error(f"computation {name!r} has no instructions", head, 0, "at least one instruction")
        comp = new_computation(name, tuple(self.pending), is_entry, thread, head.line)
        if self.roots == 1:
            comp.__dict__["root"] = self.root  # Computation.root's value, known without a scan
        self.computations.append(comp)
        self.pending = []

    # Used by the validator to place its errors.
    def error_at_instruction(self, inst: Instruction, message: str, expected: str = "",
                             needle: str | None = None) -> HloParseError:
        text = self.text_of_line(inst.line)
        column = inst.column
        if needle and needle in text:
            column = text.index(needle) + 1
        return HloParseError(message, file=self.source, line=inst.line, column=column, text=text.strip(),
                             expected=expected)

    def error_at_line(self, line: int, message: str, expected: str = "", needle: str | None = None) -> HloParseError:
        text = self.text_of_line(line)
        column = len(text) - len(text.lstrip()) + 1
        if needle and needle in text:
            column = text.index(needle) + 1
        return HloParseError(message, file=self.source, line=line, column=column, text=text.strip(),
                             expected=expected)

    def text_of_line(self, line: int) -> str:
        if not hasattr(self, "_lines"):
            self._lines = self.text.split("\n")
        return self._lines[line - 1] if 1 <= line <= len(self._lines) else ""

    def signature_of(self, name: str) -> tuple[Statement, tuple[Shape, ...] | None, Shape | None] | None:
        entry = self.signatures.get(name)
        if entry is None:
            return None
        st, text, offset = entry
        params, result = self._signature(st, text, offset)
        return st, params, result

    def error_at_result_shape(self, name: str, message: str, expected: str) -> HloParseError:
        """An error pointing at the `-> shape` of a computation's heading (where XLA points)."""
        st, text, offset = self.signatures[name]
        arrow = text.rfind("->")
        shape_at_offset = offset + arrow + 2 + (len(text[arrow + 2:]) - len(text[arrow + 2:].lstrip()))
        return self.error(message, st, shape_at_offset, expected)

    def result_shape_of(self, name: str) -> Shape | None:
        """The `-> shape` of a computation's heading, if it has one (parameters left unparsed)."""
        entry = self.signatures.get(name)
        if entry is None or "->" not in entry[1]:
            return None if entry is None or not entry[1].strip() else self.signature_of(name)[2]
        st, text, offset = entry
        arrow = text.rfind("->")
        try:
            return parse_shape(text[arrow + 2:])
        except ShapeSyntaxError as e:
            raise self.error(str(e), st, offset + arrow + 2 + e.offset, e.expected) from None


__all__ = ["parse", "load"]
