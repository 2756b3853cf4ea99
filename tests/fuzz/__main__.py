"""`python -m tests.fuzz --mutants 10000`: a long fuzzing run over every input kind, with a summary of what the
mutants did, per kind."""

from __future__ import annotations

import argparse
import time
from collections import Counter

from tests.fuzz.harness import MAX_SECONDS, run_mutants
from tests.fuzz.inputs import KINDS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mutants", type=int, default=10_000)
    ap.add_argument("--workers", type=int)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds run from here (the test uses 0 on)")
    args = ap.parse_args()
    start = time.perf_counter()
    outcomes = run_mutants(args.mutants, args.workers, args.first_seed)
    wall = time.perf_counter() - start
    bad = [o for o in outcomes if o.problem]
    kinds = Counter("success" if o.code == 0 else "diagnostic" if not o.problem else o.problem.split(" ")[0]
                    for o in outcomes)
    slowest = max(outcomes, key=lambda o: o.seconds)
    print(f"{len(outcomes)} mutants in {wall:.0f} s: {dict(kinds)}")
    by_kind = Counter((o.file if o.file in KINDS else ".alg/.toml",
                       "success" if o.code == 0 else "diagnostic" if not o.problem else "problem") for o in outcomes)
    for kind in [".alg/.toml", *KINDS]:
        print(f"  {kind}: " + ", ".join(f"{n} {what}" for (k, what), n in sorted(by_kind.items()) if k == kind))
    print(f"slowest: {slowest.seconds:.2f} s (limit {MAX_SECONDS} s): {slowest}")
    slow = [o for o in outcomes if o.seconds > MAX_SECONDS]
    print(f"over 1 s: {sum(o.seconds > 1 for o in outcomes)}; over {MAX_SECONDS} s: {len(slow)}; problems: {len(bad)}")
    for o in bad[:50] + slow[:20]:
        print(" ", o)
    return 1 if bad or slow else 0


if __name__ == "__main__":
    raise SystemExit(main())
