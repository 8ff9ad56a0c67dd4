"""Branch counts of one loop level in closed form: affine counters, periodic or threshold selectors.

When the loop's state elements the selector reads are integer counters stepped by constants
(`i <- i + c`) and loop invariants, the counters are affine in the trip t: `a + s*t`. The selector
is then classified by a small abstract interpretation, without evaluating every trip:

    affine pieces   a + s*t on each interval of t between breakpoints (a counter; sums, differences,
                    constant multiples; a select on a threshold between affine values)
    periodic        on each interval between breakpoints, a function of t mod P: a comparison
                    (P = 1: constant between its sign changes), a remainder by a constant m
                    (P = |m|, the dividend keeping its sign), a bitwise and with a mask
                    (P = 2^bits), and any op on such values (P = the lcm)

Each interval is then counted from one period (P evaluations) times its repeats, plus the rest.
Breakpoints only split intervals, so extra ones are harmless; a construct outside these rules,
a value that would wrap its integer type, or a period beyond `MAX_PERIOD` gives no closed form
(None), and the caller enumerates instead.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

from hloflops.loops import loop_eval
from hloflops.loops.loop_eval import Expr, Path

MAX_PERIOD = 1 << 16
Pieces = tuple[tuple[int, int, int], ...]  # (first trip, a, s): value a + s*t from that trip on
Shape = tuple  # ("const", v) | ("pieces", Pieces) | ("periodic", P, breakpoints)


class _NoClosedForm(Exception):
    pass


def _fits(value: int, dtype: str) -> bool:
    return loop_eval.wrap_int(value, dtype) == value


class _Shapes:
    def __init__(self, counters: Mapping[Path, tuple[int, int]], invariants: Mapping[Path, object],
                 dtypes: Mapping[Path, str], trips: int):
        self.counters, self.invariants, self.dtypes, self.trips = counters, invariants, dtypes, trips
        self.memo: dict[int, tuple[Expr, Shape]] = {}  # id of an expression (shared subtrees) -> its shape

    def _ends(self, pieces: Pieces) -> list[int]:
        """Every piece's value at its first and last trip (affine: the extremes)."""
        values = []
        bounds = [p[0] for p in pieces[1:]] + [self.trips]
        for (start, a, s), end in zip(pieces, bounds):
            if end > start:
                values += [a + s * start, a + s * (end - 1)]
        return values

    def _checked(self, pieces: Pieces, dtype: str) -> Shape:
        if dtype not in loop_eval.INT_BITS or not all(_fits(v, dtype) for v in self._ends(pieces)):
            raise _NoClosedForm
        return ("pieces", pieces)

    def of(self, expr: Expr) -> Shape:
        found = self.memo.get(id(expr))
        if found is None or found[0] is not expr:
            found = self.memo[id(expr)] = (expr, self._of(expr))
        return found[1]

    def _of(self, expr: Expr) -> Shape:
        kind = expr[0]
        if kind == "const":
            return ("const", expr[1])
        if kind == "var":
            path = expr[1]
            if path in self.invariants:
                return ("const", self.invariants[path])
            a, s = self.counters[path]
            return self._checked(((0, a, s),), self.dtypes[path])
        if kind != "op":
            raise _NoClosedForm
        _, opcode, dtype, extra, children = expr
        shapes = [self.of(c) for c in children]
        if all(s[0] == "const" for s in shapes):
            return ("const", loop_eval.apply_op(opcode, dtype, extra, [s[1] for s in shapes]))
        if any(s[0] == "pieces" for s in shapes):
            return self._on_pieces(opcode, dtype, extra, children, shapes)
        return _periodic(shapes, ())

    def _on_pieces(self, opcode: str, dtype: str, extra, children, shapes: list[Shape]) -> Shape:
        if opcode in ("add", "subtract", "negate", "multiply", "convert", "copy"):
            return self._arithmetic(opcode, dtype, shapes)
        if opcode == "compare":
            difference = self._arithmetic("subtract", "s64", shapes)
            return ("periodic", 1, _sign_changes(difference[1], self.trips))
        if opcode == "remainder" and shapes[0][0] == "pieces" and shapes[1][0] == "const":
            m = int(shapes[1][1])
            if m == 0:
                raise _NoClosedForm
            return ("periodic", abs(m), _sign_changes(shapes[0][1], self.trips))
        if opcode == "and" and dtype in loop_eval.INT_BITS and {s[0] for s in shapes} == {"pieces", "const"}:
            mask = int(next(s[1] for s in shapes if s[0] == "const"))
            if mask < 0:
                raise _NoClosedForm
            pieces = next(s[1] for s in shapes if s[0] == "pieces")
            return ("periodic", 1 << mask.bit_length(), tuple(p[0] for p in pieces))
        if opcode == "select" and shapes[0][0] == "periodic" and shapes[0][1] == 1:
            return self._select(children, shapes, dtype)
        raise _NoClosedForm

    def _arithmetic(self, opcode: str, dtype: str, shapes: list[Shape]) -> Shape:
        parts = [s[1] if s[0] == "pieces" else ((0, int(s[1]), 0),) if s[0] == "const" else None for s in shapes]
        if any(p is None for p in parts):
            raise _NoClosedForm
        starts = sorted({p[0] for part in parts for p in part})
        pieces = []
        for start in starts:
            terms = [_piece_at(part, start) for part in parts]
            if opcode == "add":
                a, s = terms[0][0] + terms[1][0], terms[0][1] + terms[1][1]
            elif opcode == "subtract":
                a, s = terms[0][0] - terms[1][0], terms[0][1] - terms[1][1]
            elif opcode == "negate":
                a, s = -terms[0][0], -terms[0][1]
            elif opcode == "multiply":
                (a0, s0), (a1, s1) = terms
                if s0 and s1:
                    raise _NoClosedForm  # quadratic in t
                a, s = a0 * a1, a0 * s1 + a1 * s0
            else:  # convert, copy: the same integer (checked to fit below)
                a, s = terms[0]
            pieces.append((start, a, s))
        return self._checked(tuple(pieces), dtype)

    def _select(self, children, shapes: list[Shape], dtype: str) -> Shape:
        """A select on a threshold: constant between its breakpoints, so each interval takes one
        operand (evaluated at the interval's first trip)."""
        if any(s[0] == "periodic" for s in shapes[1:]):
            raise _NoClosedForm
        predicate = loop_eval.compile_expr(children[0])
        starts = sorted({0, *shapes[0][2]} | {p[0] for s in shapes[1:] if s[0] == "pieces" for p in s[1]})
        pieces = []
        for start in (t for t in starts if 0 <= t < self.trips):
            chosen = shapes[1] if predicate(self.state(start)) else shapes[2]
            a, s = _piece_at(chosen[1], start) if chosen[0] == "pieces" else (int(chosen[1]), 0)
            pieces.append((start, a, s))
        return self._checked(tuple(pieces), dtype)

    def state(self, t: int) -> dict[Path, object]:
        env = dict(self.invariants)
        for path, (a, s) in self.counters.items():
            env[path] = loop_eval.cast(a + s * t, self.dtypes[path])
        return env


