"""One rule for op_names XLA joined from several ops with ';': the instruction belongs to the
first part (the op that was kept). Scope grouping, module grouping, folded stacks and the HTML
chart all see that one real name stack, never a synthetic `mul;jit(f)` key."""

from __future__ import annotations

import html
import json
import re

from hloflops import analyze
from hloflops.report.html import scope_tree
from hloflops.scopes import first_op_name, scope

JOINED = """HloModule joined, entry_computation_layout={(f32[8]{0}, f32[8]{0})->f32[8]{0}}

ENTRY main {
  a = f32[8]{0} parameter(0)
  b = f32[8]{0} parameter(1)
  m = f32[8]{0} multiply(a, b), metadata={op_name="jit(f)/jvp(Net)/Dense_0/mul;jit(f)"}
  ROOT s = f32[8]{0} add(m, b), metadata={op_name="jit(f)/transpose(jvp(Net))/Dense_1/add;jit(f)/jvp(Net)/Dense_0/add"}
}
"""


def test_the_rule() -> None:
    assert first_op_name("jit(f)/jvp(D)/mul;jit(f)") == "jit(f)/jvp(D)/mul"
    assert first_op_name(";jit(f)/x") == "jit(f)/x"  # an empty first part is no name
    assert first_op_name("jit(f)/pjit[name=a;b]/mul") == "jit(f)/pjit[name=a;b]/mul"  # inside brackets
    assert scope("jit(f)/jvp(D)/mul;jit(f)") == "jit(f)/jvp(D)"
    assert scope("jit(f)/jvp(D)/mul") == "jit(f)/jvp(D)"


def test_every_view_uses_the_first_part() -> None:
    report = analyze(JOINED)
    assert {g.key: g.total.flops for g in report.by_scope()} == {  # the parameters have no op_name
        "jit(f)/jvp(Net)/Dense_0": 8, "jit(f)/transpose(jvp(Net))/Dense_1": 8, "(no scope)": 0}
    assert {g.key: g.total.flops for g in report.by_module()} == {"Dense_0": 8, "Dense_1": 8,
                                                                  "(no module)": 0}
    assert report.to_folded().splitlines() == [
        "joined;jit(f);jvp(Net);Dense_0;multiply 8",
        "joined;jit(f);transpose(jvp(Net));Dense_1;add 8",
    ]

    def names(node):
        yield node["n"]
        for child in node.get("c", ()):
            yield from names(child)

    tree_names = set(names(scope_tree(report)))
    assert {"Dense_0", "Dense_1", "jvp(Net)", "transpose(jvp(Net))"} <= tree_names
    assert not any(";" in n for n in tree_names)
    page = report.to_html()
    data = json.loads(re.search(r'id="hloflops-data">(.*?)</script>', page).group(1))
    assert data["tree"]["v"][0] == report.flops == 16
    assert ";" not in html.unescape(json.dumps(data))
