"""The audit's core: what a case and an answer are, how an answer is judged and priced,
and the loop over an op's cases. Nothing here knows a framework: an adapter (`paddle`,
`dtensor`, or a test's stand-in) answers requests through this interface:

    framework: str, version: str
    candidates(op) -> [(rule name, argument list index)]   the calls to probe, in order
    describe(op, name, index) -> str                        a candidate, for a skip reason
    answer(op, name, index, request) -> Answer              raises NotExpressible,
                                                            Unrepresentable, or anything
                                                            (counted as the rule's error)

The cases come from the op declarations' examples (`cases.py`).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence

import spmdkit
from spmdkit.audit.cases import NoExample, Request, _json_tensor, generate, probe

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_NOT_IMPORTABLE = 3
EXIT_SPMDKIT_UNSOUND = 1


class FrameworkMissing(Exception):
    """The framework to audit is not importable (exit status 3)."""


class FrameworkError(Exception):
    """The framework's rule raised; the message is its exception's type and text."""


class FrameworkCrash(Exception):
    """The framework's rule killed its process (a segmentation fault, an abort)."""


class Unrepresentable(Exception):
    """The framework answered with a layout spmdkit's layouts cannot state (DTensor's
    _StridedShard): counted as not judged (not_applicable), not as UNSOUND."""


class NotExpressible(Exception):
    """The framework has no call for this case (DTensor's mm takes no transposes): the case
    is drawn again, not counted."""


# ----------------------------------------------------------------------------- answers


@dataclass
class Answer:
    """A rule's answer in spmdkit's terms: required inputs and outputs, each
    {"dims_mapping": [...], "partial": {axis: op}}."""

    inputs: List[dict]
    outputs: List[dict]

    def to_json(self) -> dict:
        return {"inputs": [_json_layout(l) for l in self.inputs],
                "outputs": [_json_layout(l) for l in self.outputs]}


def _json_layout(l: dict) -> dict:
    return {"dims_mapping": l["dims_mapping"], "partial": {str(k): v for k, v in l["partial"].items()}}


# ----------------------------------------------------------------------------- judging


@dataclass
class Verdict:
    verdict: str               # SOUND, UNSOUND, NOT_APPLICABLE
    reason: str = ""
    counterexample: Optional[dict] = None
    replay: Optional[str] = None


def claim_json(req: Request, answer: Answer) -> dict:
    """The claim in `spmd check --claim`'s form: the inputs laid out as the rule requires,
    the outputs as it says."""
    inputs = [_json_tensor({"shape": s, **l}) for s, l in zip(req.shapes, answer.inputs)]
    for t in inputs:
        t.setdefault("partial", {})
    return {"op": req.op, "attrs": req.attrs, "mesh_shape": req.mesh, "inputs": inputs,
            "claim_outputs": [_json_layout(l) for l in answer.outputs]}


def judge(req: Request, answer: Answer) -> Verdict:
    if len(answer.inputs) != len(req.shapes):
        return Verdict("UNSOUND", f"the answer lays out {len(answer.inputs)} inputs, the op has "
                                  f"{len(req.shapes)}")
    inputs = [{"shape": s, **l} for s, l in zip(req.shapes, answer.inputs)]
    outputs, note = _avg_as_sum(req, answer), ""
    if outputs is not answer.outputs:
        note = "avg partials of a mean over even shards judged as sums (spmdkit's kernel convention)"
    try:
        r = spmdkit.check_claim(req.op, req.mesh, inputs, outputs, req.attrs)
    except spmdkit.SpmdError as e:
        return Verdict("UNSOUND", f"not a valid layout: {type(e).__name__}: {e}")
    return Verdict(r.verdict, "; ".join(x for x in (note, r.note) if x), r.counterexample, r.replay)


