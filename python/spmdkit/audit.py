"""Audits another framework's SPMD rules with spmdkit's checker and planner.

    python -m spmdkit.audit paddle|dtensor [--cases N] [--op NAME]... [--seed S] [--json]

Exit status: 0 audited; 1 spmdkit's own answer was judged UNSOUND on some case (a spmdkit
defect); 2 bad arguments; 3 the framework (or, from the CLI, spmdkit) is not importable.

For each op spmdkit knows that the framework registers a rule for, generated cases (meshes
of 1 to 3 axes of sizes 1 to 4; uneven and size-1 dims; random dims mappings; partial(sum)
inputs) go to the framework's rule. Its answer (the input layouts it requires, the output
layouts and partial status) becomes a spmdkit claim, judged numerically by
spmdkit.check_claim: the inputs laid out as the rule requires, each output checked against
the float64 reference. spmdkit's own rule answers the same request; where both answers are
sound the planner prices each (the bytes per rank to reshard the given inputs to what the
rule requires) and the audit counts which moves more.

The framework is reached through an adapter (`PaddleRules` here, `DTensorRules` in
audit_dtensor.py) run in a worker process (`IsolatedRules`); tests put an in-process
stand-in in its place. A rule that raises, or returns something that is not an answer, counts as an
error; an answer that names no valid layout (a wrong rank, an axis off the mesh) counts as
UNSOUND with the checker's error as the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import spmdkit
from spmdkit.audit_ops import SPECS, Case, OpSpec, spec_for

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_NOT_IMPORTABLE = 3
EXIT_SPMDKIT_UNSOUND = 1


class FrameworkMissing(Exception):
    """The framework to audit is not importable (exit status 3)."""


# ----------------------------------------------------------------------------- cases


def random_mesh(rng) -> List[int]:
    return [rng.randint(1, 4) for _ in range(rng.randint(1, 3))]


def random_layout(rng, rank: int, mesh: Sequence[int], allow_partial: bool) -> dict:
    """A flat dims mapping (each mesh axis on at most one dim) and maybe a partial(sum) axis
    that shards no dim."""
    free = list(range(len(mesh)))
    rng.shuffle(free)
    mapping = [-1] * rank
    for d in range(rank):
        if free and rng.random() < 0.5:
            mapping[d] = free.pop()
    partial = {}
    if allow_partial and free and rng.random() < 0.3:
        partial[free.pop()] = "sum"
    return {"dims_mapping": mapping, "partial": partial}


@dataclass
class Request:
    """One audit case, in `spmd infer`'s request form."""

    op: str
    mesh: List[int]
    shapes: List[List[int]]
    layouts: List[dict]
    attrs: dict

    def inputs(self) -> List[dict]:
        return [{"shape": s, "dims_mapping": l["dims_mapping"], "partial": dict(l["partial"])}
                for s, l in zip(self.shapes, self.layouts)]

    def infer_line(self) -> str:
        """The request as a `spmd infer` JSON line."""
        return json.dumps({"op": self.op, "attrs": self.attrs, "mesh_shape": self.mesh,
                           "inputs": [_json_tensor(t) for t in self.inputs()]}, sort_keys=True)


def _json_tensor(t: dict) -> dict:
    out = {"shape": t["shape"], "dims_mapping": t["dims_mapping"]}
    if t.get("partial"):
        out["partial"] = {str(k): v for k, v in t["partial"].items()}
    return out


def generate(spec: OpSpec, rng) -> Request:
    case: Case = spec.gen(rng)
    mesh = random_mesh(rng)
    layouts = [random_layout(rng, len(s), mesh, allow_partial=i not in case.int_inputs)
               for i, s in enumerate(case.shapes)]
    return Request(spec.name, mesh, case.shapes, layouts, case.attrs)


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


# Paddle's ReduceType names (phi::ReduceType) -> spmdkit's partial ops.
PADDLE_REDUCE = {"SUM": "sum", "MAX": "max", "MIN": "min", "PROD": "prod", "AVG": "avg",
                 "ANY": "any", "ALL": "all"}


def to_paddle_layout(layout: dict) -> dict:
    """spmdkit layout -> the (dims_mapping, partial dims) Paddle's TensorDistAttr takes.
    Only sum partials exist on the way in (the generated cases)."""
    return {"dims_mapping": list(layout["dims_mapping"]), "partial_dims": sorted(layout["partial"])}


