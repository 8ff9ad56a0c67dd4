"""Every collective in the corpus (the SPMD modules of xla_cc_spmd, the multi-GPU dumps of
jaxdecomp_gpu_dumps and xla_benchmark_models, and XLA's unit-test modules) either decodes its
groups, or is listed as uncounted with a reason: never an exception, never a guess."""

from __future__ import annotations

import re
from pathlib import Path

import hloparse
from hloflops import analyze
from hloflops.cost.communication import SENDERS

_COLLECTIVE = re.compile(r"\b(all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|collective-permute|"
                         r"collective-broadcast|send)(-start)?\(")
# What may leave an op uncounted in the corpus: a test module whose header does not say how many
# devices run it, while its shapes need more (all-gather of 8 shards with replica_count=1), and
# the in-place collective-permute with slices.
_ALLOWED = re.compile(r"(all-gather result|reduce-scatter operands) / \S+ says \d+ devices but its groups hold \d+|"
                      r"in-place collective-permute with slices")


def test_every_corpus_collective_decodes_or_is_listed(corpus_dir: Path) -> None:
    seen: dict[str, int] = {}
    decoded = uncounted = 0
    jaxdecomp_bytes = 0
    for path in sorted(corpus_dir.rglob("*.hlo")):
        rel = path.relative_to(corpus_dir).as_posix()
        if rel.startswith("_malformed/"):
            continue
        text = path.read_text(errors="replace")
        if not _COLLECTIVE.search(text):
            continue
        try:
            report = analyze(text)
        except hloparse.HloParseError:
            continue  # the parser tests own these
        listed = {u["name"] for u in report.to_dict()["communication"]["uncounted"]}
        top = rel.split("/")[0]
        for row in report.rows:
            if row.opcode not in SENDERS:
                continue
            seen[top] = seen.get(top, 0) + 1
            if row.communication_uncounted is None:
                decoded += 1
                assert row.communication >= 0
                continue
            uncounted += 1
            assert row.name in listed, f"{rel}: {row.name} uncounted but not listed"
            assert _ALLOWED.match(row.communication_uncounted), f"{rel}: {row.name}: {row.communication_uncounted}"
            assert not top.startswith("jaxdecomp"), f"{rel}: a real multi-GPU dump must decode: {row.name}"
        if top == "jaxdecomp_gpu_dumps":
            jaxdecomp_bytes += report.communication_bytes
    assert seen.get("xla_cc_spmd", 0) > 0 and seen.get("jaxdecomp_gpu_dumps", 0) > 0
    assert decoded > 6 * uncounted > 0
    assert jaxdecomp_bytes > 0
