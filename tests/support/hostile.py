"""Hostile HLO text of a chosen size, for the linearity tests and `benchmarks/hostile_scan.py`.

A valid module with slots in every kind of token; a case fills one slot with a long run of one
character (or a structural pattern: nesting, chains), so that any scanner, regular expression or
walk that is not linear in the run shows up as the size grows. What matters is the shape of the
input, not whether it parses: most cases are errors, and an error must be as cheap as a parse.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.conftest import SOURCE_PATH

TEMPLATE = """HloModule m{MODNAME}, entry_computation_layout={{(f32[2]{{0}})->f32[2]{{0}}}}{HEADER}

add{COMPNAME} {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

ENTRY e {{
  p = f32[2{DIMS}]{{0{LAYOUT}}} parameter(0)
  c0 = f32[] constant(0{LITERAL})
  t = (f32[2]{{0}}, f32[]) tuple(p{OPERAND}, c0){COMMENT}
  g = f32[2]{{0}} get-tuple-element(t), index=0
  r = f32[] reduce(p, c0), dimensions={{0{ATTR}}}, to_apply=add,
      metadata={{op_name="x{STRING}" source_file="f.py" source_line=1}}
  ROOT n{INSTNAME} = f32[2]{{0}} negate(g), backend_config={{"a":"b{JSON}"}}
}}
"""
SLOTS = ("MODNAME", "HEADER", "COMPNAME", "DIMS", "LAYOUT", "OPERAND", "COMMENT", "LITERAL", "ATTR", "STRING",
         "INSTNAME", "JSON")
CHARS = ("a", "0", " ", "\n", '"', "\\", '\\"', "(", ")", "[", "]", "{", "}", ",", "=", "%", "#1", "/", "/*", "*/",
         "//", "-", ".", ":", "\t", "\x1b", "é")


def slot_case(slot: str, run: str, size: int) -> str:
    """The template with `slot` holding `run` repeated to about `size` characters."""
    filler = run * max(1, size // len(run))
    values = dict.fromkeys(SLOTS, "")
    values[slot] = filler
    return TEMPLATE.format(**values)


def structural_case(kind: str, size: int) -> str:
    """Deep nesting of a bracket kind, unbalanced quotes, chains of calls and tuple accesses."""
    head = "HloModule m\n\nENTRY e {\n  p = f32[] parameter(0)\n"
    if kind in ("nest()", "nest[]", "nest{}"):
        o, c = kind[4], kind[5]
        k = size // 2
        return head + f"  ROOT r = f32[] negate(p), frontend_attributes={{x={o * k}{c * k}}}\n}}\n"
    if kind in ("open(", "open[", "open{"):
        return head + f"  ROOT r = f32[] negate(p), frontend_attributes={{x={kind[-1] * size}}}\n}}\n"
    if kind == "quotes":
        return head + '  ROOT r = f32[] negate(p), metadata={op_name="' + 'a"\n' * (size // 3) + "}\n"
    if kind == "unterminated":
        return head + '  ROOT r = f32[] negate(p), metadata={op_name="x\n' + "a\n" * (size // 2) + "}\n"
    if kind == "calls":
        n = max(2, size // 80)
        parts = ["HloModule m\n\nc0 {\n  ROOT p = f32[] parameter(0)\n}\n"]
        parts += [f"c{i} {{\n  p = f32[] parameter(0)\n  ROOT r = f32[] call(p), to_apply=c{i - 1}\n}}\n"
                  for i in range(1, n)]
        parts.append(f"ENTRY e {{\n  p = f32[] parameter(0)\n  ROOT r = f32[] call(p), to_apply=c{n - 1}\n}}\n")
        return "\n".join(parts)
    if kind == "tuples":
        n = max(2, size // 60)
        chain = ["  g0 = f32[] get-tuple-element(t0), index=0\n"]
        chain += [f"  t{i} = (f32[]) tuple(g{i - 1})\n  g{i} = f32[] get-tuple-element(t{i}), index=0\n"
                  for i in range(1, n)]
        return head + "  t0 = (f32[]) tuple(p)\n" + "".join(chain) + f"  ROOT r = f32[] negate(g{n - 1})\n}}\n"
    if kind == "hashes":
        return head + "  t = (f32[]) tuple(p)\n  ROOT r = f32[] negate(f32[] t" + "#1" * (size // 2) + ")\n}\n"
    raise ValueError(kind)


STRUCTURAL = ("nest()", "nest[]", "nest{}", "open(", "open[", "open{", "quotes", "unterminated", "calls", "tuples",
              "hashes")

# Runs in a fresh interpreter: parse, analyse and render the text, report CPU seconds and peak RSS.
_CHILD = r"""
import os, resource, sys, time
sys.setrecursionlimit(10_000)
text = sys.stdin.read()
import hloparse, hloflops.cli  # imported before the clock starts
from hloflops import analyze
warm = open("examples/fori_loop.after_optimizations.hlo").read()
hloflops.cli.render_summary(analyze(hloparse.parse(warm)))  # lazy imports and caches, before the baseline
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
best = None
for _ in range(int(sys.argv[1])):
    t = time.process_time()
    try:
        r = analyze(hloparse.parse(text))
        hloflops.cli.render_summary(r)
        outcome = "ok"
    except hloparse.HloParseError:
        outcome = "error"
    spent = time.process_time() - t
    best = spent if best is None else min(best, spent)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(best, (peak - base) * 1024, outcome)
"""


def measure(text: str, repeat: int = 3, timeout: float = 120.0) -> tuple[float, int, str]:
    """(best CPU seconds of `repeat` runs, peak RSS growth in bytes, "ok" | "error" | other) in a
    fresh process, so that memory from earlier cases does not hide this one's."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=SOURCE_PATH)
    try:
        out = subprocess.run([sys.executable, "-c", _CHILD, str(repeat)], input=text, capture_output=True,
                             text=True, timeout=timeout, env=env, cwd=root)
    except subprocess.TimeoutExpired:
        return float("inf"), 0, "timeout"
    if out.returncode != 0:
        return float("inf"), 0, "crash: " + (out.stderr.strip().splitlines() or [""])[-1][:200]
    best, peak, outcome = out.stdout.split()
    return float(best), int(peak), outcome


__all__ = ["SLOTS", "CHARS", "STRUCTURAL", "slot_case", "structural_case", "measure", "measure_here"]


def measure_here(text: str, repeat: int = 3) -> tuple[float, int, str]:
    """(best CPU seconds of `repeat` parses + analyses + summaries, peak traced bytes, outcome),
    in this process: tracemalloc counts what Python allocates, whatever was allocated before."""
    import tracemalloc

    import hloflops.cli
    import hloparse
    from hloflops import analyze

    def run() -> str:
        try:
            hloflops.cli.render_summary(analyze(hloparse.parse(text)))
            return "ok"
        except hloparse.HloParseError:
            return "error"

    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        outcome = run()
        best = min(best, time.process_time() - start)
    tracemalloc.start()
    try:
        run()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return best, peak, outcome