def from_paddle_layout(dims_mapping: Sequence[Any], partial_status: Dict[int, str]) -> dict:
    """Paddle (dims_mapping, {mesh axis: reduce type as printed: SUM, MAX, ...}) -> spmdkit
    layout. A dims mapping entry is an axis (-1: none) or, for a co-shard, a list of axes."""
    partial = {int(axis): PADDLE_REDUCE.get(kind, kind.lower()) for axis, kind in partial_status.items()}
    mapping = [[int(a) for a in d] if isinstance(d, (list, tuple)) else int(d) for d in dims_mapping]
    return {"dims_mapping": mapping, "partial": partial}


# ----------------------------------------------------------------------------- Paddle


class InProcessRules:
    """An adapter calling the framework's rules in this process. Subclasses give
    `rule(name)` (an object with infer_forward(*specs_and_attrs) -> (input dist attrs,
    output dist attrs)), `spec(mesh, shape, paddle_layout)` and `read(dist_attr)`."""

    framework = "fake"
    version = ""

    def __init__(self):
        self._rules = {}

    def answer(self, spec: OpSpec, name: str, signature: int, req: Request) -> Answer:
        if name not in self._rules:
            self._rules[name] = self.rule(name)
        return run_framework(self, self._rules[name], spec.signatures[signature], req)


class PaddleRules(InProcessRules):
    """The adapter over paddle.base.core.get_phi_spmd_rule, in this process (the audit runs
    it inside a worker process: `IsolatedRules`)."""

    framework = "paddle"

    def __init__(self):
        try:
            import numpy  # noqa: F401
            import paddle  # noqa: F401
            from paddle.base import core
            from paddle.distributed.auto_parallel.static.dist_attribute import (
                DistTensorSpec, TensorDistAttr)
        except Exception as e:  # ImportError, or a broken install raising anything
            raise FrameworkMissing(f"paddle is not importable ({type(e).__name__}: {e}); "
                                   "install it with `pip install paddlepaddle`") from e
        super().__init__()
        self.version = paddle.__version__
        self._core = core
        self._spec = DistTensorSpec
        self._attr = TensorDistAttr

    def rule(self, name: str):
        return self._core.get_phi_spmd_rule(name)

    def spec(self, mesh: Sequence[int], shape: Sequence[int], layout: dict):
        import numpy as np
        attr = self._attr()
        attr.process_mesh = self._core.ProcessMesh(list(mesh), list(range(int(np.prod(mesh)))),
                                                   [f"d{i}" for i in range(len(mesh))])
        attr.dims_mapping = list(layout["dims_mapping"])
        if layout["partial_dims"]:
            attr._set_partial_dims(list(layout["partial_dims"]))
        return self._spec(list(shape), attr)

    def read(self, dist_attr) -> dict:
        # The reduce type of each partial axis is only in the printed form
        # ("partial: [Partial(dims:1, SUM), ]"); the mapping per dim is multi_dims_mapping
        # (a list of axes per dim: Paddle's co-shard).
        status = {}
        if dist_attr._is_partial():
            found = dict((int(d), k) for d, k in _PARTIAL_RE.findall(str(dist_attr)))
            for d in dist_attr._partial_dims():
                status[int(d)] = found.get(int(d), "SUM")
        dims = [list(axes) for axes in dist_attr.multi_dims_mapping]
        flat = all(len(a) <= 1 for a in dims)
        mapping = [a[0] if a else -1 for a in dims] if flat else dims
        return from_paddle_layout(mapping, status)


_PARTIAL_RE = re.compile(r"Partial\(dims:(\d+), (\w+)\)")


def _flatten_attrs(obj) -> list:
    """Paddle returns a list argument's attrs as a nested list: flatten in order."""
    out = []
    for item in obj:
        if isinstance(item, (list, tuple)):
            out.extend(_flatten_attrs(item))
        else:
            out.append(item)
    return out


def run_framework(rules, rule, signature, req: Request) -> Answer:
    specs = [rules.spec(req.mesh, s, to_paddle_layout(l)) for s, l in zip(req.shapes, req.layouts)]
    result = rule.infer_forward(*signature(specs, req.attrs))
    ins, outs = _flatten_attrs(result[0]), _flatten_attrs(result[1])
    adapt = getattr(signature, "adapt", None)  # where the framework's op has other tensors
    if adapt is not None:
        ins, outs = adapt(len(req.shapes), ins, outs, req.attrs)
    return Answer([rules.read(a) for a in ins], [rules.read(a) for a in outs])


