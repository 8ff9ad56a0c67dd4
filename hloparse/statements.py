"""HLO text -> statements: the module header, stack-frame tables, computation headings,
instructions (possibly spanning lines) and closing braces, each with its line and column.

Comments go first (`//` to the end of the line, unless inside a string, which may span lines);
then each statement runs on while its brackets are open or while the next line does not start
a statement of its own (attributes wrapped onto their own lines).
"""

from __future__ import annotations

import re
from array import array
from typing import Callable, Iterator, NamedTuple

TABLE_NAMES = frozenset({"FileNames", "FunctionNames", "FileLocations", "StackFrames"})
_TABLE_ROW = re.compile(r"\s*\d+\s")
_NOT_PLAIN = frozenset({"", "}", "/"})  # first characters the fast path leaves to the full one

# Strings as `"[^"\\]*(?:\\.[^"\\]*)*+"` (unrolled, possessive), never `"(?:[^"\\]|\\.)*"`: Python's
# engine keeps backtracking state for every repetition of a group it may have to give back
# (~170 bytes a character, or 64 per `\\"`); a possessive group gives nothing back.
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*+(?:"|\Z)'  # unterminated: to the end, not a rescan per quote
_STRING_OR_COMMENT = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*+"|//.*')


class Statement(NamedTuple):
    """One statement's text and where it starts (a tuple: cheap to make 200,000 times)."""

    text: str
    line: int  # 1-based line of the statement's first character
    column: int  # 1-based column of the statement's first non-blank character


new_statement = tuple.__new__  # Statement(text, line, column) without NamedTuple's Python-level __new__



def _strip_comment(line: str) -> str:
    """Drop a trailing // comment that is not inside a string."""
    for m in _STRING_OR_COMMENT.finditer(line):
        if m.group().startswith("//"):
            return line[: m.start()]
    return line


def _strip_comment_across_lines(line: str, in_string: bool) -> tuple[str, bool]:
    """Like _strip_comment, but aware of a string left open by the previous line; returns the
    stripped line and whether a string is still open at its end."""
    i = 0
    n = len(line)
    while i < n:
        if in_string:
            j = i
            while True:
                j = line.find('"', j)
                if j < 0:
                    return line, True
                k = j  # count the backslashes before the quote by walking back, not by slicing
                while k > i and line[k - 1] == "\\":
                    k -= 1
                if (j - k) % 2 == 0:
                    break
                j += 1
            in_string = False
            i = j + 1
            continue
        quote = line.find('"', i)
        comment = line.find("//", i)
        if comment >= 0 and (quote < 0 or comment < quote):
            return line[:comment], False
        if quote < 0:
            return line, False
        in_string = True
        i = quote + 1
    return line, in_string


_COMMENT_OPEN = re.compile(r"/\*")


def blank_multiline_comments(text: str) -> str:
    """XLA's lexer skips a `/* ... */` comment wherever it is, across lines too; the statement
    splitter reads line by line. Replace each comment that spans lines by blanks, keeping its
    line breaks, so that every line and column stays where it was. (A quote before the comment
    on its line, in odd number, means it is inside a string and stays.)"""
    pieces: list[str] = []
    last = 0
    m = _COMMENT_OPEN.search(text)  # the regex engine finds '/*' ~2x faster than str.find on 30 MB
    while m is not None:
        pos = m.start()
        end = text.find("*/", pos + 2)
        if end < 0:
            break  # unterminated: no later '/*' can close either (and rescanning would be quadratic)
        if text.find("\n", pos, end) >= 0:
            line_start = text.rfind("\n", 0, pos) + 1
            before = text[line_start:pos]
            if (before.count('"') - before.count('\\"')) % 2 == 0:
                comment = text[pos:end + 2]
                pieces += [text[last:pos], "".join(c if c == "\n" else " " for c in comment)]
                last = end + 2
        m = _COMMENT_OPEN.search(text, end + 2)
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


_COMMENT_START = re.compile(r"/[/*]")


def _has_comments(text: str) -> bool:
    """Is there a // comment, or a line that starts with a /* comment */? (Compiled modules hold
    thousands of `/*index=5*/` comments, none at the start of a line.) One regex scan for both:
    str's two-character search costs ~25 ms per question on 30 MB, this ~11 ms for both."""
    decided_until = -1  # the first comment of a line decides for it (looking back from every
    m = _COMMENT_START.search(text)  # '/*' of a long line would be quadratic)
    while m is not None:
        pos = m.start()
        if text[pos + 1] == "/":
            return True
        if pos > decided_until:
            line_start = text.rfind("\n", 0, pos) + 1
            if not text[line_start:pos].strip():
                return True
            decided_until = text.find("\n", pos)
            if decided_until < 0:
                decided_until = len(text)
        m = _COMMENT_START.search(text, pos + 1)
    return False


_STRING_RE = re.compile(_STRING)


def _balance(text: str) -> int:
    depth = text.count("(") + text.count("{") + text.count("[") - text.count(")") - text.count("}") - text.count("]")
    if depth and '"' in text:  # brackets inside strings do not count
        depth = 0
        for piece in _STRING_RE.split(text):
            depth += piece.count("(") + piece.count("{") + piece.count("[")
            depth -= piece.count(")") + piece.count("}") + piece.count("]")
    return depth


_STATEMENT_START = re.compile(
    r"\s*(?:\}|ENTRY\b|HloModule\b|(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(?:[a-z][a-z0-9]*\[|\(|b\(|[a-z][a-z0-9\-]*\s*\(|$)"
    r"|%?[\w.\-:]+\s*(?:\(.*\)\s*->.*)?\{\s*$"
    r"|%?[\w.\-:]+\s*(?:\(.*\)\s*->.*)?$)"  # a computation heading whose '{' is on the next line
)


_COMMENT_MARK = re.compile(r"//|/\*")


def _strip_comments(lines: list[str], text: str) -> None:
    """Drop `//` comments and leading `/* labels */` from the lines of text, in place. Only the
    lines that hold a '//' or '/*' (found in the text, not by a test of every line) and those a
    string open at the end of one of them runs into can change."""
    n = len(lines)
    in_string = False  # inside a string that began on an earlier line
    line_number, last = 0, 0
    k = -1
    for mark in _COMMENT_MARK.finditer(text):
        line_number += text.count("\n", last, mark.start())
        last = mark.start()
        if line_number <= k:
            continue
        k = line_number
        while True:
            line = lines[k]
            if in_string or ("//" in line and '"' in line):
                line, in_string = _strip_comment_across_lines(line, in_string)
                lines[k] = line
            elif "//" in line:
                line = lines[k] = _strip_comment(line)
            if line.lstrip().startswith("/*"):  # a leading /* label */ is not part of the statement
                end = line.find("*/")
                if end >= 0:
                    lines[k] = " " * (end + 2) + line[end + 2:]
            if not in_string or k + 1 >= n:
                break
            k += 1


# split_statements' `walk`: given the text, the offset of a line inside a computation and its
# 1-based number, it takes the one-line instructions from there on (those the loop would yield
# one by one) and returns the offset where it stopped and how many lines it took.
Walk = Callable[[str, int, int], tuple[int, int]]


def split_statements(text: str, in_computation: bool = False,
                     walk: Walk | None = None) -> Iterator[tuple[str, Statement]]:
    """Yield (token type, statement) pairs for the Lark grammar in hlo.lark.

    A statement continues onto the next line while its brackets are open, or while the next
    line does not start a statement of its own (attributes wrapped onto their own lines).

    With `walk`, a computation's plain one-line instructions go to it instead, run by run (it is
    called when the statement before them has been consumed: the caller is ready for them)."""
    lines = text.split("\n")
    if _has_comments(text):
        _strip_comments(lines, text)
        if walk:
            text = "\n".join(lines)  # the walk reads the lines as the splitter does: comments gone
    n = len(lines)
    i = 0
    in_table = False
    known_line, known_offset = 0, 0  # a line's index and its offset in text (where the walk starts)
    stalled = -1  # the line where the walk last stopped (left to the loop below)
    while i < n:
        if walk and in_computation and i != stalled:
            while known_line < i:  # the lines since the last run: few, read by the loop below
                known_offset += len(lines[known_line]) + 1
                known_line += 1
            known_offset, taken = walk(text, known_offset, i + 1)
            i += taken
            known_line = stalled = i
            if i >= n:
                break
        line = lines[i]
        left = line.lstrip()
        # The common case: a one-line instruction followed by another statement, in a loop of its
        # own (each line's lstrip serves as the next one's). (A statement cut short here by an open
        # '{' or '[' fails to decode: an error, not a different module.)
        while (in_computation and i + 1 < n and left[:1] not in _NOT_PLAIN and left.rstrip()[-1] not in ",={(["
               and line.count("(") == line.count(")")):
            following = lines[i + 1]
            nxt = following.lstrip()
            first = nxt[:1]
            if not (first == "%" or first == "}" or nxt.startswith("ROOT ")
                    or (" = " in nxt and _STATEMENT_START.match(nxt))):  # names written without '%'
                break
            yield "INSTRUCTION", new_statement(Statement, (line, i + 1, len(line) - len(left) + 1))
            i += 1
            line, left = following, nxt
            if walk:
                break  # the walk may take the lines that follow
        if walk and in_computation and i != stalled:
            continue  # the loop above took a line: the walk tries the next
        stripped = left.rstrip()
        if not stripped or (stripped.startswith("/*") and stripped.endswith("*/") and "*/" not in stripped[2:-2]):
            i += 1
            continue
        start = i
        column = len(line) - len(left) + 1
        if not in_computation and stripped in TABLE_NAMES:
            in_table = True
            yield "TABLE_NAME", Statement(stripped, start + 1, column)
            i += 1
            continue
        if in_table and _TABLE_ROW.match(line):
            yield "TABLE_ROW", Statement(line, start + 1, column)
            i += 1
            continue
        in_table = False
        if stripped[0] == "}":
            in_computation = False
            yield "COMPUTATION_END", Statement(line, start + 1, column)
            i += 1
            continue
        is_heading = not in_computation and not stripped.startswith("HloModule")
        quotes = line.count('"') - line.count('\\"')
        open_string = quotes % 2 == 1
        depth = 0 if open_string else _balance(line)
        # The statement is lines[start:i + 1], joined once at its end (a list of its parts beside
        # `lines` cost 8 more bytes a line: a string of a million line breaks is that many lines).
        string_from = start  # the line where the open string began (its brackets are counted at its end)
        while i + 1 < n:
            if open_string:
                # A string spans lines: count quotes line by line (re-joining and re-counting
                # every line so far would be quadratic), and the brackets of the lines it spans
                # once it closes.
                i += 1
                quotes += lines[i].count('"') - lines[i].count('\\"')
                open_string = quotes % 2 == 1
                if not open_string:
                    depth += _balance("\n".join(lines[string_from:i + 1]))
                    line = lines[i]
                continue
            if is_heading and depth == 1 and line.rstrip().endswith("{"):
                break  # a computation heading: its '{' opens the body
            nxt = lines[i + 1]
            open_end = line.rstrip().endswith((",", "="))
            if depth <= 0 and not open_end and (not nxt.strip() or _STATEMENT_START.match(nxt)):
                break
            if depth <= 0 and nxt.strip() in TABLE_NAMES:
                break
            if stripped.startswith("HloModule") and not nxt.lstrip().startswith("}") and _STATEMENT_START.match(nxt):
                break  # the header ends where a computation begins, balanced or not
            i += 1
            line = nxt
            quotes = nxt.count('"') - nxt.count('\\"')
            if quotes % 2:
                open_string = True  # the brackets are counted once the string closes
                string_from = i
                continue
            depth += _balance(nxt)
        end = i
        while end > start and not lines[end].strip():
            end -= 1  # blank lines a statement swallowed while looking for its end
        statement = Statement(lines[start] if end == start else "\n".join(lines[start:end + 1]), start + 1, column)
        i += 1
        if depth < 0 and in_computation and statement.text.rstrip().endswith("}"):
            # One '}' too many closes the computation (XLA reads JSON values brace by brace).
            cut = statement.text.rstrip()
            yield "INSTRUCTION", Statement(cut[:-1], statement.line, statement.column)
            in_computation = False
            yield "COMPUTATION_END", Statement("}", statement.line + cut.count("\n"), len(cut) - cut.rfind("\n"))
            continue
        if stripped.startswith("HloModule") and not in_computation:
            yield "MODULE_HEADER", statement
        elif statement.text.rstrip().endswith("{") and "=" not in statement.text.split("(", 1)[0]:
            in_computation = True
            yield "COMPUTATION_HEADER", statement
        else:
            yield "INSTRUCTION", statement



_LAYOUT_TOKEN = re.compile(_STRING + r'|/\*.*?(?:\*/|\Z)|//[^\n]*|[(){}\[\]\n=]', re.S)
_BREAK = "\x00"  # marks a line break we insert (never occurs in HLO text)


def one_statement_per_line(text: str) -> tuple[str, Origins] | None:
    """XLA's lexer ignores line breaks, so `ENTRY e { ROOT c = f32[] constant(1) }` is a module too.
    Put every computation body's braces on lines of their own (and a heading that shares the
    `HloModule` line on the next one). Returns the new text and, for each of its lines, the line
    of the original it came from and the columns that preceded it there; None when that moves
    nothing. Only used after the line-oriented reading failed, so it may take its time."""
    breaks: list[int] = []  # offsets at which to break the line
    stack: list[str] = []  # "body", or the closing bracket expected
    values = 0  # entries of `stack` that are not "body": kept, not recounted per token (deep nesting)
    most_breaks = len(text) // 10 + 2
    has_equals = False  # the current statement has an '=' at depth 0 (so a '{' is a value)
    statement_start = 0
    for m in _LAYOUT_TOKEN.finditer(text):
        tok = m.group()
        inside = values > 0
        if tok == "\n" or tok[0] in "\"/":
            if tok == "\n" and not inside:
                has_equals, statement_start = False, m.end()
        elif tok == "=":
            has_equals = has_equals or not inside
        elif tok in "([":
            stack.append(")" if tok == "(" else "]")
            values += 1
        elif tok == "{":
            if inside or has_equals:
                stack.append("}")
                values += 1
                continue
            statement = text[statement_start:m.start()]
            if statement.lstrip().startswith("HloModule") and " ENTRY " in statement:
                breaks.append(statement_start + statement.index(" ENTRY ") + 1)
            breaks.append(m.end())
            if len(breaks) > most_breaks:
                return None  # see below: a run of braces, not a layout
            stack.append("body")
            has_equals, statement_start = False, m.end()
        elif tok == "}" and stack and stack[-1] == "body":
            stack.pop()
            breaks += [m.start(), m.end()]
            has_equals, statement_start = False, m.end()
        elif stack:
            values -= stack.pop() != "body"
    # A module needs at least ~14 characters per brace it puts on a line of its own
    # (`c{ROOT p=f32[] parameter(0)}`); more breaks than that is not a layout to undo but a
    # hostile run of braces, whose pieces would cost ~100 bytes a character.
    if not breaks or len(breaks) > most_breaks:
        return None
    offsets = sorted(set(breaks))
    if all(o == 0 or o == len(text) or text[o - 1] == "\n" or text[o] == "\n" for o in offsets):
        return None  # every brace already stood on its own line: breaking would move nothing
    pieces, last = [], 0
    for offset in offsets:
        pieces += [text[last:offset], _BREAK]
        last = offset
    pieces.append(text[last:])
    marked = "".join(pieces)
    del pieces
    # Positions, not a list of line strings (two lists of short strings cost ~40 bytes a character
    # of a file of short lines), and two int arrays, not a tuple per line.
    origins = Origins()
    number, line_start = 1, 0
    origins.lines.append(1)
    origins.shifts.append(0)
    breaks_on_line = 0
    for m in _LINE_OR_BREAK.finditer(marked):
        if m.group() == "\n":
            number += 1
            line_start, breaks_on_line = m.end(), 0
            origins.lines.append(number)
            origins.shifts.append(0)
        else:  # the piece after a break starts this many original columns into its line
            origins.lines.append(number)
            origins.shifts.append(m.start() - line_start - breaks_on_line)
            breaks_on_line += 1
    return marked.replace(_BREAK, "\n"), origins


_LINE_OR_BREAK = re.compile("[\n\x00]")


class Origins:
    """For each line of the re-laid text: (its line in the original, columns before it there)."""

    def __init__(self) -> None:
        self.lines = array("q")
        self.shifts = array("q")

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, i: int) -> tuple[int, int]:
        return self.lines[i], self.shifts[i]
