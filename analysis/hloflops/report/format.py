"""Plain-text number and table formatting shared by every text view."""

from __future__ import annotations

import math
from typing import Sequence

RATIO_DIGITS = 6  # ratios and shares in the JSON: enough to read, few enough to be stable


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator rounded for stable output; None when the denominator is 0."""
    if not denominator or (isinstance(denominator, float) and not math.isfinite(denominator)):
        return None
    try:
        return round(numerator / denominator, RATIO_DIGITS)
    except OverflowError:  # exact counts far beyond float range (a module of 100,000 dimensions)
        return None


# C0 controls but the line break and tab, DEL and C1 controls: from a file, they would reach
# the terminal raw (`\x1b]0;title\x07`, `\x1b[2J`).
_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)] if c not in (0x0A, 0x09)}


def escape_controls(text: str) -> str:
    """Text for a terminal: every control character that could act on it written as `\\xNN`."""
    return text.translate(_CONTROLS)


def csv_cell(value: object) -> object:
    """A CSV cell a spreadsheet will not run: text starting with = + - @ (or tab, CR) gets a
    leading apostrophe, as OWASP recommends; numbers stay numbers."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def format_table(header: list[str], rows: list[list[str]], *, align: str = "", width: int | None = None,
                 elide: Sequence[int] = (), drop: Sequence[int] = ()) -> list[str]:
    """Plain-text columns; `align` has one letter per column ('l' or 'r', default right except
    the first column). With `width`, the `elide` columns are shortened in the middle to fit it,
    in that order; where that is not enough, the `drop` columns are left out, in that order; a
    line still too wide is cut (`hloflops.report.fit`)."""
    from hloflops.report.fit import READABLE, cut, fitted

    aligns = align or ("l" + "r" * (len(header) - 1))
    keep = list(range(len(header)))
    dropping = list(drop)
    while True:  # names stay readable (READABLE) while there are columns to drop; then they shrink further
        kept_elide = [keep.index(i) for i in elide if i in keep]
        readable = READABLE if dropping else 0
        h, r, widths = fitted([header[i] for i in keep], [[row[i] for i in keep] for row in rows], width, kept_elide,
                              readable)
        if width is None or sum(widths) + 2 * (len(widths) - 1) <= width:
            break
        if not dropping:
            break
        keep.remove(dropping.pop(0))
    kept_aligns = [aligns[i] for i in keep]

    def line(cells: list[str]) -> str:
        out = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, kept_aligns)]
        return cut("  ".join(out).rstrip(), width)

    return [line(h)] + [line(x) for x in r]
