"""Issue 12: time linear in the input and memory a small multiple of it, for hostile input.

Each case is a text of ~50 KB and the same grown 8x (~400 KB): a long run of one character inside
one kind of token (every slot of `tests/support/hostile.py` x every character, sampled by
hypothesis), unbalanced quotes and brackets, deep nesting of each bracket kind, long chains of
calls and of tuple accesses. Parsing, analysing and rendering the larger one may take at most 12x
the CPU time of the smaller (best of 3 on a busy 2-core machine, measured again up to twice
when over, plus 20 ms of slack for timer noise on cases of a few milliseconds), and its peak
traced memory must stay under 20 bytes per character plus 8 MB; the structural cases made of
thousands of tiny instructions (call and tuple chains) under 64, the size of one instruction's
objects per ~30 characters.
`benchmarks/hostile_scan.py` runs every case, at any size.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.hostile import CHARS, SLOTS, STRUCTURAL, measure_here, slot_case, structural_case

SMALL, FACTOR = 50_000, 8
SLACK_S = 0.02
CONSTANT_BYTES = 8 << 20
# Many-instruction modules: ~1 KB of IR objects per instruction of ~30 characters.
BYTES_PER_CHAR = {"calls": 64, "tuples": 64}


def check_linear(make, name: str, per_char: int = 20) -> None:  # noqa: ANN001
    small, big = make(SMALL), make(SMALL * FACTOR)
    measure_here(small, 1)  # caches and lazy imports, before anything is timed
    t_small, _, _ = measure_here(small, 3)
    t_big, peak, outcome = measure_here(big, 1)
    for _ in range(2):  # CPU time still varies with what the neighbours do to caches: measure again
        if t_big <= FACTOR * 1.5 * t_small + SLACK_S:
            break
        t_small = min(t_small, measure_here(small, 3)[0])
        t_big = min(t_big, measure_here(big, 3)[0])
    assert t_big <= FACTOR * 1.5 * t_small + SLACK_S, (
        f"{name}: {len(small)} -> {len(big)} chars took {t_small:.4f} -> {t_big:.4f} CPU s ({outcome})")
    assert peak <= per_char * len(big) + CONSTANT_BYTES, (
        f"{name}: peak {peak / len(big):.1f} bytes a character on {len(big)} chars ({outcome})")


@pytest.mark.parametrize("kind", STRUCTURAL)
def test_structural_cases(kind):
    check_linear(lambda n: structural_case(kind, n), kind, BYTES_PER_CHAR.get(kind, 20))


# The runs that were quadratic or worse before issue 12 (each found by the scan), always run.
KNOWN = [("STRING", "a"), ("STRING", '\\"'), ("OPERAND", " "), ("OPERAND", "#1"), ("COMPNAME", "{"),
         ("COMPNAME", '\\"'), ("HEADER", ","), ("DIMS", "/*"), ("MODNAME", "*/"), ("LITERAL", "/*"),
         ("INSTNAME", "\n"), ("COMMENT", "/*"), ("JSON", '"'), ("ATTR", "(")]


@pytest.mark.parametrize("slot, run", KNOWN)
def test_known_runs(slot, run):
    check_linear(lambda n: slot_case(slot, run, n), f"{slot}:{run!r}")


@settings(max_examples=16, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(slot=st.sampled_from(SLOTS), run=st.sampled_from(CHARS))
def test_any_run_in_any_token(slot, run):
    check_linear(lambda n: slot_case(slot, run, n), f"{slot}:{run!r}")
