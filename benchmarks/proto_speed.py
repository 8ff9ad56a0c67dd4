"""Read speed of an HLO proto against the HLO text of the same module.

    python3 benchmarks/proto_speed.py            # the largest corpus module + the generated ~29 MB one
    python3 benchmarks/proto_speed.py --repeat 5

The proto is made from the text by XLA itself (jaxlib's `hlo_module_from_text(text)
.as_serialized_hlo_module_proto()`, what `--xla_dump_hlo_as_proto` writes inside its HloProto)
and cached beside the generated module (~/.cache/hloflops-bench). Each read runs in a fresh
subprocess and is timed in CPU seconds (the machine is shared): `hloparse.load(text)` against
`hloparse.load(proto)`, which today goes through jaxlib (XLA deserializes the proto and prints
it, `hloparse.inputs`) and then parses that text; the XLA part is also timed alone. The median of
--repeat runs is reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parse_speed import CACHE, generated_module, largest_corpus_modules  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, sys, time
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/analysis"]
which, path = sys.argv[1], sys.argv[2]
import hloparse
from hloparse import inputs
c0 = time.process_time()
if which == "xla-only":
    data = open(path, "rb").read()
    text = inputs.module_proto_to_hlo_text(data, path)
    n = len(text)
else:
    module = hloparse.load(path)
    n = sum(len(c.instructions) for c in module.computations)
print(json.dumps({"cpu": time.process_time() - c0, "n": n}))
"""


def proto_of(text_path: Path) -> Path:
    out = CACHE / (text_path.stem + ".hlo.pb")
    if not out.exists() or out.stat().st_mtime < text_path.stat().st_mtime:
        from hloflops.xla.compare import hlo_module_from_text

        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(hlo_module_from_text(text_path.read_text()).as_serialized_hlo_module_proto())
    return out


def run(which: str, path: Path) -> float:
    proc = subprocess.run([sys.executable, "-c", _CHILD, which, str(path), str(ROOT)], capture_output=True,
                          text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])["cpu"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--layers", type=int, default=320)
    args = ap.parse_args()
    paths = largest_corpus_modules(1) + [generated_module(args.layers)]
    print(f"{'module':<52} {'text MB':>8} {'proto MB':>8} {'text s':>7} {'proto s':>8} {'(XLA)':>7} {'proto/text':>10}")
    for path in paths:
        proto = proto_of(path)
        text_s, proto_s, xla_s = [], [], []
        for _ in range(args.repeat):
            text_s.append(run("load", path))
            proto_s.append(run("load", proto))
            xla_s.append(run("xla-only", proto))
        t, p, x = (statistics.median(v) for v in (text_s, proto_s, xla_s))
        print(f"{path.name[:52]:<52} {path.stat().st_size / 1e6:8.1f} {proto.stat().st_size / 1e6:8.1f} "
              f"{t:7.2f} {p:8.2f} {x:7.2f} {p / t:9.2f}x")


if __name__ == "__main__":
    main()
