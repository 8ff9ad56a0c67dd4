"""Parse speed and memory: hloparse against XLA's own C++ parser, in the same run.

    python3 benchmarks/parse_speed.py                 # the 5 largest corpus modules + a generated one
    python3 benchmarks/parse_speed.py --layers 128    # size of the generated transformer train step

For each module it reports MB/s and instructions/s (from CPU time: both parsers are
single-threaded, and on a shared machine wall time mostly measures the neighbours) and peak
memory for hloparse.parse and for jaxlib's hlo_module_from_text, each in a fresh subprocess (so
peak RSS is that process's alone: the interpreter plus the text plus the parsed module), the
median of --repeat runs (hloparse and XLA alternating), and the ratios. The generated module (a deep transformer train
step, compiled by XLA:CPU, >= 25 MB) is cached under ~/.cache/hloflops-bench.

Note what is compared: XLA builds its full in-memory module (every attribute decoded); hloparse
decodes what the cost analysis needs eagerly and keeps metadata, backend_config and the other
attribute values as raw text, decoded on first use.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus"
CACHE = Path(os.environ.get("HLOFLOPS_BENCH_CACHE", Path.home() / ".cache" / "hloflops-bench"))

_CHILD = r"""
import gc, json, resource, sys, time
which, path = sys.argv[1], sys.argv[2]
text = open(path).read()
if which == "hloparse":
    sys.path.insert(0, sys.argv[3])
    import hloparse
    parse = lambda t: hloparse.parse(t)
    count = lambda m: sum(len(c.instructions) for c in m.computations)
else:
    from jaxlib import _hlo
    parse = _hlo.hlo_module_from_text
    count = lambda m: sum(len(c.instructions()) for c in m.computations())
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0, c0 = time.perf_counter(), time.process_time()
module = parse(text)
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "cpu": cpu, "instructions": count(module), "peak_kb": peak, "base_kb": base}))
"""


def run_once(which: str, path: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, which, str(path), str(ROOT)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def measure_both(path: Path, repeat: int) -> tuple[dict[str, float], dict[str, float]]:
    """hloparse and XLA, alternating run by run: a neighbour's burst of load then falls on both."""
    runs: dict[str, list[dict[str, float]]] = {"hloparse": [], "xla": []}
    for _ in range(repeat):
        for which in runs:
            runs[which].append(run_once(which, path))
    return summarise(runs["hloparse"], path), summarise(runs["xla"], path)


def summarise(runs: list[dict[str, float]], path: Path) -> dict[str, float]:
    # CPU seconds, not wall: on a shared 2-core machine the wall clock mostly measures the
    # neighbours. Both parsers are single-threaded, so CPU time is their cost.
    seconds = statistics.median(r["cpu"] for r in runs)
    size_mb = path.stat().st_size / 1e6
    return {
        "mb_per_s": size_mb / seconds,
        "instr_per_s": runs[0]["instructions"] / seconds,
        "instructions": runs[0]["instructions"],
        "peak_mb": max(r["peak_kb"] for r in runs) / 1024,
        "parse_mem_mb": max(r["peak_kb"] - r["base_kb"] for r in runs) / 1024,
        "seconds": seconds,
        "wall_seconds": statistics.median(r["seconds"] for r in runs),
    }


def generated_module(layers: int) -> Path:
    """A `layers`-deep transformer train step compiled by XLA:CPU (Python loop, so unrolled)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"transformer_train_step_{layers}.hlo"
    if path.exists():
        return path
    code = f"""
import jax, jax.numpy as jnp
L, B, T, D, H = {layers}, 4, 32, 64, 4
def layer(p, x):
    heads = lambda w: (x @ w).reshape(B, T, H, D // H)
    q, k, v = heads(p["wq"]), heads(p["wk"]), heads(p["wv"])
    a = jax.nn.softmax(jnp.einsum("bthd,bshd->bhts", q, k) / 8.0, axis=-1)
    o = jnp.einsum("bhts,bshd->bthd", a, v).reshape(B, T, D) @ p["wo"]
    x = x + o
    h = jax.nn.gelu(x @ p["w1"])
    return jax.nn.standardize(x + h @ p["w2"], axis=-1)
def loss(ps, x):
    for p in ps:
        x = layer(p, x)
    return jnp.mean(x ** 2)
def step(ps, x):
    g = jax.grad(loss)(ps, x)
    return jax.tree.map(lambda a, b: a - 0.01 * b, ps, g)
shapes = dict(wq=(D, D), wk=(D, D), wv=(D, D), wo=(D, D), w1=(D, 4 * D), w2=(4 * D, D))
ps = [{{k: jax.ShapeDtypeStruct(s, jnp.float32) for k, s in shapes.items()}} for _ in range(L)]
text = jax.jit(step).lower(ps, jax.ShapeDtypeStruct((B, T, D), jnp.float32)).compile().as_text()
open({str(path)!r} + ".tmp", "w").write(text)
"""
    print(f"generating a {layers}-layer transformer train step (once; cached in {CACHE}) ...", file=sys.stderr)
    subprocess.run([sys.executable, "-c", code], check=True)
    os.replace(str(path) + ".tmp", path)
    return path


def largest_corpus_modules(n: int) -> list[Path]:
    rows = [r for r in csv.DictReader(open(CORPUS / "index.csv")) if r["xla_parses"] == "yes"]
    rows.sort(key=lambda r: -int(r["bytes"]))
    return [CORPUS / r["file"] for r in rows[:n]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=320)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--corpus-modules", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    paths = largest_corpus_modules(args.corpus_modules) + [generated_module(args.layers)]
    results = []
    header = f"{'module':48} {'MB':>6} {'instrs':>8} | {'hloparse MB/s':>13} {'XLA MB/s':>9} {'ratio':>6} | "
    header += f"{'hloparse MB':>11} {'XLA MB':>7}"
    print(header)
    print("-" * len(header))
    for path in paths:
        ours, xla = measure_both(path, args.repeat)
        ratio = ours["mb_per_s"] / xla["mb_per_s"]
        size = path.stat().st_size / 1e6
        print(f"{path.name[-48:]:48} {size:6.1f} {ours['instructions']:8d} | {ours['mb_per_s']:13.2f} "
              f"{xla['mb_per_s']:9.2f} {ratio:6.2f} | {ours['peak_mb']:11.0f} {xla['peak_mb']:7.0f}")
        results.append({"module": path.name, "mb": size, "hloparse": ours, "xla": xla, "ratio": ratio})
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
