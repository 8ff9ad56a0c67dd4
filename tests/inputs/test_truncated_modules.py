"""Truncated and inconsistent modules are refused the way XLA refuses them (issue 31): a TPU
train step cut off before its ENTRY parsed as its last fusion and was reported exact at a few
MFLOPs. The header describes the real entry; a module whose entry contradicts it is refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import hloparse
from tests.support.xla_oracle import have_xla, our_verdict, xla_verdicts

TRAIN_STEP = Path(__file__).resolve().parents[1] / "data" / "tpu" / "train_step_v5e.hlo"
needs_xla = pytest.mark.skipif(not have_xla(), reason="asks XLA's own parser (jaxlib) for its verdict")


def _cuts() -> list[tuple[int, str]]:
    """The train step cut after each computation before its ENTRY (the file parses up to there), and
    mid-way through computations: (line cut after, text)."""
    lines = TRAIN_STEP.read_text().splitlines(keepends=True)
    entry = next(i for i, line in enumerate(lines) if line.startswith("ENTRY"))
    ends = [i + 1 for i, line in enumerate(lines[:entry]) if line.startswith("}")]
    middles = [i + 3 for i, line in enumerate(lines[:entry]) if line.startswith("%")][::5]
    return [(n, "".join(lines[:n])) for n in sorted(set(ends + middles))]


@needs_xla
def test_tpu_train_step_cut_off_is_refused_as_xla_refuses_it() -> None:
    whole = TRAIN_STEP.read_text()
    assert len(re.findall(r"\{\d+\}: \(", whole.splitlines()[0])) == 25  # the header aliases 25 outputs
    cuts = _cuts()
    assert len(cuts) > 20
    verdicts = xla_verdicts([whole] + [text for _, text in cuts])
    assert verdicts[0] == "accept"
    for (n, text), xla in zip(cuts, verdicts[1:]):
        assert xla.startswith("reject"), f"XLA accepts the train step cut after line {n}"
        ours = our_verdict(text)
        assert ours.startswith("reject"), f"cut after line {n}: accepted, XLA says {xla}"
        assert re.match(r"reject: <string>:\d+:\d+: ", ours), ours


def test_cut_before_entry_names_the_header_and_the_guess() -> None:
    text = TRAIN_STEP.read_text()
    cut = text[: text.index("\nENTRY")]
    with pytest.raises(hloparse.HloParseError) as error:
        hloparse.parse(cut, path="step.hlo")
    assert error.value.line == 1
    assert re.search(r"input_output_alias: output \{\d+\} is no index of the entry's result", str(error.value))
    assert "no computation is marked ENTRY" in str(error.value)
    # The same cut without the alias: the layout says what the entry takes
    without_alias = re.sub(r" input_output_alias=\{.*?may-alias\) \},", "", cut, count=1)
    assert "input_output_alias" not in without_alias.splitlines()[0]
    with pytest.raises(hloparse.HloParseError, match="entry_computation_layout has 27 parameters"):
        hloparse.parse(without_alias)


HEAD = "HloModule m, {attrs}\n"
BODY = "{entry}c {{\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}}\n"


@needs_xla
@pytest.mark.parametrize("attrs, refused_without_entry, refused_with_entry", [
    ("input_output_alias={ {1}: (0, {}, may-alias) }", True, True),  # output index: XLA's parser
    ("input_output_alias={ {}: (1, {}, may-alias) }", True, False),  # parameter: XLA's verifier
    ("input_output_alias={ {}: (0, {0}, may-alias) }", True, False),
    ("entry_computation_layout={(f32[2]{0}, f32[2]{0})->f32[2]{0}}", True, False),
    ("entry_computation_layout={(f32[3]{0})->f32[2]{0}}", True, False),
    ("entry_computation_layout={(f32[2]{0})->(f32[2]{0})}", True, False),
    ("entry_computation_layout={(f32[2]{0})->f32[2]{0}}, input_output_alias={ {}: (0, {}, may-alias) }", False, False),
])
def test_header_held_to_the_entry(attrs: str, refused_without_entry: bool, refused_with_entry: bool) -> None:
    without_entry = HEAD.format(attrs=attrs) + BODY.format(entry="")
    with_entry = HEAD.format(attrs=attrs) + BODY.format(entry="ENTRY ")
    xla = xla_verdicts([with_entry, without_entry])
    # Where ENTRY is written, what XLA's parser refuses (and only that); where it is a guess, also
    # what its verifier refuses.
    assert xla[0].startswith("reject") == refused_with_entry
    assert our_verdict(with_entry).startswith("reject") == refused_with_entry
    assert our_verdict(without_entry).startswith("reject") == refused_without_entry