def _avg_as_sum(req: Request, answer: Answer) -> List[dict]:
    """The outputs to check. A framework's mean kernel divides by its local element count and
    claims partial(avg); spmdkit's divides by the global count and claims partial(sum)
    (docs/DECISIONS.md D7). The two agree exactly when every shard the avg axes cut is even,
    so there the avg claim is checked as the sum claim; on uneven shards it stays avg and is
    judged as it is (the local means are weighted wrongly)."""
    if req.op not in ("mean", "mean_all") or not any("avg" in o["partial"].values() for o in answer.outputs):
        return answer.outputs
    shape, layout = req.shapes[0], answer.inputs[0]
    avg_axes = {a for o in answer.outputs for a, op in o["partial"].items() if op == "avg"}
    for d, m in enumerate(layout["dims_mapping"]):
        axes = m if isinstance(m, list) else ([m] if m >= 0 else [])
        if avg_axes & set(axes):
            ranks = 1
            for a in axes:
                ranks *= req.mesh[a]
            if shape[d] % ranks:
                return answer.outputs
    return [{"dims_mapping": o["dims_mapping"],
             "partial": {a: ("sum" if op == "avg" else op) for a, op in o["partial"].items()}}
            for o in answer.outputs]


def spmdkit_answer(req: Request) -> Answer:
    r = spmdkit.infer(req.op, req.mesh, req.inputs(), req.attrs)
    return Answer([{"dims_mapping": t.dims_mapping, "partial": dict(t.partial)} for t in r.inputs],
                  [{"dims_mapping": t.dims_mapping, "partial": dict(t.partial)} for t in r.outputs])


def reshard_bytes(req: Request, answer: Answer) -> int:
    """Bytes per rank the planner needs to move every input from its given layout to the
    layout the answer requires (float32)."""
    total = 0
    for shape, given, required in zip(req.shapes, req.layouts, answer.inputs):
        if given["dims_mapping"] == required["dims_mapping"] and given["partial"] == required["partial"]:
            continue
        src = spmdkit.DistAttr(given["dims_mapping"], given["partial"] or None)
        dst = spmdkit.DistAttr(required["dims_mapping"], required["partial"] or None)
        total += spmdkit.plan(req.mesh, shape, src, dst).bytes_per_rank
    return total


# ----------------------------------------------------------------------------- the audit


@dataclass
class OpReport:
    op: str
    rule: str = ""
    cases: int = 0
    sound: int = 0
    unsound: int = 0
    not_applicable: int = 0
    errors: int = 0
    crashes: int = 0               # errors that killed the process (within errors)
    framework_more_bytes: int = 0
    spmdkit_more_bytes: int = 0
    unpriced: int = 0
    spmdkit_unsound: int = 0
    skipped: str = ""              # why the op was not audited
    counterexample: Optional[dict] = None
    spmdkit_counterexample: Optional[dict] = None
    error_example: Optional[str] = None
    error_kinds: Dict[str, int] = field(default_factory=dict)   # error text (digits masked) -> count
    more_bytes_example: Optional[dict] = None    # a case where the framework moves more
    spmdkit_more_bytes_example: Optional[dict] = None  # a case where spmdkit moves more


def _signature(rules, op: str):
    """The first (rule name, argument list index) answering a replicated probe case, or the
    reason none does."""
    rng = random.Random(0)
    tried = []
    for name, i in rules.candidates(op):
        for _ in range(20):     # the first expressible draw is the probe
            req = probe(op, rng)
            try:
                rules.answer(op, name, i, req)
                return name, i, None
            except NotExpressible:
                continue
            except Exception as e:
                tried.append(f"{rules.describe(op, name, i)}: {type(e).__name__}: {one_line(e, 160)}")
                break
    return None, None, "; ".join(tried) or f"no {rules.framework} rule for this op"


