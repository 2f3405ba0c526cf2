"""`spmd audit` / `python -m spmdkit.audit`: the command line (docs/AUDIT.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import Optional, Sequence

import spmdkit
from spmdkit.audit.core import (EXIT_NOT_IMPORTABLE, EXIT_OK, EXIT_SPMDKIT_UNSOUND, EXIT_USAGE,
                                FrameworkMissing, audit)
from spmdkit.audit.report import byte_examples, counterexamples, error_summary, table
from spmdkit.audit.worker import IsolatedRules, worker

def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "--worker":
        return worker(argv[1])
    if argv and argv[0] == "paddle-tests":
        from spmdkit.audit.paddle_tests import main as paddle_tests
        return paddle_tests(argv[1:])
    p = argparse.ArgumentParser(prog="spmd audit", description="Audits another framework's SPMD rules with spmdkit's checker and planner.")
    p.add_argument("framework", choices=["paddle", "dtensor"])
    p.add_argument("--cases", type=int, default=50, help="cases per op (default 50)")
    p.add_argument("--op", action="append", default=[], help="audit only this op (repeatable)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="one JSON object: the reports per op")
    args = p.parse_args(argv)
    if args.cases < 0:
        print("spmd audit: InvalidArgument: --cases: must be >= 0", file=sys.stderr)
        return EXIT_USAGE
    unknown = [o for o in args.op if o not in spmdkit.ops()]
    if unknown:
        print(f"spmd audit: InvalidArgument: --op: unknown op {unknown[0]!r}", file=sys.stderr)
        return EXIT_USAGE
    try:
        rules = IsolatedRules(args.framework)
    except FrameworkMissing as e:
        # The CLI's typed-error form (rules/model/error.h): type, field, message.
        print(f"spmd audit: Unsupported: {args.framework}: {e}", file=sys.stderr)
        if args.json:
            print(json.dumps({"error": {"type": "Unsupported", "message": f"{args.framework}: {e}"}}))
        return EXIT_NOT_IMPORTABLE
    start = time.time()
    try:
        reports = audit(rules, args.op, args.cases, args.seed)
    finally:
        rules.close()
    seconds = time.time() - start
    if args.json:
        print(json.dumps({"framework": rules.framework, "version": rules.version, "seed": args.seed,
                          "cases_per_op": args.cases, "seconds": round(seconds, 1),
                          "ops": [asdict(r) for r in reports]}, sort_keys=True))
    else:
        print(f"audit of {rules.framework} {rules.version}: {args.cases} cases per op, seed {args.seed}, "
              f"{seconds:.1f} s\n")
        print(table(reports, rules.framework))
        errs = error_summary(reports)
        if errs:
            print("\n## Errors by kind\n")
            print(errs)
        moves = byte_examples(reports, rules.framework)
        if moves:
            print("\n## Who moves more bytes (one example per op and direction)\n")
            print(moves)
        ce = counterexamples(reports)
        if ce:
            print("\n## Counterexamples (one per op)\n")
            print(ce)
    # spmdkit's own answer judged UNSOUND is a spmdkit defect: fail (the CI gate).
    return EXIT_SPMDKIT_UNSOUND if any(r.spmdkit_unsound for r in reports) else EXIT_OK


