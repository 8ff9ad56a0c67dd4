"""xla_estimate reproduces XLA's cost analysis, bit for bit, on every corpus module XLA can cost.

XLA is asked live (jaxlib's `hlo_module_cost_analysis` on the CPU client, in a child process
because XLA aborts on a few modules it parses). Its answers are cached under pytest's cache
directory, one JSON file per module text hash; `pytest --cache-clear` (or deleting
`.pytest_cache/d/xla_corpus_costs`) makes XLA be asked again.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import hloparse
from hloflops.engine import own_cost
from hloflops.xla.estimate import loop_once_totals, xla_estimate
from hloparse.ir import CallRole

pytest.importorskip("jax")

KEYS = ("flops", "transcendentals", "bytes accessed")


@pytest.fixture(scope="module")
def corpus_answers(corpus_dir: Path, request) -> list[tuple[str, str, dict]]:
    """(file, text, XLA's dict) for every module XLA accepts and can cost."""
    from hloflops.xla.compare import xla_costs_of_texts

    with open(corpus_dir / "index.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["xla_parses"] == "yes"]
    texts = {r["file"]: (corpus_dir / r["file"]).read_text(encoding="utf-8", errors="replace") for r in rows}
    cache = getattr(request.config, "cache", None)  # absent under `-p no:cacheprovider`: ask XLA every time
    cache_dir = str(cache.mkdir("xla_corpus_costs")) if cache is not None else None
    answers = xla_costs_of_texts(texts, cache_dir=cache_dir)
    return [(name, texts[name], answers[name]) for name in texts if isinstance(answers[name], dict)]


@pytest.fixture(scope="module")
def results(corpus_answers) -> list[dict]:
    """Everything the tests check, computed once per module: our parse, the float32 estimate, the
    loop-once integer totals and the plain sum of own_cost(view="xla")."""
    out = []
    for name, text, xla in corpus_answers:
        row = {"name": name, "xla": {k: float(xla.get(k, 0.0)) for k in KEYS}}
        out.append(row)
        try:
            module = hloparse.parse(text, path=name)
        except Exception as err:  # noqa: BLE001 - reported by test_every_costable_module_is_estimated
            row["error"] = f"parse: {str(err).splitlines()[0][:200]}"
            continue
        opcodes = {inst.opcode for _, inst in module.instructions()}
        row["has_while"] = "while" in opcodes
        row["has_conditional"] = "conditional" in opcodes
        row["instructions"] = sum(len(c.instructions) for c in module.computations)
        try:
            everything = xla_estimate(module, diagnostics=True)
            estimate = {k: v for k, v in everything.items() if k in KEYS or k == "optimal_seconds"}
            totals, _ = loop_once_totals(module, view="xla")
            row["plain_sum"] = _plain_sum(module)
        except Exception as err:  # noqa: BLE001
            row["error"] = f"estimate: {type(err).__name__}: {err}"
            continue
        row["estimate"] = {k: estimate.get(k, 0.0) for k in KEYS}
        row["all_keys_differ"] = sorted(k for k in set(everything) | set(xla)
                                        if everything.get(k, 0.0) != float(xla.get(k, 0.0)))
        row["optimal_seconds"] = (estimate.get("optimal_seconds", 0.0), float(xla.get("optimal_seconds", 0.0)))
        row["integers"] = dict(zip(KEYS, (totals.flops, totals.transcendentals, totals.bytes_accessed)))
    return out


def _plain_sum(module) -> dict[str, int] | str:
    """Sum of own_cost(view="xla") over every instruction reachable from ENTRY through CONTROL
    edges (each call site walks its callee again)."""
    sums = dict.fromkeys(KEYS, 0)
    stack = [module.entry.name]
    while stack:
        comp = module.computation(stack.pop())
        for inst in comp.instructions:
            cost = own_cost(module, comp, inst, view="xla")
            if cost.uncounted is not None:
                return f"{inst.name}: {cost.uncounted}"
            sums["flops"] += cost.cost.flops
            sums["transcendentals"] += cost.cost.transcendentals
            sums["bytes accessed"] += cost.cost.bytes_accessed
            stack.extend(s.computation for s in inst.calls if s.role in CallRole.CONTROL)
    return sums


def _estimated(results, *, loops: bool) -> list[dict]:
    return [r for r in results if "estimate" in r and r["has_while"] == loops]


def test_corpus_has_the_expected_size(corpus_answers):
    # The comparison is only meaningful if XLA costed (nearly) the whole corpus.
    assert len(corpus_answers) > 4000


def test_loop_free_modules_match_xla_bit_for_bit(results):
    rows = _estimated(results, loops=False)
    mismatches = [f"{r['name']}: {k} XLA {r['xla'][k]!r} ours {r['estimate'][k]!r}"
                  for r in rows for k in KEYS if r["estimate"][k] != r["xla"][k]]
    assert len(rows) > 3700
    assert not mismatches, f"{len(mismatches)} mismatches:\n" + "\n".join(mismatches[:50])


def test_modules_with_loops_match_xla_too(results):
    """XLA counts each while body once; so does xla_estimate."""
    rows = _estimated(results, loops=True)
    mismatches = [f"{r['name']}: {k} XLA {r['xla'][k]!r} ours {r['estimate'][k]!r}"
                  for r in rows for k in KEYS if r["estimate"][k] != r["xla"][k]]
    assert len(rows) > 400
    assert not mismatches, f"{len(mismatches)} mismatches:\n" + "\n".join(mismatches[:50])


def test_every_costable_module_is_estimated(results):
    """Every module XLA can cost must parse and be estimated. A failure here lists the modules
    our parser (hloparse) rejects although XLA accepts them."""
    failures = [f"{r['name']}: {r['error']}" for r in results if "error" in r]
    assert not failures, f"{len(failures)} of {len(results)} modules not estimated:\n" + "\n".join(failures)


def _close(ours: int, xla: float, terms: int) -> bool:
    """Equal up to XLA's float32 rounding: exact below 2**24; above, within the error bound of a
    float32 running sum of `terms` values (terms x 2**-24, relative)."""
    if abs(ours) < 2**24 and abs(xla) < 2**24:
        return ours == xla
    return abs(ours - xla) <= abs(ours) * max(terms, 16) * 2.0**-24 + 1


def test_sum_of_own_costs_is_xlas_total(results):
    """The contract's invariant: on a loop-free module without conditionals, the plain sum of
    own_cost(view="xla") over every instruction reachable from ENTRY through CONTROL edges is
    XLA's number up to float32 rounding."""
    rows = [r for r in _estimated(results, loops=False) if not r["has_conditional"]]
    bad = []
    for r in rows:
        if isinstance(r["plain_sum"], str):
            bad.append(f"{r['name']}: uncounted in the xla view: {r['plain_sum']}")
            continue
        bad += [f"{r['name']}: {k} XLA {r['xla'][k]!r} sum of own_cost {r['plain_sum'][k]}"
                for k in KEYS if not _close(r["plain_sum"][k], r["xla"][k], r["instructions"])]
    assert len(rows) > 3500
    assert not bad, "\n".join(bad[:50])


def test_loop_once_integer_totals_agree_with_the_float32_estimate(results):
    """The integer traversal (conditionals by maximum, loops once) and the float32 estimate are
    the same numbers before rounding, on every module (loops included)."""
    bad = [f"{r['name']}: {k} float32 {r['estimate'][k]!r} integers {r['integers'][k]}"
           for r in results if "estimate" in r
           for k in KEYS if not _close(r["integers"][k], r["estimate"][k], r["instructions"])]
    assert not bad, "\n".join(bad[:50])


def test_optimal_seconds_is_minus_one_per_costed_custom_call_like_xla(results):
    """Bonus key: with no rates configured, XLA's optimal_seconds is -1 per custom-call reached
    through calls, loops and branches (fusions and async wrappers reset it to 0)."""
    bad = [f"{r['name']}: ours {r['optimal_seconds'][0]!r} XLA {r['optimal_seconds'][1]!r}"
           for r in results if "estimate" in r and r["optimal_seconds"][0] != r["optimal_seconds"][1]]
    assert not bad, "\n".join(bad[:50])


def test_every_key_of_xlas_dict_matches_diagnostics_included(results):
    """Bonus: with diagnostics=True the whole dict matches, per-operand keys
    (`bytes accessed0{}`, `utilization1{}`, `bytes accessedout{0}`, ...) included."""
    bad = [f"{r['name']}: {r['all_keys_differ'][:5]}" for r in results if r.get("all_keys_differ")]
    assert not bad, f"{len(bad)} modules:\n" + "\n".join(bad[:50])
