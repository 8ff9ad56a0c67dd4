"""Catalogues of small jax programs, compiled by XLA on demand, for testing the cost analysis.

    from tests.programs import Program, LoopPair
    from tests.programs.lax_programs import PROGRAMS          # >= 220 programs, one per lax op variant
    from tests.programs.loop_programs import PAIRS, UNKNOWN_TRIP
    from tests.programs.compile import compile_program       # (compiled_text, lowered_text, xla_cost)

Nothing here imports jax at module level except the catalogue modules themselves (which need
jax to build their programs); `Program` and `LoopPair` are plain frozen dataclasses.

`Program.formula` holds hand-formula counts where one exists. Every key names what it counts:

- `flops`, `transcendentals`: whole-program totals of XLA's `cost_analysis()` for the optimized
  (loop-free) module. tests/cost/test_programs_catalogue.py checks these against XLA live.
- `dot_flops`, `conv_flops`, `sort_flops`, `reduce_flops`, `reduce_window_flops`, `fft_flops`:
  the sum, over every instruction of that kind in the optimized module
  (fused or not), of its own flops as XLA's rules count them (dot: 2 * N(out) * prod(contracting);
  conv: only taps on real input elements; sort: N * ceil(log2 N) with N all elements of operand
  0; reduce: (N_in - N_out) * reducer flops; reduce-window: (W - 1) * N_out * reducer flops;
  fft: 8 * prod(floor(log2 l)) * N(operand)). These are not checked against XLA here (XLA gives
  totals only); the cost-rule tests check them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

TOTAL_KEYS = ("flops", "transcendentals")
PER_KIND_KEYS = ("dot_flops", "conv_flops", "sort_flops", "reduce_flops", "reduce_window_flops", "fft_flops")
FORMULA_KEYS = TOTAL_KEYS + PER_KIND_KEYS
FAMILIES = (
    "transcendental",
    "elementwise",
    "dot",
    "conv",
    "reduce",
    "reduce_window",
    "select_and_scatter",
    "sort",
    "gather_scatter",
    "movement",
    "fft",
    "rng",
    "linalg",
    "control",
    "grad",
    "remat",
)


@dataclass(frozen=True)
class Program:
    """A jax function and the arguments to lower it with.

    `args` are `jax.ShapeDtypeStruct`s (enough to compile) or concrete arrays (needed to run).
    `x64` asks for the program to be traced inside `jax.enable_x64(True)` (f64/s64 programs):
    x64 is never enabled globally. Use `tests.programs.compile.lower_program` to honour it.
    `tags` name the op family in the lax catalogue (`FAMILIES`); loop programs have none.
    """

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    formula: dict[str, int] | None = None
    x64: bool = False
    tags: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class LoopPair:
    """The same computation with a loop (`rolled`) and without one (`unrolled`).

    Both take the same arguments and return the same values (checked numerically by
    tests/cost/test_programs_catalogue.py); gradients are taken with respect to every input, so the
    unrolled program computes every layer's input gradient as the loop must.
    `trip_counts` lists the trip count of each loop level of the rolled program, outermost
    first (see tests/programs/loop_programs.py for the convention).
    """

    name: str
    rolled: Program
    unrolled: Program
    notes: str
    trip_counts: tuple[int, ...] = ()


@dataclass(frozen=True)
class UnknownTripProgram:
    """A while loop whose trip count depends on the data: unknowable from the HLO alone.

    `program.args` are concrete arrays; `actual_trip_count` is how many times the body runs for
    them (the program returns its iteration counter as its last output, so this is checkable).
    """

    program: Program
    actual_trip_count: int
    notes: str
