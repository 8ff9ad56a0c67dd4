"""The sweep's cache of compiled texts (tests/remat/text_cache.py): a text is compiled once per
draw, program and stage, read back after, and never shared between draws or programs."""

from __future__ import annotations

from types import SimpleNamespace

from tests.remat.text_cache import cached_texts


def _counting_compiler(calls: list):
    def compile(program, stage: str) -> str:
        calls.append((program, stage))
        return f"HloModule {program}_{stage}"
    return compile


def test_a_text_is_compiled_once_and_read_back(tmp_path):
    calls: list = []
    pair = SimpleNamespace(remat="with_remat", plain="twin")
    for _ in range(2):  # a second sweep over the same draw
        text = cached_texts(tmp_path, "Form(seed=1)", pair, _counting_compiler(calls))
        assert text(pair.remat, "after") == "HloModule with_remat_after"
        assert text(pair.plain, "after") == "HloModule twin_after"
        assert text(pair.remat, "before") == "HloModule with_remat_before"
    assert len(calls) == 3  # the second sweep compiled nothing
    assert len(list(tmp_path.glob("*.hlo"))) == 3
    assert not list(tmp_path.glob("*.partial"))


def test_draws_and_programs_do_not_share_texts(tmp_path):
    calls: list = []
    first = SimpleNamespace(remat="a", plain="b")
    second = SimpleNamespace(remat="c", plain="d")
    assert cached_texts(tmp_path, "Form(seed=1)", first, _counting_compiler(calls))(first.remat, "after") \
        == "HloModule a_after"
    assert cached_texts(tmp_path, "Form(seed=2)", second, _counting_compiler(calls))(second.remat, "after") \
        == "HloModule c_after"
    # A program that is not the draw's own is compiled, never keyed by the draw.
    stray = cached_texts(tmp_path, "Form(seed=1)", first, _counting_compiler(calls))
    assert stray("other", "after") == "HloModule other_after"
    assert len(calls) == 3