def restore_fatal_signals() -> None:
    """Gives the fatal signals back their default action. Paddle's handler prints a C++
    traceback, which allocates; after a heap corruption (3.3.1's softmax rule on an axis out
    of range: `free(): invalid pointer`, SIGABRT) it faults inside itself, and its handler
    for that fault sleeps forever. A worker calls this after importing the framework, so
    that such a rule kills its process at once."""
    import signal
    for sig in (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):  # not settable here
            pass


def one_line(e: Exception, limit: int = 240) -> str:
    text = " ".join(str(e).split())
    return text[:limit] + ("..." if len(text) > limit else "")


def audit_op(rules, op: str, cases: int, seed: int) -> OpReport:
    rep = OpReport(op)
    try:
        name, sig, why = _signature(rules, op)
    except NoExample as e:
        name, why = None, str(e)
    if name is None:
        rep.skipped = why
        return rep
    rep.rule = name
    rng = random.Random(f"{seed}:{op}")
    draws = 0
    while rep.cases < cases and draws < 20 * cases:
        draws += 1
        req = generate(op, rng)
        try:
            spmdkit_answer(req)
        except spmdkit.SpmdError:
            # A request spmdkit refuses (a generated attr out of range): not a case.
            continue
        try:
            theirs = rules.answer(op, name, sig, req)
            rep.cases += 1
        except NotExpressible:
            continue
        except Unrepresentable:
            rep.cases += 1
            rep.not_applicable += 1
            continue
        except Exception as e:
            rep.cases += 1
            rep.errors += 1
            rep.crashes += isinstance(e, FrameworkCrash)
            text = one_line(e) if isinstance(e, FrameworkError) else f"{type(e).__name__}: {one_line(e)}"
            kind = re.sub(r"\[[^]]*\]|\d+", "N", text[:120])
            rep.error_kinds[kind] = rep.error_kinds.get(kind, 0) + 1
            if rep.error_example is None:
                rep.error_example = f"{req.infer_line()} -> {text}"
            continue
        v = judge(req, theirs)
        if v.verdict == "SOUND":
            rep.sound += 1
        elif v.verdict == "UNSOUND":
            rep.unsound += 1
            if rep.counterexample is None:
                rep.counterexample = {"request": req.infer_line(), "answer": theirs.to_json(),
                                      "claim": json.dumps(claim_json(req, theirs), sort_keys=True),
                                      "verdict": asdict(v)}
            continue
        else:
            rep.not_applicable += 1
            continue
        ours = spmdkit_answer(req)
        mine = judge(req, ours)
        if mine.verdict == "UNSOUND":
            rep.spmdkit_unsound += 1
            if rep.spmdkit_counterexample is None:
                rep.spmdkit_counterexample = {"request": req.infer_line(), "answer": ours.to_json(),
                                              "verdict": asdict(mine)}
            continue
        try:
            b_theirs, b_ours = reshard_bytes(req, theirs), reshard_bytes(req, ours)
        except spmdkit.SpmdError:
            rep.unpriced += 1
            continue
        example = {"request": req.infer_line(), "framework": theirs.to_json(), "spmdkit": ours.to_json(),
                   "framework_bytes": b_theirs, "spmdkit_bytes": b_ours}
        if b_theirs > b_ours:
            rep.framework_more_bytes += 1
            rep.more_bytes_example = rep.more_bytes_example or example
        elif b_ours > b_theirs:
            rep.spmdkit_more_bytes += 1
            rep.spmdkit_more_bytes_example = rep.spmdkit_more_bytes_example or example
    return rep


def audit(rules, ops: Optional[Sequence[str]] = None, cases: int = 50, seed: int = 1) -> List[OpReport]:
    """Every op spmdkit declares that the adapter has a candidate call for (or `ops`)."""
    known = spmdkit.ops()
    names = list(ops) if ops else [op for op in known if rules.candidates(op)]
    reports = []
    for name in names:
        if name not in known:
            reports.append(OpReport(name, skipped="not an op spmdkit declares"))
            continue
        reports.append(audit_op(rules, name, cases, seed))
    return reports
