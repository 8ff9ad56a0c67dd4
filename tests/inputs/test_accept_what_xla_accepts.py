"""Accept what XLA accepts (issue 31): a convolution whose dim_labels carry no batch or feature
label (`012_012->012`, as in XProf's tests) is valid HLO that XLA parses and costs, with the
missing roles at dimension 0 (the proto's default); its numbers are XLA's."""

from __future__ import annotations

import pytest

import hloflops

CONV = """HloModule conv

ENTRY %main (a: f32[{a}], b: f32[{b}]) -> f32[{c}] {{
  %a = f32[{a}] parameter(0)
  %b = f32[{b}] parameter(1)
  ROOT %c = f32[{c}] convolution(%a, %b), window={{size={w}}}, dim_labels={labels}
}}
"""


@pytest.mark.parametrize("a, b, c, w, labels", [
    ("5,6,7", "2,3,4", "4,4,4", "2x3x4", "012_012->012"),
    ("8,9", "3,2", "6,8", "3x2", "01_01->01"),
    ("4,8,9", "4,3,2", "4,6,8", "3x2", "b01_o01->b01"),  # a batch and an output feature, no input feature
    ("8,9,3", "3,2,3", "6,8", "3x2", "01f_01i->01"),
])
def test_convolution_without_batch_or_feature_labels(a: str, b: str, c: str, w: str, labels: str) -> None:
    pytest.importorskip("jax")
    text = CONV.format(a=a, b=b, c=c, w=w, labels=labels)
    comparison = hloflops.compare(text)
    assert comparison.xla["flops"] > 0
    assert comparison.estimate_matches == {"flops": True, "transcendentals": True, "bytes_accessed": True}
    assert comparison.report.flops == comparison.xla["flops"]  # no loop: exact is XLA's number


CONDITIONAL = """HloModule m

t {{
  p = f32[] parameter(0)
  ROOT r = f32[] negate(p)
}}

f {{
  p = f32[] parameter(0)
  ROOT r = f32[] abs(p)
}}

ENTRY e {{
  i = {index} parameter(0)
  x = f32[] parameter(1)
  ROOT c = f32[] conditional(i, x, x), {branches}
}}"""


@pytest.mark.parametrize("index, branches, refused", [
    ("pred[]", "true_computation=t, false_computation=f", None),
    ("s32[]", "branch_computations={t, f}", None),
    ("pred[]", "branch_computations={t, f}", 'unexpected attribute "branch_computations" for a PRED branch index'),
    ("s32[]", "true_computation=t, false_computation=f", 'unexpected attribute "true_computation" for an S32'),
    ("f32[]", "branch_computations={t, f}", "The first operand must be a scalar of PRED or S32"),
    ("s64[]", "branch_computations={t, f}", "The first operand must be a scalar of PRED or S32"),
])
def test_conditional_branches_follow_the_index_type(index: str, branches: str, refused: str | None) -> None:
    """XLA's parser reads a conditional's branches by its index's type (hlo_parser_test's
    conditional cases); each verdict is XLA's own, and a refusal is located at line:col."""
    from tests.support.xla_oracle import have_xla, our_verdict, xla_verdicts

    if not have_xla():
        pytest.skip("asks XLA's own parser (jaxlib) for its verdict")
    text = CONDITIONAL.format(index=index, branches=branches)
    (xla,) = xla_verdicts([text])
    ours = our_verdict(text)
    assert xla.startswith("reject") == (refused is not None) == ours.startswith("reject"), (xla, ours)
    if refused is not None:
        assert ours.startswith("reject: <string>:16:") and refused in ours, ours
