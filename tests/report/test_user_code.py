"""Attribution by the user's code (issue 33): the innermost frame of each op's call stack that
is the user's (hloflops.user_code), for nnx, Equinox and plain-jax train steps whose modules
carry flax's and optax's frames as a virtual environment's do; and `analyze` / `count` on the
objects jax.jit, nnx.jit and eqx.filter_jit return."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hloflops import analyze, count
from hloflops.user_code import DEFAULT, UserCode
from hloparse.ir import SourceLocation

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = str(ROOT / "tests" / "programs" / "user_code_programs.py")
SITE = "/home/u/venv/lib/python3.11/site-packages"


# ---- the rule ---------------------------------------------------------------------------------
@pytest.mark.parametrize("path, user", [
    ("/home/u/proj/train.py", True),
    (f"{SITE}/flax/nnx/nn/linear.py", False),
    ("/usr/lib/python3/dist-packages/optax/_src/base.py", False),
    ("/usr/lib/python3.11/contextlib.py", False),
    ("<frozen runpy>", False),
    ("/home/u/src/flax/flax/nnx/module.py", False),  # a source checkout of a library
    ("/home/u/src/equinox/equinox/_jit.py", False),
    ("C:\\Users\\u\\venv\\Lib\\site-packages\\jax\\_src\\core.py", False),
    ("/tmp/ipykernel_1/123.py", True),
    ("<stdin>", True),
])
def test_the_rule_by_path(path, user):
    assert DEFAULT.is_user(path) is user


def test_the_rule_is_overridable():
    mine = f"{SITE}/mymodels/blocks.py"
    assert not DEFAULT.is_user(mine)
    assert UserCode(user=("mymodels",)).is_user(mine)
    assert DEFAULT.with_options(user=[f"{SITE}/mymodels"]).is_user(mine)
    assert not DEFAULT.with_options(library=["proj"]).is_user("/home/u/proj/lib/util.py")
    stack = (SourceLocation(f"{SITE}/flax/nnx/nn/linear.py", 422, "Linear.__call__"),
             SourceLocation("/home/u/proj/train.py", 12, "Block.__call__"),
             SourceLocation("/home/u/proj/train.py", 40, "train_step"))
    assert DEFAULT.pick(stack) is stack[1]
    assert DEFAULT.pick(stack[:1]) is stack[0]  # no user frame: the innermost one
    assert DEFAULT.pick(()) is None


# ---- the stack-frame tables -------------------------------------------------------------------
def test_parent_frames_follow_python_call_order():
    """XLA prints parent_frame_id one above the caller's row (hloparse.ir.StackFrames): the
    stack of the innermost op of h() called by g() by f() is h, g, f, in that order."""
    import jax
    import jax.numpy as jnp

    def h(x):
        return jnp.sin(x)

    def g(x):
        return h(x) * 2

    def f(x):
        return g(x) + 1

    report = analyze(jax.jit(f).lower(jnp.ones(3)).compile())
    sine = next(r for r in report.rows if r.opcode == "sine")
    stack = report.module.stack_frames.stack(sine.source.frame)
    assert [loc.function.rpartition(".")[2] for loc in stack[:3]] == ["h", "g", "f"]
    assert [loc.file for loc in stack[:3]] == [__file__] * 3


def test_a_table_that_says_0_for_a_root_is_read_as_it_is():
    from hloparse.ir import StackFrames

    locations = ((1, 1, 10, 10, 0, 0), (1, 2, 20, 20, 0, 0), (1, 3, 30, 30, 0, 0))
    printed = StackFrames(("a.py",), ("f", "g", "h"), locations, ((1, 1), (2, 2), (3, 3)))  # as XLA prints
    literal = StackFrames(("a.py",), ("f", "g", "h"), locations, ((1, 0), (2, 1), (3, 2)))  # 0: no parent
    for frames in (printed, literal):
        assert [loc.function for loc in frames.stack(3)] == ["h", "g", "f"]


def test_a_hostile_chain_of_frames_is_cut_not_recursed():
    from hloparse.ir import MAX_STACK_DEPTH, StackFrames

    n = 50_000
    frames = StackFrames(("a.py",), ("f",), ((1, 1, 1, 1, 0, 0),), tuple((1, k) for k in range(1, n + 1)))
    assert len(frames.stack(n)) == MAX_STACK_DEPTH
    cyclic = StackFrames(("a.py",), ("f",), ((1, 1, 1, 1, 0, 0),), ((1, 3), (1, 1)))  # row 1 says row 2 called it
    assert len(cyclic.stack(1)) == 1 and len(cyclic.stack(2)) == 1


def test_a_module_without_stack_frames_says_so_once():
    text = (ROOT / "examples" / "lax_scan.after_optimizations.hlo").read_text()
    report = analyze(text)
    assert report.has_stack_frames
    assert "no stack-frame tables" not in report.summary(by="source")
    no_tables = analyze(_without_tables(text))
    assert not no_tables.has_stack_frames
    assert no_tables.summary(by="function").count("no stack-frame tables") == 1
    assert no_tables.summary(by="scope").count("no stack-frame tables") == 0


def _without_tables(text: str) -> str:
    lines, skipping = [], False
    for line in text.splitlines():
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            skipping = True
            continue
        if skipping and not line.strip():
            skipping = False
            continue
        if not skipping:
            lines.append(line)
    return "\n".join(lines).replace(" stack_frame_id=", " source_line=")


# ---- nnx, Equinox and plain jax, with library frames in the module ------------------------
def _compiled(name: str):
    import equinox
    import flax
    import optax

    from tests.programs import user_code_programs as programs

    fn, args = getattr(programs, name)()
    with programs.library_frames(flax, optax, equinox):
        return fn.lower(*args).compile()


@pytest.fixture(scope="module", params=["nnx_train_step", "equinox_train_step", "plain_jax_train_step"])
def step(request):
    return request.param, analyze(_compiled(request.param))


def test_the_users_file_and_function_hold_90_percent_of_the_flops(step):
    name, report = step
    in_user_file = sum(g.total.flops for g in report.by_source() if g.key.startswith(PROGRAMS + ":"))
    assert in_user_file >= 0.9 * report.flops, report.summary(by="source")
    functions = {g.key.rpartition(":")[2].rpartition("<locals>.")[2]: g.total.flops for g in report.by_function()
                 if g.key.startswith(PROGRAMS + ":")}
    assert sum(functions.values()) >= 0.9 * report.flops
    if name != "plain_jax_train_step":  # an nnx / Equinox module is its Class.__call__
        assert functions["Block.__call__"] == max(functions.values())
    else:
        assert functions["layer"] == max(functions.values())
    # the library frame stays available: without the rule, flax/equinox/optax files lead
    library = report.by_source(frames="library")
    if name != "plain_jax_train_step":
        assert "site-packages" in library[0].key and not library[0].key.startswith(PROGRAMS)
    both = report.by_source(frames="all")
    assert any(g.key.startswith(PROGRAMS + ":") and " > " in g.key and "site-packages" in g.key for g in both)


def test_every_loop_is_located_in_the_users_code(step):
    name, report = step
    assert report.loops
    for loop in report.loops:
        assert report.loop_location(loop).startswith(PROGRAMS + ":"), (loop.name, report.loop_location(loop))
        assert report.loop_function(loop)
        assert report.loop_dict(loop)["source_line"] == report.loop_location(loop)
    text = report.summary()
    assert "site-packages" not in text.split("top ")[0]  # loops and notes name the user's lines


# ---- any jit-wrapped object ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["nnx_train_step", "equinox_train_step", "plain_jax_train_step"])
def test_analyze_and_count_take_each_wrapper(name):
    from tests.programs import user_code_programs as programs

    fn, args = getattr(programs, name)()
    lowered = fn.lower(*args)
    compiled = lowered.compile()
    from_compiled = analyze(compiled)
    assert from_compiled.flops > 0 and from_compiled.loops
    assert analyze(lowered).module_name == from_compiled.module_name  # the module before optimizations
    assert count(fn)(*args).flops == from_compiled.flops


def test_pjit_and_aot_objects():
    import jax
    import jax.numpy as jnp
    from jax.experimental.pjit import pjit

    def f(x):
        return jnp.tanh(x @ x)

    x = jnp.ones((8, 8))
    expected = analyze(jax.jit(f).lower(x).compile()).flops
    assert analyze(pjit(f).lower(x).compile()).flops == expected
    assert count(pjit(f))(x).flops == expected
    traced = jax.jit(f).trace(x)
    assert analyze(traced.lower().compile()).flops == expected


def test_a_wrong_object_is_named_with_what_works():
    import jax

    with pytest.raises(TypeError, match=r"got int; it takes HLO text.*nnx.jit.*eqx.filter_jit"):
        analyze(42)
    with pytest.raises(TypeError, match=r"jitted function .*itself.*fn.lower\(\*args\).compile\(\)"):
        analyze(jax.jit(lambda x: x))


def test_cli_by_function_and_frames(tmp_path):
    path = tmp_path / "step.hlo"
    path.write_text(_compiled("nnx_train_step").as_text())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "analysis"), str(ROOT)])}

    def run(*options):
        done = subprocess.run([sys.executable, "-m", "hloflops", str(path), *options], capture_output=True,
                              text=True, env=env, check=True)
        return done.stdout

    out = run("--by", "function", "--top", "3")
    assert "Block.__call__" in out and "linear.py" not in out
    assert "flax/nnx/nn/linear.py:422" in run("--by", "source", "--frames", "library", "--top", "3")
    assert " > " in run("--by", "source", "--frames", "all", "--top", "3")
    mine = run("--by", "source", "--top", "3", "--user-code", "flax", "--user-code", "optax")
    assert "flax/nnx/nn/linear.py:422" in mine  # flax's frames made the user's: the innermost again


def test_html_and_batch_record_name_the_users_code(step):
    from hloflops.batch.worker import record_from_report_dict

    name, report = step
    page = report.to_html()
    assert "FLOPs by function (your code)" in page and "Block.__call__" in page or name == "plain_jax_train_step"
    for loop in report.loops:
        assert report.loop_location(loop) in page
    record = record_from_report_dict(report.to_dict())
    assert record["loops"] and all(lp["location"].startswith(PROGRAMS + ":") and lp["function"]
                                   for lp in record["loops"])


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_train_steps_fit_the_terminal(step, width):
    _name, report = step
    for by in ("scope", "source", "function", "module"):
        for frames in ("user", "all"):
            text = report.summary(by=by, width=width, frames=frames)
            assert all(len(line) <= width for line in text.splitlines()), (by, frames, width)


def test_icicle_labels_give_one_count_or_none():
    """issue 33: a node whose ops run different numbers of times (a loop and the code around it)
    is not labelled `x2-28`; its tooltip gives the range. Runs the page's own functions in node,
    where node is installed (the chromium test in test_html.py renders the whole page)."""
    import re
    import shutil

    page = analyze(ROOT / "examples" / "seed000_remat_scan.after_optimizations.hlo").to_html()
    mult = re.search(r"function mult\(n\) \{.*?\n  \}", page, re.S).group(0)
    runs = re.search(r"function runs\(n\) \{.*?\n  \}", page, re.S).group(0)
    node = shutil.which("node")
    if node is None:
        assert "\\u2013" not in mult and "to ' + fmt(hi)" in runs
        return
    script = ("function fmt(v) { return v.toLocaleString('en-US'); }\n" + mult + "\n" + runs + "\n"
              "const p = {}; console.log(JSON.stringify([mult({x: [2, 28]}), mult({x: [24, 24]}), mult({x: [1, 1]}),"
              " runs({p, x: [2, 28]}), runs({p, x: [24, 24]})]));")
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, check=True).stdout
    import json

    assert json.loads(out) == ["", " \u00d724", "", ", its ops run 2 to 28 times per step", ", runs \u00d724 per step"]