def _piece_at(pieces: Pieces, t: int) -> tuple[int, int]:
    found = pieces[0]
    for piece in pieces:
        if piece[0] <= t:
            found = piece
    return found[1], found[2]


def _sign_changes(pieces: Pieces, trips: int) -> tuple[int, ...]:
    """Trips around which an affine piece may change sign (and the pieces' own starts)."""
    points = [p[0] for p in pieces]
    for start, a, s in pieces:
        if s:
            root = -a // s
            points += [root - 1, root, root + 1, root + 2]
    return tuple(t for t in points if 0 <= t <= trips)


def _periodic(shapes: list[Shape], extra: tuple[int, ...]) -> Shape:
    period, points = 1, set(extra)
    for shape in shapes:
        if shape[0] == "periodic":
            period = math.lcm(period, shape[1])
            points |= set(shape[2])
    if period > MAX_PERIOD:
        raise _NoClosedForm
    return ("periodic", period, tuple(sorted(points)))


def closed_form_counts(selector: Expr, pick: Callable, branches: int, updates: Mapping[Path, Expr],
                       initial: Mapping[Path, object], dtypes: Mapping[Path, str], trips: int,
                       budget: int) -> tuple[list[int], int] | None:
    """(branch counts over the `trips` trips, evaluations spent), or None without a closed form.
    `pick` maps a state to its branch index; `updates` are the level's element updates."""
    counters: dict[Path, tuple[int, int]] = {}
    invariants: dict[Path, object] = {}
    for path, update in updates.items():
        if update == ("var", path):
            invariants[path] = initial[path]
            continue
        step = _counter_step(update, path)
        value = initial[path]
        if step is None or isinstance(value, bool) or not isinstance(value, int):
            return None
        counters[path] = (value, step)
    shapes = _Shapes(counters, invariants, dtypes, trips)
    try:
        shape = shapes.of(selector)
    except (_NoClosedForm, loop_eval.EvaluationError, OverflowError, ValueError, ZeroDivisionError, TypeError,
            KeyError):
        return None
    if shape[0] == "const":
        counts = [0] * branches
        counts[pick(shapes.state(0))] = trips
        return counts, 1
    if shape[0] == "pieces":
        return None  # a selector that is itself a counter: an index into a switch, enumerate it
    period, points = shape[1], shape[2]
    edges = sorted({0, trips, *points})
    counts, spent = [0] * branches, 0
    for lo, hi in zip(edges, edges[1:]):
        length = hi - lo
        repeats, rest = divmod(length, period) if length > 2 * period else (0, length)
        window = period if repeats else 0
        if spent + window + rest > budget:
            return None
        for t in range(lo, lo + window):
            counts[pick(shapes.state(t))] += repeats
        for t in range(lo + repeats * period, hi):
            counts[pick(shapes.state(t))] += 1
        spent += window + rest
    return counts, spent


def _counter_step(update: Expr, path: Path) -> int | None:
    """c where the update is `element + c` (either order) or `element - c`."""
    if update[0] != "op" or update[1] not in ("add", "subtract"):
        return None
    a, b = update[4]
    if a == ("var", path) and b[0] == "const" and isinstance(b[1], int) and not isinstance(b[1], bool):
        return b[1] if update[1] == "add" else -b[1]
    if update[1] == "add" and b == ("var", path) and a[0] == "const" and isinstance(a[1], int):
        return a[1]
    return None
