"""XLA's own cost numbers, for comparison with ours. The only module in `analysis` that talks to
XLA; jax is imported inside the functions, never at import time."""

from __future__ import annotations

from typing import Any

MAIN_KEYS = ("flops", "transcendentals", "bytes accessed", "optimal_seconds")


def _cpu_client() -> Any:
    import jax

    return jax.devices("cpu")[0].client


def hlo_module_from_text(text: str) -> Any:
    """XLA's own parser, through jaxlib: an `HloModule` for the text, or whatever XLA raises.
    jaxlib keeps it in `jaxlib._hlo` from jax 0.10 on, in `xla_client._xla` before (0.4.13, 0.4.30,
    0.6.2, 0.8.3 and 0.9.2 checked, tests/compat on each)."""
    try:
        from jaxlib import _hlo

        return _hlo.hlo_module_from_text(text)
    except ImportError:
        from jax._src.lib import xla_client

        return xla_client._xla.hlo_module_from_text(text)


def hlo_module_cost_analysis(module: Any) -> dict[str, float]:
    """XLA's `HloCostAnalysis` of a module from `hlo_module_from_text`, on jaxlib's CPU client."""
    from jax._src.lib import xla_client

    return dict(xla_client._xla.hlo_module_cost_analysis(_cpu_client(), module))


def xla_cost_of_text(text: str) -> dict[str, float]:
    """XLA's `HloCostAnalysis` totals for HLO text, as jaxlib's CPU client computes them (the
    same numbers `compiled.cost_analysis()` gives for the module the text prints). Raises
    whatever XLA's parser raises if it rejects the text."""
    return hlo_module_cost_analysis(hlo_module_from_text(text))


def xla_cost_of_compiled(compiled: Any) -> dict[str, float]:
    """`compiled.cost_analysis()` as one dict (older jax returned a list of one dict)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return dict(cost or {})


def main_keys(cost: dict[str, float]) -> dict[str, float]:
    """The totals (flops, transcendentals, bytes accessed, optimal_seconds) without the
    per-operand diagnostic keys."""
    return {k: v for k, v in cost.items() if k in MAIN_KEYS}


# ---- many texts at once, in a child process ---------------------------------------------------
# XLA aborts the whole process (a CHECK failure) on some modules it parses, e.g. a select of
# tuples; asking in a child process turns such an abort into an answer ("XLA aborted").


def xla_costs_of_texts(texts: dict[str, str], cache_dir: str | None = None) -> dict[str, dict[str, float] | str]:
    """XLA's cost dict for each text (keyed as given), or a string saying why XLA gave none
    ("XLA rejected: ..." or "XLA aborted"). With `cache_dir`, answers are kept in one JSON file
    per text, named by the text's sha256; deleting the directory makes XLA be asked again."""
    import hashlib
    import json
    import os

    results: dict[str, dict[str, float] | str] = {}
    pending: dict[str, str] = {}
    digests = {key: hashlib.sha256(text.encode()).hexdigest() for key, text in texts.items()}
    for key, text in texts.items():
        path = os.path.join(cache_dir, digests[key] + ".json") if cache_dir else None
        if path and os.path.exists(path):
            with open(path) as f:
                results[key] = json.load(f)
        else:
            pending[key] = text
    for key, answer in _ask_in_child(pending).items():
        results[key] = answer
        if cache_dir:
            os.makedirs(cache_dir, exist_ok=True)
            with open(os.path.join(cache_dir, digests[key] + ".json"), "w") as f:
                json.dump(answer, f)
    return results


def _ask_in_child(texts: dict[str, str], workers: int | None = None) -> dict[str, dict[str, float] | str]:
    """Ask XLA about every text in child processes (two at a time by default), restarting a
    child after the text it aborted on."""
    import os
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    keys = list(texts)
    if not keys:
        return {}
    workers = workers or max(1, min(2, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory() as tmp:
        for i, key in enumerate(keys):
            with open(os.path.join(tmp, f"{i}.hlo"), "w") as f:
                f.write(texts[key])
        bounds = [len(keys) * w // workers for w in range(workers + 1)]
        with ThreadPoolExecutor(workers) as pool:
            parts = list(pool.map(lambda w: _run_range(tmp, bounds[w], bounds[w + 1], w), range(workers)))
    answers: dict[str, dict[str, float] | str] = {}
    for part in parts:
        for index, answer in part.items():
            answers[keys[index]] = answer
    return answers


def _run_range(tmp: str, start: int, stop: int, worker: int) -> dict[int, dict[str, float] | str]:
    import json
    import os
    import subprocess
    import sys

    answers: dict[int, dict[str, float] | str] = {}
    out_path = os.path.join(tmp, f"answers{worker}.jsonl")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    while start < stop:
        cmd = [sys.executable, "-c", _WORKER, tmp, str(start), str(stop), out_path]
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        last = start - 1
        if os.path.exists(out_path):
            with open(out_path) as f:
                for line in f:
                    if not line.endswith("\n"):
                        break  # cut short by the abort
                    index, answer = json.loads(line)
                    answers[index] = answer
                    last = index
            os.remove(out_path)
        if last + 1 < stop and last + 1 not in answers:
            answers[last + 1] = "XLA aborted"  # the text the child died on
        start = last + 2
    return answers


_WORKER = r"""
import json, os, sys
tmp, start, stop, out_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
from hloflops.xla.compare import hlo_module_cost_analysis, hlo_module_from_text
with open(out_path, "w") as out:
    for i in range(start, stop):
        with open(os.path.join(tmp, f"{i}.hlo")) as f:
            text = f.read()
        try:
            module = hlo_module_from_text(text)
        except Exception as err:
            answer = "XLA rejected: " + str(err).splitlines()[0][:300]
        else:
            try:
                answer = hlo_module_cost_analysis(module)
            except Exception as err:
                answer = "XLA failed: " + str(err).splitlines()[0][:300]
        out.write(json.dumps([i, answer]) + "\n")
        out.flush()
"""
