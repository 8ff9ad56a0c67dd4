"""Text that fits the terminal: long name columns (scopes, paths, module names) are elided in the
middle, `jit(train_step)/…/while/body`, so that both ends of a name stack stay readable; where
that is not enough, a table drops its least needed columns (each table names them, in order);
notes and other lines longer than the width wrap, their continuation indented.

The width is `COLUMNS` when set (a positive integer), else the terminal's when standard output
is one; output into a pipe or a file is never fitted (`None`): it is what scripts read and grep,
and it stays the same bytes whatever window it was printed from. `COLUMNS=100 hloflops FILE | less`
fits a pipe too. Widths below MIN_WIDTH are taken as MIN_WIDTH.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from typing import Iterable, Mapping, Sequence, TextIO

ELLIPSIS = "\u2026"
MIN_ELIDED = 16  # an elided cell keeps at least this many characters (or its header's width)
MIN_WIDTH = 40  # narrower than this, nothing reads well: fit to 40
MIN_PIECE = 12  # the end of a frame shown before the whole ones kept, only if this long
READABLE = 40  # a table drops columns before it elides a name below this many characters


def output_width(stream: TextIO | None = None, env: Mapping[str, str] | None = None) -> int | None:
    """The width text for `stream` (default stdout) must fit, or None for no limit (see above)."""
    env = os.environ if env is None else env
    columns = env.get("COLUMNS", "")
    if columns.strip().isdigit() and int(columns) > 0:
        return max(MIN_WIDTH, int(columns))
    stream = sys.stdout if stream is None else stream
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):  # a closed or replaced stream
        return None
    return max(MIN_WIDTH, shutil.get_terminal_size().columns)


def wrap_lines(lines: Iterable[str], width: int | None) -> list[str]:
    """Every line longer than `width` wrapped at spaces (a word longer than a line is broken),
    its continuation indented two more than the line itself; lines that fit are kept as they are."""
    out: list[str] = []
    for line in lines:
        if width is None or len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")))
        out += textwrap.wrap(line.strip(), width, initial_indent=indent, subsequent_indent=indent + "  ",
                             break_on_hyphens=False) or [line[:width]]
    return out


def fit_text(text: str, width: int | None) -> str:
    """`wrap_lines` of a whole text (which ends with a line break, as every view's does)."""
    if width is None:
        return text
    return "\n".join(wrap_lines(text.split("\n"), width))


def cut(line: str, width: int | None) -> str:
    """A table line cut at `width` with `…` (the last resort: a table never wraps)."""
    return line if width is None or len(line) <= width else line[: width - 1] + ELLIPSIS


def elide_middle(text: str, width: int) -> str:
    """`text` in at most `width` characters: whole `/`-separated frames from both ends around `…`
    where that fits (the first frame, then as many of the last as fit), else characters. Leading
    indentation is kept."""
    if len(text) <= width:
        return text
    body = text.lstrip(" ")
    indent = text[: len(text) - len(body)]
    room = width - len(indent)
    if room < 2:
        return text[:width]
    frames = body.split("/")
    if len(frames) >= 3:
        head = frames[0] + "/" + ELLIPSIS if frames[0] else ELLIPSIS  # an absolute path: `…/model.py:12`
        tail: list[str] = []
        for frame in reversed(frames[1:]):
            candidate = "/".join([frame, *tail])
            if len(head) + 1 + len(candidate) > room:
                break
            tail = [frame, *tail]
        if tail:  # room for a good piece of the next frame too: it shows its end (`…(jvp(Block_0))/while`)
            kept = "/" + "/".join(tail)
            spare = room - len(head) - len(kept)
            if spare >= MIN_PIECE:
                return indent + head + body[len(body) - len(kept) - spare:]
            return indent + head + kept
    keep = room - 1
    front = keep // 3  # the end says more (a file name, the innermost frame): it gets two thirds
    return indent + body[:front] + ELLIPSIS + body[len(body) - (keep - front):]


def fit_widths(widths: list[int], width: int | None, elidable: Sequence[int], minimums: list[int],
               gap: int = 2) -> list[int]:
    """Column widths that fit `width` (with `gap` spaces between columns) by narrowing only the
    `elidable` columns, in their order (the first down to its minimum before the next is
    touched: a path goes before the module name), none below its minimum. The table may still
    be wider than `width` when the other columns alone are."""
    widths = list(widths)
    if width is None:
        return widths
    excess = sum(widths) + gap * (len(widths) - 1) - width
    for i in elidable:
        if excess <= 0:
            break
        cut = min(excess, max(0, widths[i] - minimums[i]))
        widths[i] -= cut
        excess -= cut
    return widths


def _file_width(cells: Iterable[str]) -> int:
    """The width `…/name` takes for the longest last frame of the cells that are file paths
    (`/a/b/model.py:12`): a path is not elided below its file's name."""
    return max((len(c.rpartition("/")[2]) + 2 for c in cells if c.startswith("/") and ".py:" in c), default=0)


def fitted(header: list[str], rows: list[list[str]], width: int | None,
           elidable: Sequence[int], minimum: int = 0) -> tuple[list[str], list[list[str]], list[int]]:
    """The header and rows with their elidable cells shortened to fit `width` (none below
    `minimum` or MIN_ELIDED characters, or its header's width, and a path column not below its
    longest `…/file.py:12`), and the widths."""
    widths = [len(h) for h in header]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r)]
    if width is None or not elidable:
        return header, rows, widths
    minimums = [min(w, max(len(h), MIN_ELIDED, minimum, _file_width(r[i] for r in rows))) if i in elidable else w
                for i, (h, w) in enumerate(zip(header, widths))]
    widths = fit_widths(widths, width, elidable, minimums)
    rows = [[elide_middle(c, widths[i]) if i in elidable else c for i, c in enumerate(r)] for r in rows]
    return header, rows, widths
