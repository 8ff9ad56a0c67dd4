"""The patterns that read a computation's heading line: its name, the common form of its
signature, and (for the builder's walk) a closing `}` followed by the next one-line heading."""

from __future__ import annotations

import re
from itertools import groupby

from hloparse.ir import ELEMENT_BYTES

COMP_NAME = re.compile(r"\s*(ENTRY\s+)?%?([A-Za-z0-9_][\w.\-:]*)\s*")  # then the signature, then '{'

# The element types as a tree by first letter, each group longest first (`s16` before `s1`): the
# engine tries a branch only where its first letter matches, not all thirty names at every shape.
_ELEMENT = "(?:" + "|".join(
    first + "(?:" + "|".join(name[1:] for name in sorted(group, key=len, reverse=True)) + ")"
    for first, group in groupby(sorted(ELEMENT_BYTES), key=lambda name: name[0])) + ")"
_ARRAY = _ELEMENT + r"\[[\d,\s<=?]*+\](?:\{[^{}]*+\})?|token\[\]"
_FLAT_TUPLE = r"\((?:\s*+(?:/\*index=\d++\*/)?\s*+(?:" + _ARRAY + r")\s*+,?)*+\s*+\)"
_SHAPE_PATTERN = f"(?:{_ARRAY}|{_FLAT_TUPLE})"
_PARAMETER_NAME = r"%?[A-Za-z0-9_.\-]++"  # ASCII, possessive: a name beyond ASCII is _signature's to read
# `(p0: f32[2], p1: (s32[], f32[])) -> f32[2]`, the form nearly every heading takes. Possessive
# throughout: what each repeat is followed by, it cannot match. (Stricter than the parse it saves
# is safe: a heading it does not vouch for is parsed whole.)
SIMPLE_SIGNATURE = re.compile(
    rf"\s*+\(\s*+(?:{_PARAMETER_NAME}\s*+:\s*+{_SHAPE_PATTERN}\s*+(?:,\s*+(?={_PARAMETER_NAME}\s*+:)|(?=\))))*+\)"
    rf"\s*+->\s*+{_SHAPE_PATTERN}\s*+"
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
