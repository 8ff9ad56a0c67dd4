"""The wire reader of HloModuleProto (`hloparse.proto_text`, used without jax) on every corpus
module XLA parses: XLA turns the text into a proto, the reader prints it, and the analysis of
that must give the numbers of the text (flops, transcendentals, bytes, model and remat flops,
the trip counts as a multiset: XLA's parse of a text makes names unique, `while` twice becomes
`while` and `while.1`, and the proto's computations may come in another order than the text's).
Counts how many read the same, how many stop at a field the reader names, and any that differ
(there must be none).

    python3 benchmarks/proto_text_corpus.py                  # modules under 1 MB (4 analyses each in memory)
    python3 benchmarks/proto_text_corpus.py --max-bytes 0    # all of them (needs several GB for the largest)

Result: benchmarks/results/proto_text_corpus.txt.
"""

from __future__ import annotations

import argparse
import csv
import gc
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-bytes", type=int, default=1_000_000, help="skip larger modules (0: none skipped)")
    args = ap.parse_args()
    sys.setrecursionlimit(10_000)
    import resource

    # The machine is shared: a module that needs more than this is skipped, not allowed to take it all.
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    import hloflops
    from hloflops.xla.compare import hlo_module_from_text
    from hloparse.proto_text import UnsupportedProto, module_text

    rows = [r for r in csv.DictReader(open(CORPUS / "index.csv")) if r["xla_parses"] == "yes"
            and (not args.max_bytes or int(r["bytes"]) <= args.max_bytes)]
    same, differ, skipped = 0, [], 0
    unsupported: Counter[str] = Counter()
    printing = 0.0
    for n, row in enumerate(rows):
        if n % 200 == 0:
            gc.collect()
            print(f"{n}/{len(rows)}", file=sys.stderr, flush=True)
        text = (CORPUS / row["file"]).read_text()
        try:
            proto = hlo_module_from_text(text).as_serialized_hlo_module_proto()
            expected = hloflops.analyze(text)
        except (Exception, MemoryError):  # XLA or our reading of the text fails: not this reader's question
            skipped += 1
            continue
        start = time.process_time()
        try:
            printed = module_text(proto)
        except UnsupportedProto as e:
            unsupported[str(e).split(": ", 1)[-1] if "field" in str(e) else str(e)[-70:]] += 1
            continue
        except (Exception, MemoryError) as e:  # noqa: BLE001 - the reader failing otherwise is its bug: listed
            differ.append(f"{row['file']}: reader {type(e).__name__}: {str(e)[:100]}")
            continue
        finally:
            printing += time.process_time() - start
        try:
            got = hloflops.analyze(printed)
        except Exception as e:  # noqa: BLE001 - printed text that does not parse is a reader bug: listed
            differ.append(f"{row['file']}: {str(e)[:120]}")
            continue
        numbers = [(r.flops, r.transcendentals, r.bytes_accessed, r.model_flops, r.remat_flops,
                    sorted(-1 if lp.trip_count is None else lp.trip_count for lp in r.loops)) for r in (got, expected)]
        if numbers[0] == numbers[1]:
            same += 1
        else:
            differ.append(row["file"])
    total = len(rows) - skipped
    limit = f" of at most {args.max_bytes:,} bytes" if args.max_bytes else ""
    print(f"{total} corpus modules{limit} XLA turns into protos "
          f"({skipped} more skipped: XLA or the text analysis failed)")
    print(f"  read without jax with the text's numbers: {same} ({same / total:.1%})")
    print(f"  stopped at a field the reader names:      {sum(unsupported.values())}")
    print(f"  different numbers, or printed text that does not parse: {len(differ)}")
    for entry in differ[:20]:
        print(f"    {entry}")
    print(f"  printing CPU seconds, all modules:         {printing:.1f}")
    print("  fields not read (count, message):")
    for message, n in unsupported.most_common(25):
        print(f"    {n:4d}  {message}")


if __name__ == "__main__":
    main()
