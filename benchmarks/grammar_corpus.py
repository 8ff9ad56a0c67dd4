"""Does the token-level grammar (hlo.lark's second half) read every module XLA accepts?

    python3 benchmarks/grammar_corpus.py            # every xla_parses=yes module of ../shared/corpus

tests/parser/test_parser_grammar.py proves the grammar on every form of statement in the corpus and on
the small modules whole; reading all 76 MB with Lark token by token takes a couple of minutes,
so that sweep lives here. Prints the modules accepted, the ones rejected (with the error), the
megabytes read and the rate.
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus"
sys.path.insert(0, str(ROOT))

from hloparse import HloParseError, grammar  # noqa: E402


def main() -> int:
    rows = [r for r in csv.DictReader(open(CORPUS / "index.csv")) if r["xla_parses"] == "yes"]
    accepted, rejected, size = 0, [], 0
    start = time.process_time()
    for k, row in enumerate(rows, 1):
        text = (CORPUS / row["file"]).read_text()
        size += len(text)
        try:
            grammar.parse_tree(text)
            accepted += 1
        except HloParseError as e:
            rejected.append((row["file"], e.one_line()))
        if k % 500 == 0:
            print(f"  {k}/{len(rows)} modules", file=sys.stderr)
    seconds = time.process_time() - start
    print(f"accepted {accepted} of {len(rows)} modules ({size / 1e6:.1f} MB, {seconds:.0f} CPU s, "
          f"{size / 1e6 / seconds:.2f} MB/s)")
    for file, error in rejected:
        print(f"rejected {file}: {error}")
    return 1 if rejected else 0


if __name__ == "__main__":
    sys.exit(main())