class FrameworkError(Exception):
    """The framework's rule raised; the message is its exception's type and text."""


class FrameworkCrash(Exception):
    """The framework's rule killed its process (a segmentation fault, an abort)."""


class IsolatedRules:
    """Runs an in-process adapter in a worker process (`python -m spmdkit.audit --worker
    FRAMEWORK`), one JSON line per case each way: a rule that crashes its process (Paddle
    3.3.1 segfaults on some inputs) costs that case only; the worker is restarted. The
    worker points its stdout at stderr (Paddle prints C++ tracebacks on stdout) and answers
    on the original stdout."""

    def __init__(self, framework: str):
        import subprocess
        self._subprocess = subprocess
        self._framework = framework
        self._proc = None
        hello = self._start()
        if "missing" in hello:
            self.close()
            raise FrameworkMissing(hello["missing"])
        self.framework, self.version = framework, hello["version"]

    def _start(self) -> dict:
        self._proc = self._subprocess.Popen(
            [sys.executable, "-m", "spmdkit.audit", "--worker", self._framework],
            stdin=self._subprocess.PIPE, stdout=self._subprocess.PIPE,
            stderr=self._subprocess.DEVNULL, text=True, bufsize=1)
        line = self._proc.stdout.readline()
        if not line:
            return {"missing": f"the {self._framework} worker exited at start "
                               f"(status {self._proc.wait()})"}
        return json.loads(line)

    def close(self):
        if self._proc is not None:
            self._proc.stdin.close()
            self._proc.wait()
            self._proc = None

    def answer(self, spec: OpSpec, name: str, signature: int, req: Request) -> Answer:
        if self._proc is None:
            self._start()
        msg = {"rule": name, "signature": signature, "request": asdict(req)}
        try:
            self._proc.stdin.write(json.dumps(msg) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            status = self._proc.wait()
            self._proc = None
            raise FrameworkCrash(f"the rule killed its process (status {status})")
        reply = json.loads(line)
        if "error" in reply:
            raise FrameworkError(reply["error"])
        if "skip" in reply:
            raise NotExpressible(reply["skip"])
        if "unrepresentable" in reply:
            raise Unrepresentable(reply["unrepresentable"])
        return Answer(**{k: [{"dims_mapping": l["dims_mapping"],
                              "partial": {int(a): o for a, o in l["partial"].items()}}
                             for l in reply["answer"][k]] for k in ("inputs", "outputs")})


def worker(framework: str) -> int:
    out = open(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    try:
        rules = make_in_process(framework)
    except FrameworkMissing as e:
        out.write(json.dumps({"missing": str(e)}) + "\n")
        return EXIT_NOT_IMPORTABLE
    out.write(json.dumps({"version": rules.version}) + "\n")
    for line in sys.stdin:
        msg = json.loads(line)
        req = Request(**msg["request"])
        # JSON object keys are strings: the partial axes back to ints.
        req.layouts = [{"dims_mapping": l["dims_mapping"], "partial": {int(a): o for a, o in l["partial"].items()}}
                       for l in req.layouts]
        try:
            a = rules.answer(spec_for(req.op), msg["rule"], msg["signature"], req)
            out.write(json.dumps({"answer": a.to_json()}) + "\n")
        except NotExpressible as e:
            out.write(json.dumps({"skip": str(e)}) + "\n")
        except Unrepresentable as e:
            out.write(json.dumps({"unrepresentable": str(e)}) + "\n")
        except Exception as e:
            out.write(json.dumps({"error": f"{type(e).__name__}: {_one_line(e)}"}) + "\n")
    return EXIT_OK


def make_in_process(framework: str):
    if framework == "paddle":
        return PaddleRules()
    from spmdkit.audit_dtensor import DTensorRules
    return DTensorRules()


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


class Unrepresentable(Exception):
    """The framework answered with a layout spmdkit's layouts cannot state (DTensor's
    _StridedShard): counted as not judged (not_applicable), not as UNSOUND."""


class NotExpressible(Exception):
    """The framework has no call for this case (DTensor's mm takes no transposes): the case
    is drawn again, not counted."""


def candidates(framework: str, spec: OpSpec) -> List[tuple]:
    """(rule name, argument list index) pairs to probe, in order."""
    if framework == "dtensor":
        from spmdkit.audit_dtensor import DTENSOR_OPS
        return [(spec.name, 0)] if spec.name in DTENSOR_OPS else []
    return [(n, i) for n in spec.paddle_names for i in range(len(spec.signatures))]


def _signature(rules, spec: OpSpec):
    """The first (rule name, signature index) answering a replicated probe case, or the
    reason none does."""
    rng = random.Random(0)
    tried = []
    for name, i in candidates(rules.framework, spec):
        for _ in range(20):     # the first expressible draw is the probe
            case = spec.gen(rng)
            req = Request(spec.name, [2], case.shapes,
                          [{"dims_mapping": [-1] * len(s), "partial": {}} for s in case.shapes], case.attrs)
            try:
                rules.answer(spec, name, i, req)
                return name, i, None
            except NotExpressible:
                continue
            except Exception as e:
                sig = spec.signatures[i] if i < len(spec.signatures) else None
                tried.append(f"{name}{tuple(getattr(sig, 'attr_names', ()))}: {type(e).__name__}: "
                             f"{_one_line(e, 160)}")
                break
    return None, None, "; ".join(tried) or f"no {rules.framework} rule for this op"


def _one_line(e: Exception, limit: int = 240) -> str:
    text = " ".join(str(e).split())
    return text[:limit] + ("..." if len(text) > limit else "")


def audit_op(rules, spec: OpSpec, cases: int, seed: int) -> OpReport:
    rep = OpReport(spec.name)
    name, sig, why = _signature(rules, spec)
    if name is None:
        rep.skipped = why
        return rep
    rep.rule = name
    rng = random.Random(f"{seed}:{spec.name}")
    draws = 0
    while rep.cases < cases and draws < 20 * cases:
        draws += 1
        req = generate(spec, rng)
        try:
            spmdkit_answer(req)
        except spmdkit.SpmdError:
            # A request spmdkit refuses (a generated attr out of range): not a case.
            continue
        try:
            theirs = rules.answer(spec, name, sig, req)
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
            text = _one_line(e) if isinstance(e, FrameworkError) else f"{type(e).__name__}: {_one_line(e)}"
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
        if b_theirs > b_ours:
            rep.framework_more_bytes += 1
            if rep.more_bytes_example is None:
                rep.more_bytes_example = {"request": req.infer_line(), "framework": theirs.to_json(),
                                          "spmdkit": ours.to_json(), "framework_bytes": b_theirs,
                                          "spmdkit_bytes": b_ours}
        elif b_ours > b_theirs:
            rep.spmdkit_more_bytes += 1
    return rep


def audit(rules, ops: Optional[Sequence[str]] = None, cases: int = 50, seed: int = 1) -> List[OpReport]:
    known = set(spmdkit.ops())
    names = list(ops) if ops else [s.name for s in SPECS if s.name in known]
    reports = []
    for name in names:
        spec = spec_for(name)
        if spec is None or name not in known:
            reports.append(OpReport(name, skipped="not an op the auditor knows"))
            continue
        reports.append(audit_op(rules, spec, cases, seed))
    return reports


# ----------------------------------------------------------------------------- output

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


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "--worker":
        return worker(argv[1])
    p = argparse.ArgumentParser(prog="spmd audit", description=__doc__.split("\n\n")[0])
    p.add_argument("framework", choices=["paddle", "dtensor"])
    p.add_argument("--cases", type=int, default=50, help="cases per op (default 50)")
    p.add_argument("--op", action="append", default=[], help="audit only this op (repeatable)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="one JSON object: the reports per op")
    args = p.parse_args(argv)
    if args.cases < 0:
        print("spmd audit: InvalidArgument: --cases: must be >= 0", file=sys.stderr)
        return EXIT_USAGE
    unknown = [o for o in args.op if spec_for(o) is None]
    if unknown:
        print(f"spmd audit: InvalidArgument: --op: unknown op {unknown[0]!r}", file=sys.stderr)
        return EXIT_USAGE
    try:
        rules = IsolatedRules(args.framework)
    except FrameworkMissing as e:
        # The CLI's typed-error form (rules/error.h): type, field, message.
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
        ce = counterexamples(reports)
        if ce:
            print("\n## Counterexamples (one per op)\n")
            print(ce)
    # spmdkit's own answer judged UNSOUND is a spmdkit defect: fail (the CI gate).
    return EXIT_SPMDKIT_UNSOUND if any(r.spmdkit_unsound for r in reports) else EXIT_OK


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: the adapters import
    # spmdkit.audit, and its FrameworkMissing must be the class main() catches.
    from spmdkit.audit import main as _main
    sys.exit(_main())
