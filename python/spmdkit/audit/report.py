"""The audit's output: the table per op, the errors by kind, one counterexample per op."""

from __future__ import annotations

import json
from typing import Sequence

from spmdkit.audit.core import OpReport


COLUMNS = [("op", "op"), ("rule", "rule"), ("cases", "cases"), ("sound", "sound"),
           ("unsound", "UNSOUND"), ("errors", "errors"), ("framework_more_bytes", "fw more bytes"),
           ("spmdkit_more_bytes", "spmdkit more bytes")]


def table(reports: Sequence[OpReport], framework: str = "paddle") -> str:
    head = ["op", f"{framework} rule", "cases", f"{framework} sound", "UNSOUND", "errors",
            f"{framework} moves more", "spmdkit moves more"]
    rows = []
    total = OpReport("total")
    for r in reports:
        if r.skipped:
            continue
        rows.append([r.op, r.rule, r.cases, r.sound, r.unsound, r.errors, r.framework_more_bytes,
                     r.spmdkit_more_bytes])
        for f in ("cases", "sound", "unsound", "errors", "framework_more_bytes", "spmdkit_more_bytes",
                  "not_applicable", "unpriced", "spmdkit_unsound"):
            setattr(total, f, getattr(total, f) + getattr(r, f))
    rows.append(["total", "", total.cases, total.sound, total.unsound, total.errors,
                 total.framework_more_bytes, total.spmdkit_more_bytes])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    extra = []
    if total.not_applicable:
        extra.append(f"{total.not_applicable} answers the checker could not judge (NOT_APPLICABLE)")
    if total.unpriced:
        extra.append(f"{total.unpriced} sound pairs the planner could not price")
    extra.append(f"spmdkit UNSOUND: {total.spmdkit_unsound}")
    skipped = [f"{r.op} ({r.skipped})" for r in reports if r.skipped]
    if skipped:
        extra.append("not audited: " + "; ".join(skipped))
    return "\n".join(lines + [""] + extra)


def counterexamples(reports: Sequence[OpReport]) -> str:
    out = []
    for r in reports:
        for label, ce in (("", r.counterexample), (" (spmdkit's own answer)", r.spmdkit_counterexample)):
            if not ce:
                continue
            v = ce["verdict"]
            out.append(f"### {r.op}{label}\n")
            out.append(f"request (`spmd infer`): `{ce['request']}`  ")
            out.append(f"answer: `{json.dumps(ce['answer'], sort_keys=True)}`  ")
            if "claim" in ce:
                out.append(f"claim (`spmd check --claim`): `{ce['claim']}`  ")
            msg = (v.get("counterexample") or {}).get("message") or v.get("reason") or ""
            out.append(f"verdict: {v['verdict']}: {msg}\n")
    return "\n".join(out)


def byte_examples(reports: Sequence[OpReport], framework: str = "paddle") -> str:
    """Per op, the first case where the framework moves more bytes and the first where
    spmdkit does: the request and both sound answers with their bytes per rank."""
    out = []
    for r in reports:
        for who, ex in ((framework, r.more_bytes_example), ("spmdkit", r.spmdkit_more_bytes_example)):
            if not ex:
                continue
            out.append(f"### {r.op}: {who} moves more ({ex['framework_bytes']} bytes per rank for "
                       f"{framework}, {ex['spmdkit_bytes']} for spmdkit)\n")
            out.append(f"request (`spmd infer`): `{ex['request']}`  ")
            out.append(f"{framework}: `{json.dumps(ex['framework'], sort_keys=True)}`  ")
            out.append(f"spmdkit: `{json.dumps(ex['spmdkit'], sort_keys=True)}`\n")
    return "\n".join(out)


def error_summary(reports: Sequence[OpReport]) -> str:
    """Each op's errors by kind (the framework's message, numbers masked), with the first
    failing request."""
    out = []
    for r in reports:
        if not r.errors:
            continue
        kinds = "; ".join(f"{n} x `{k}`" for k, n in sorted(r.error_kinds.items(), key=lambda kv: -kv[1]))
        out.append(f"- {r.op}: {kinds}" + (f" ({r.crashes} killed the process)" if r.crashes else ""))
        out.append(f"  first: `{r.error_example}`")
    return "\n".join(out)


