"""The patterns that read a computation's heading line: its name, the common form of its
signature, and (for the builder's walk) a closing `}` followed by the next one-line heading."""

from __future__ import annotations

import re

from hloparse.ir import ELEMENT_BYTES

COMP_NAME = re.compile(r"\s*(ENTRY\s+)?%?([A-Za-z0-9_][\w.\-:]*)\s*")  # then the signature, then '{'

_ELEMENT = "(?:" + "|".join(sorted(ELEMENT_BYTES, key=len, reverse=True)) + ")"
_ARRAY = _ELEMENT + r"\[[\d,\s<=?]*\](?:\{[^{}]*\})?|token\[\]"
_FLAT_TUPLE = r"\((?:\s*(?:/\*index=\d+\*/)?\s*(?:" + _ARRAY + r")\s*,?)*\s*\)"
_SHAPE_PATTERN = f"(?:{_ARRAY}|{_FLAT_TUPLE})"
# `(p0: f32[2], p1: (s32[], f32[])) -> f32[2]`, the form nearly every heading takes.
SIMPLE_SIGNATURE = re.compile(
    rf"\s*\(\s*(?:%?[\w.\-]+\s*:\s*{_SHAPE_PATTERN}\s*(?:,\s*(?=%?[\w.\-]+\s*:)|(?=\))))*\)"
    rf"\s*->\s*{_SHAPE_PATTERN}\s*"
)


# The `}` line that closes a computation, blank lines, and the next computation's one-line heading
# as the splitter reads it (no quotes, ends in `{`, no `=` before its parameters; the caller
# checks that its brackets leave only that `{` open); then a line with something on it, which
# the splitter yields if the walk does not take it (an error at the end of input is located at
# the last statement yielded).
NEXT_HEADING = re.compile(
    r"\}[ \t]*+\n(?:[ \t]*+\n)*+"  # the closing brace, blank lines
    r"([ \t]*+(?!HloModule)(?:ENTRY[ \t]++)?%?[A-Za-z0-9_][\w.\-:]*+[ \t]*+(?:\([^\n\"]*)?\{[ \t]*+)\n"  # the heading
    r"(?=[^\n]*?\S)"
)
