"""Text tables that fit the terminal: long name columns (scopes, paths, module names) are elided
in the middle, `jit(train_step)/…/while/body`, so that both ends of a name stack stay readable.

The width is `COLUMNS` when set (a positive integer), else the terminal's when standard output
is one; output into a pipe or a file is never elided (`None`): it is what scripts read and grep,
and it stays the same bytes whatever window it was printed from. `COLUMNS=100 hloflops FILE | less`
asks for elision in a pipe.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Mapping, Sequence, TextIO

ELLIPSIS = "\u2026"
MIN_ELIDED = 16  # an elided cell keeps at least this many characters (or its header's width)


def output_width(stream: TextIO | None = None, env: Mapping[str, str] | None = None) -> int | None:
    """The width text for `stream` (default stdout) must fit, or None for no limit (see above)."""
    env = os.environ if env is None else env
    columns = env.get("COLUMNS", "")
    if columns.strip().isdigit() and int(columns) > 0:
        return int(columns)
    stream = sys.stdout if stream is None else stream
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):  # a closed or replaced stream
        return None
    return shutil.get_terminal_size().columns


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
        head = frames[0] + "/" + ELLIPSIS
        tail: list[str] = []
        for frame in reversed(frames[1:]):
            candidate = "/".join([frame, *tail])
            if len(head) + 1 + len(candidate) > room:
                break
            tail = [frame, *tail]
        if tail:
            return indent + head + "/" + "/".join(tail)
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


def fitted(header: list[str], rows: list[list[str]], width: int | None,
           elidable: Sequence[int]) -> tuple[list[str], list[list[str]], list[int]]:
    """The header and rows with their elidable cells shortened to fit `width`, and the widths."""
    widths = [len(h) for h in header]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r)]
    if width is None or not elidable:
        return header, rows, widths
    minimums = [max(len(h), MIN_ELIDED) if i in elidable else w for i, (h, w) in enumerate(zip(header, widths))]
    widths = fit_widths(widths, width, elidable, minimums)
    rows = [[elide_middle(c, widths[i]) if i in elidable else c for i, c in enumerate(r)] for r in rows]
    return header, rows, widths
