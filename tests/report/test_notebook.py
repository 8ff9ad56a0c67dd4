"""The notebook path: `Report._repr_html_` shows what the CLI summary shows (loops with trip
counts and what XLA misses, remat, phases) and the chart; `hloflops.count(fn)(*args)` jits,
compiles and analyses in one line."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hloflops import analyze

ROOT = Path(__file__).resolve().parents[2]
REMAT_SCAN = ROOT / "examples" / "seed000_remat_scan.after_optimizations.hlo"


def test_repr_html_shows_loops_remat_and_the_chart() -> None:
    report = analyze(REMAT_SCAN)
    page = report._repr_html_()
    for loop in report.loops:
        assert loop.name in page and f"{loop.extra_over_xla.flops:,}" in page  # XLA misses, as the CLI
    assert "XLA misses" in page and "backend_config" in page
    assert f"remat flops <b>{report.remat_flops:,}</b>" in page and "phases: forward" in page
    assert f"{report.flops:,}" in page and "jit(train_step)/transpose(jvp(StackedMLPsRematted))/while" in page
    # the chart is a page of its own in an iframe (its script and ids apart from the notebook's)
    srcdoc = html.unescape(re.search(r'<iframe srcdoc="([^"]*)"', page).group(1))
    data = json.loads(re.search(r'id="hloflops-data">(.*?)</script>', srcdoc).group(1))
    assert data["tree"]["v"][0] == report.flops and data["tree"]["v"][3] == report.remat_flops
    assert 'id="chart"' in srcdoc and "<h1>" not in srcdoc


def test_count_is_a_one_liner() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    import hloflops

    def f(x, w):
        return jax.lax.fori_loop(0, 10, lambda i, x: jnp.sin(x @ w), x)

    x, w = jnp.ones((4, 8)), jnp.ones((8, 8))
    report = hloflops.count(f)(x, w)
    compiled = jax.jit(f).lower(x, w).compile()
    assert report.flops == analyze(compiled).flops
    assert [lp.trip_count for lp in report.loops] == [10]
    assert report.flops == 10 * report.xla_estimate["flops"] + 1  # XLA counts the body once (+1: the cond)
    assert hloflops.count(jax.jit(f))(x, w).flops == report.flops
    with pytest.raises(ValueError, match="already jitted"):
        hloflops.count(jax.jit(f), static_argnums=0)


def test_import_analysis_does_not_import_jax() -> None:
    code = "import hloflops, sys; hloflops.count; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
