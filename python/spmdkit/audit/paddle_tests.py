"""`spmd audit paddle-tests --tests DIR`: Paddle's own SPMD rule unit tests as a held-out
corpus (docs/AUDIT.md, "The held-out corpus").

Paddle's rule tests (PaddlePaddle/Paddle, test/auto_parallel/spmd_rules/test_*_rule.py) build
DistTensorSpec inputs on a ProcessMesh, call `get_phi_spmd_rule(name).infer_forward(...)` or
`.infer_backward(...)` and assert the dims mappings. This module runs each test file under
the installed paddle with the rule lookup wrapped, so that every call is recorded with
Paddle's answer (`record`, in a worker process per file: a rule that kills its process costs
that file's later calls only), then translates each recorded forward call to a spmdkit
request and judges it (`judge_case`) with the audit's checker and planner (`core`).

The test files' assertions are made no-ops while recording: the answer under test is the
installed Paddle's own, and a test asserting a newer Paddle's answer would otherwise stop
before its later calls. A test that fails under the installed Paddle (a newer API) still
yields the calls it made before failing.

Categories per recorded call:
  agree            spmdkit's answer lays out every input and output as Paddle's does
  equal            both sound, different layouts, the same bytes moved
  spmdkit better   both sound and spmdkit moves fewer bytes, or Paddle's answer is unsound
  disagree         spmdkit refuses a case Paddle answers, answers with another arity, moves
                   more bytes than Paddle's sound answer, or is itself unsound
  not judged       the reason: a rule name spmdkit lacks, a reverse (infer_backward) call,
                   Paddle's rule raised, or a call not expressible in spmdkit's terms
Agreement = (agree + equal + spmdkit better) / judged.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

# ----------------------------------------------------------------------------- recording
# (runs under paddle, in a worker process: `python -m spmdkit.audit.paddle_tests --record FILE`)

_ASSERTS = ("assertEqual", "assertEquals", "assertNotEqual", "assertTrue", "assertFalse",
            "assertListEqual", "assertTupleEqual", "assertSetEqual", "assertDictEqual",
            "assertIn", "assertNotIn", "assertIs", "assertIsNot", "assertIsNone",
            "assertIsNotNone", "assertGreater", "assertGreaterEqual", "assertLess",
            "assertLessEqual", "assertAlmostEqual", "assertCountEqual", "assertSequenceEqual")


def _partial_of(attr) -> Dict[int, str]:
    """{mesh axis: reduce type} of a TensorDistAttr (only its printed form names the type)."""
    from spmdkit.audit.paddle import _PARTIAL_RE, PADDLE_REDUCE
    if not attr._is_partial():
        return {}
    found = {int(d): k for d, k in _PARTIAL_RE.findall(str(attr))}
    return {int(d): PADDLE_REDUCE.get(found.get(int(d), "SUM"), "sum") for d in attr._partial_dims()}


def _install_recorder(calls: List[dict], emit=None):
    """Wraps paddle's rule lookup and DistTensorSpec (whose partial status Python cannot read
    back: it is taken from the TensorDistAttr the spec is built from)."""
    import unittest

    from paddle.base import core
    from paddle.distributed.auto_parallel.static import dist_attribute
    from spmdkit.audit.paddle import PaddleRules

    reader = PaddleRules.read
    base_spec = dist_attribute.DistTensorSpec

    class RecordedSpec(base_spec):
        def __init__(self, *args):
            super().__init__(*args)
            src = args[0] if args else None
            if isinstance(src, base_spec):
                self._spmd_partial = dict(getattr(src, "_spmd_partial", {}))
            elif len(args) > 1 and hasattr(args[1], "_is_partial"):
                self._spmd_partial = _partial_of(args[1])
            else:
                self._spmd_partial = {}

    def describe(arg):
        if isinstance(arg, base_spec):
            dims = arg.dims_mapping() if callable(arg.dims_mapping) else arg.dims_mapping
            shape = arg.shape() if callable(arg.shape) else arg.shape
            mapping = [list(m) if isinstance(m, (list, tuple)) else int(m) for m in dims]
            return {"tensor": {"shape": [int(s) for s in shape],
                               "mesh": [int(s) for s in arg.process_mesh().shape],
                               "dims_mapping": mapping,
                               "partial": {str(a): o for a, o in getattr(arg, "_spmd_partial", {}).items()}}}
        if type(arg).__name__ == "TensorDistAttr":
            # An absent optional tensor (Paddle's tests pass an empty TensorDistAttr).
            return {"absent": True}
        if isinstance(arg, (list, tuple)):
            if any(isinstance(a, base_spec) for a in arg):
                return {"tensors": [describe(a) for a in arg]}
            return {"value": [describe(a)["value"] for a in arg]}
        if isinstance(arg, dict):
            return {"value": {str(k): describe(v)["value"] for k, v in arg.items()}}
        if isinstance(arg, (bool, int, float, str)) or arg is None:
            return {"value": arg}
        return {"value": repr(arg)}

    def read_all(obj):
        if isinstance(obj, (list, tuple)):
            return [read_all(o) for o in obj]
        layout = reader(None, obj)
        return {"dims_mapping": layout["dims_mapping"],
                "partial": {str(a): o for a, o in layout["partial"].items()}}

    class RecordedRule:
        def __init__(self, name, rule):
            self._name, self._rule = name, rule

        def _call(self, direction, args):
            case = {"rule": self._name, "direction": direction, "args": [describe(a) for a in args],
                    "test": _current_test[0]}
            if emit:
                emit({"pending": case})     # a rule that kills the process is still recorded
            try:
                if self._rule is None:      # looked up at the first call: a rule name this
                    self._rule = original(self._name)   # Paddle lacks is recorded, not lost
                result = getattr(self._rule, direction)(*args)
            except BaseException as e:
                case["raised"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
                calls.append(case)
                if emit:
                    emit({"call": case})
                raise
            case["answer"] = {"inputs": read_all(result[0]), "outputs": read_all(result[1])}
            calls.append(case)
            if emit:
                emit({"call": case})
            return result

        def infer_forward(self, *args):
            return self._call("infer_forward", args)

        def infer_backward(self, *args):
            return self._call("infer_backward", args)

    original = core.get_phi_spmd_rule

    def get_phi_spmd_rule(name):
        return RecordedRule(name, None)

    core.get_phi_spmd_rule = get_phi_spmd_rule
    dist_attribute.DistTensorSpec = RecordedSpec
    for name in _ASSERTS:
        setattr(unittest.TestCase, name, lambda self, *a, **k: None)


_current_test = [""]


def record(path: str, emit=None) -> dict:
    """Runs one test file with the recorder installed: {"calls", "tests", "failed"}; `emit`,
    when given, receives each call as it is made ({"pending": call}) and answered
    ({"call": call})."""
    import importlib.util
    import unittest

    from spmdkit.audit.core import restore_fatal_signals

    calls: List[dict] = []
    _install_recorder(calls, emit)
    restore_fatal_signals()  # paddle is imported: a rule's crash ends the worker at once
    failed, tests = [], 0
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        return {"calls": calls, "tests": 0, "failed": [f"import: {type(e).__name__}: {e}"]}
    suite = unittest.defaultTestLoader.loadTestsFromModule(module)

    def flatten(s):
        for t in s:
            if isinstance(t, unittest.TestSuite):
                yield from flatten(t)
            else:
                yield t

    for test in flatten(suite):
        tests += 1
        _current_test[0] = test.id().split(".", 1)[-1]
        result = unittest.TestResult()
        test.run(result)
        for _, trace in result.errors + result.failures:
            failed.append(f"{_current_test[0]}: {trace.strip().splitlines()[-1][:200]}")
    return {"calls": calls, "tests": tests, "failed": failed}


# Seconds one test file's worker may run before it is killed (its later calls are lost and
# the file is reported failing, as when a rule kills it).
FILE_TIMEOUT_S = float(os.environ.get("SPMD_AUDIT_FILE_TIMEOUT", "300"))


def _run_bounded(argv: List[str], timeout_s: float) -> subprocess.CompletedProcess:
    """Runs argv in its own session with stdout and stderr captured. Its process group is
    killed once it has exited (a helper it started could hold the pipes open) or once
    timeout_s have passed; then what it printed so far comes back, with status -9 when it
    ran out of time."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            out, err = proc.communicate(timeout=1.0)
            return subprocess.CompletedProcess(argv, proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            if proc.poll() is None and time.monotonic() < deadline:
                continue  # retrying communicate loses no output
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        exited = proc.poll() is not None
        out, err = proc.communicate()
        if exited:
            return subprocess.CompletedProcess(argv, proc.returncode, out, err)
        return subprocess.CompletedProcess(argv, -9, out or "",
                                           (err or "") + f"\nthe file did not finish within {timeout_s:g} s")


def record_dir(tests_dir: str, python: Optional[str] = None) -> List[dict]:
    """Records every test_*.py under tests_dir, one worker process per file:
    [{"file", "calls", "tests", "failed"}]."""
    python = python or sys.executable
    files = sorted(glob.glob(os.path.join(tests_dir, "test_*.py")))
    out = []
    for path in files:
        proc = _run_bounded([python, "-m", "spmdkit.audit.paddle_tests", "--record", path], FILE_TIMEOUT_S)
        rec = {"calls": [], "tests": 0, "failed": []}
        pending = None
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if "pending" in msg:
                pending = msg["pending"]
            elif "call" in msg:
                rec["calls"].append(msg["call"])
                pending = None
            elif "done" in msg:
                rec["tests"], rec["failed"] = msg["done"]["tests"], msg["done"]["failed"]
        if proc.returncode != 0:
            # The worker died (Paddle 3.3.1 segfaults on some calls): the call under way is
            # recorded as raised; the file's later calls are lost and it is reported failing.
            if pending is not None:
                pending["raised"] = f"FrameworkCrash: the rule killed its process (status {proc.returncode})"
                rec["calls"].append(pending)
            rec["failed"].append(f"the worker exited with status {proc.returncode}: "
                                 f"{(proc.stderr.strip().splitlines() or [''])[-1][:200]}")
        rec["file"] = os.path.basename(path)
        out.append(rec)
    return out


# ----------------------------------------------------------------------------- translating


class NotJudged(Exception):
    """The recorded call has no spmdkit counterpart; the message says why."""


def _paddle_to_spmdkit() -> Dict[str, tuple]:
    """Paddle rule name -> (spmdkit op, [argument builders]) from the live audit's table."""
    from spmdkit.audit.paddle import OPS
    table: Dict[str, tuple] = {}
    for op in OPS:
        for name in op.paddle_names:
            table.setdefault(name, (op.name, op.signatures))
    return table


@dataclass
class Case:
    """One recorded forward call, translated: spmdkit's request and Paddle's answer."""
    file: str
    test: str
    rule: str
    op: str
    mesh: List[int]
    shapes: List[List[int]]
    layouts: List[dict]
    attrs: dict
    paddle_inputs: List[dict] = field(default_factory=list)
    paddle_outputs: List[dict] = field(default_factory=list)
    paddle_raised: str = ""


def _layout(t: dict) -> dict:
    return {"dims_mapping": t["dims_mapping"], "partial": {int(a): o for a, o in t["partial"].items()}}


def _tensors(args) -> List[Optional[dict]]:
    """The tensor arguments in order (a tensor list flattened); an absent optional tensor
    (an empty TensorDistAttr, or a spec with no mesh) is None."""
    out = []
    for a in args:
        if "absent" in a:
            out.append(None)
        elif "tensor" in a:
            out.append(a["tensor"] if a["tensor"]["mesh"] else None)
        elif "tensors" in a:
            out.extend(t["tensor"] for t in a["tensors"])
    return out


# spmdkit ops whose optional inputs are always passed, a 0-d tensor for an absent one
# (docs/DECISIONS.md): Paddle's absent input (an empty TensorDistAttr, or a spec of shape [0]
# on no mesh) becomes that 0-d tensor, and Paddle's layout of it spmdkit's unset one.
ABSENT_AS_0D = ("layer_norm", "roi_align")


def _absent_0d() -> dict:
    return {"shape": [], "mesh": [], "dims_mapping": [], "partial": {}}


def translate(call: dict, file: str = "") -> Case:
    """A recorded call -> a Case; NotJudged with the reason when it has none."""
    from spmdkit import _core
    import spmdkit

    rule = call["rule"]
    if call["direction"] != "infer_forward":
        raise NotJudged("reverse inference (infer_backward): spmdkit infers forward only")
    table = _paddle_to_spmdkit()
    if rule not in spmdkit.ops() and rule not in table:
        raise NotJudged(f"no spmdkit op for Paddle's rule {rule!r}")
    args = call["args"]
    tensors = _tensors(args)
    # Absent optional inputs: trailing ones are left out of spmdkit's request (and of
    # Paddle's answer, which lays them out too); one before a present input has no
    # spmdkit spelling, except in the ops that take a 0-d tensor for it (ABSENT_AS_0D).
    absent = [i for i, t in enumerate(tensors) if t is None]
    given = len(tensors)
    as_0d = (table[rule][0] if rule in table else rule) in ABSENT_AS_0D and bool(tensors) and tensors[0] is not None
    if as_0d:
        tensors = [_absent_0d() if t is None else t for t in tensors]
    while tensors and tensors[-1] is None:
        tensors.pop()
    if any(t is None for t in tensors):
        raise NotJudged("an absent optional input before a present one")
    values = [a["value"] for a in args if "value" in a]
    if any(isinstance(v, dict) for v in values):
        raise NotJudged("attrs passed as a dict (the pre-phi rule API)")
    if not tensors:
        raise NotJudged("no tensor argument")
    # A spmdkit op of the rule's own name is that op (its declared attrs in order, or
    # the live audit's argument list where it maps the name to the same op); else the
    # live audit's mapping of the Paddle name.
    op, signatures = table[rule] if rule in table else (rule, [])
    if rule in spmdkit.ops() and op != rule:
        op, signatures = rule, []
    names = (max((getattr(s, "attr_names", ()) for s in signatures), key=len) if signatures
             else tuple(s["name"] for s in _core.attr_specs(op)))
    if op in ("fused_rotary_position_embedding", "flash_attention"):
        names = getattr(signatures[0], "attr_names", names) if signatures else names
        # Optional tensors Paddle passes as 0-d placeholders: spmdkit leaves them out.
        keep = 5 if op == "fused_rotary_position_embedding" else 3
        while len(tensors) > keep and not tensors[-1]["shape"]:
            tensors.pop()
        if op == "flash_attention" and len(tensors) == 5 and not tensors[3]["shape"]:
            raise NotJudged("flash_attention with attn_mask but no fixed_seed_offset")
    if len(values) > len(names):
        raise NotJudged(f"{len(values)} attrs, spmdkit's {op} takes {len(names)}")
    # A Paddle DataType argument is recorded as its repr ("<DataType.INT64: 9>"): spmdkit
    # spells it by name ("int64").
    values = [_dtype_name(v) for v in values]
    attrs = {n.split("=")[0]: v for n, v in zip(names, values)}
    # Paddle's binding reads an int as a bool argument (fused_linear_param_grad_add's test
    # passes multi_precision as 0): so does the harness, for an attr spmdkit declares bool.
    if op in spmdkit.ops():
        bools = {s["name"] for s in _core.attr_specs(op) if isinstance(s["default"], bool)}
        attrs = {n: bool(v) if n in bools and type(v) is int else v for n, v in attrs.items()}
    for i, t in enumerate(tensors):
        if len(t["dims_mapping"]) != len(t["shape"]):
            raise NotJudged(f"input {i}: a dims mapping of {len(t['dims_mapping'])} entries on a "
                            f"rank-{len(t['shape'])} shape")
        axes = [a for m in t["dims_mapping"] for a in (m if isinstance(m, list) else [m]) if a >= 0]
        if len(axes) != len(set(axes)):
            # Paddle's own TensorDistAttr::verify_dims_mapping refuses this layout; a rule that
            # replicates everything (nonzero's) answers it without looking.
            raise NotJudged(f"input {i}: a mesh axis shards two dims, dims mapping {t['dims_mapping']}")
        if set(axes) & {int(a) for a in t["partial"]}:
            raise NotJudged(f"input {i}: a mesh axis both shards a dim and is partial")
        if any(d < 0 for d in t["shape"]):
            raise NotJudged(f"input {i}: a dynamic (-1) dim in shape {t['shape']}")
    meshes = {tuple(t["mesh"]) for t in tensors if t["mesh"]}
    if len(meshes) > 1:
        raise NotJudged("inputs on different meshes")
    mesh = list(meshes.pop()) if meshes else [1]
    case = Case(file, call.get("test", ""), rule, op, mesh, [t["shape"] for t in tensors],
                [_layout(t) for t in tensors], attrs)
    if "raised" in call:
        case.paddle_raised = call["raised"]
    else:
        ins = _flat(call["answer"]["inputs"])
        if absent and len(ins) == given:
            if as_0d:
                ins = [_unset() if i in absent else l for i, l in enumerate(ins)]
            else:
                ins = [l for i, l in enumerate(ins) if i not in absent]
        case.paddle_inputs = [_layout(l) for l in ins]
        case.paddle_outputs = [_layout(l) for l in _flat(call["answer"]["outputs"])]
    return case


def _dtype_name(value):
    m = re.fullmatch(r"<DataType\.(\w+): \d+>", value) if isinstance(value, str) else None
    return m.group(1).lower() if m else value


def _flat(obj) -> List[dict]:
    out = []
    for o in obj:
        out.extend(_flat(o) if isinstance(o, list) else [o])
    return out


# ----------------------------------------------------------------------------- judging

AGREE, EQUAL, BETTER, DISAGREE, NOT_JUDGED = "agree", "equal", "spmdkit better", "disagree", "not judged"


@dataclass
class Judgement:
    category: str
    kind: str = ""          # the disagreement's or the not-judged reason's kind
    detail: str = ""


def _norm(l: dict) -> tuple:
    m = tuple(tuple(x) if isinstance(x, list) else x for x in l["dims_mapping"])
    return m, tuple(sorted((int(a), o) for a, o in l["partial"].items()))


def _adapt(case: Case, ins: List[dict], outs: List[dict]):
    """Paddle's extra tensors that spmdkit's op does not have (as the live audit's adapters
    in `paddle.py` do): the optional inputs Paddle lays out too (rope's position_ids,
    flash_attention's fixed_seed_offset and attn_mask), and flash_attention's softmax,
    which Paddle lays out even when return_softmax is false and spmdkit leaves unset."""
    if case.op in ("fused_rotary_position_embedding", "flash_attention") and len(ins) > len(case.shapes):
        ins = ins[:len(case.shapes)]
    if case.op == "flash_attention" and not case.attrs.get("return_softmax", False) and len(outs) > 1:
        outs = [outs[0], _unset()] + outs[2:]
    return ins, outs


def _unset() -> dict:
    return {"dims_mapping": [], "partial": {}}


# Paddle's errors that are not its rule's verdict on the case: the rule name is not
# registered in this Paddle, its Python binding cannot take an argument the test passes
# (a newer Paddle's call form), or the rule killed its process.
_NOT_A_VERDICT = ("spmd_rule_map_", "infer_spmd(): argument", "paddle::get failed", "FrameworkCrash")

# spmdkit's typed errors on cases Paddle's own kernels refuse too (the rule is not asked to
# validate them in Paddle; spmdkit's is): the error's field, per op. Counted as not judged
# ("invalid case"), each recorded in docs/DECISIONS.md.
INVALID_CASES = {
    # Paddle's slice InferMeta requires every decrease_axis dim to be 1 after slicing.
    "slice": ("attrs.decrease_axis",),
    # Paddle's scatter InferMeta requires updates' first dim to equal the index length.
    "scatter": ("inputs[2].shape",),
    # Paddle's gather_nd InferMeta requires index.shape[-1] <= rank(x).
    "gather_nd": ("inputs[1].shape",),
    # Paddle's cross_entropy_with_softmax InferMeta requires a hard label of size 1 on axis.
    "cross_entropy_with_softmax": ("inputs[1].shape",),
    # Paddle's fused_gemm_epilogue InferMeta requires x's and y's contracted sizes to agree
    # (its rule test transposes x of [512, 48, 64, 32] against y [32, 48]: 64 against 32).
    "fused_gemm_epilogue": ("inputs[1].shape",),
}

_TOO_LARGE = "simulated check holds at most"


def _small(size: int, ranks: int) -> int:
    """The smallest size standing in for `size` in the simulated check: the same
    divisibility by every shard count up to the mesh's rank count (so each layout cuts the
    same even or uneven shards), and at least `ranks` where `size` is."""
    if size <= max(ranks, 12):
        return size
    for small in range(ranks, size):
        if all((size % k == 0) == (small % k == 0) for k in range(2, ranks + 1)):
            return small
    return size


def _checkable(req):
    """`req` on sizes the simulated checker holds (`_small` per dim), or None when its
    sizes are already small."""
    from spmdkit.audit.cases import Request
    ranks = 1
    for m in req.mesh:
        ranks *= m
    shapes = [[_small(d, ranks) for d in shape] for shape in req.shapes]
    if shapes == req.shapes:
        return None
    return Request(req.op, req.mesh, shapes, req.layouts, req.attrs)


def judge_case(case: Case) -> Judgement:
    import spmdkit
    from spmdkit.audit.cases import Request
    from spmdkit.audit.core import Answer, judge, reshard_bytes, spmdkit_answer

    req = Request(case.op, case.mesh, case.shapes, case.layouts, case.attrs)
    try:
        ours = spmdkit_answer(req)
        our_error = ""
    except spmdkit.SpmdError as e:
        ours, our_error = None, f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
    if case.paddle_raised:
        if any(m in case.paddle_raised for m in _NOT_A_VERDICT):
            return Judgement(NOT_JUDGED, "no verdict from this Paddle", case.paddle_raised)
        if ours is None:
            return Judgement(AGREE, "both refuse", f"Paddle: {case.paddle_raised}; spmdkit: {our_error}")
        return Judgement(NOT_JUDGED, "Paddle's rule raises", case.paddle_raised)
    if ours is None:
        if any(f"InvalidArgument: {f}" in our_error for f in INVALID_CASES.get(case.op, ())):
            return Judgement(NOT_JUDGED, "invalid case", our_error)
        return Judgement(DISAGREE, "spmdkit refuses", our_error)
    ins, outs = case.paddle_inputs, case.paddle_outputs
    if len(ins) != len(ours.inputs) or len(outs) != len(ours.outputs):
        ins, outs = _adapt(case, ins, outs)
    if len(ins) != len(ours.inputs) or len(outs) != len(ours.outputs):
        return Judgement(DISAGREE, "arity",
                         f"Paddle: {len(ins)} inputs, {len(outs)} outputs; spmdkit: "
                         f"{len(ours.inputs)} inputs, {len(ours.outputs)} outputs")
    if all(_norm(a) == _norm(b) for a, b in zip(ins + outs, ours.inputs + ours.outputs)):
        return Judgement(AGREE)
    theirs = Answer(ins, outs)
    check_req = req
    mine = judge(req, ours)
    if _TOO_LARGE in mine.reason:
        # The checker's sizes: the same layouts judged on smaller dims of the same
        # divisibility, where spmdkit's rule answers them with the same layouts (the rule's
        # choice does not depend on the sizes it drops).
        small = _checkable(req)
        try:
            same = small is not None and all(
                _norm(a) == _norm(b) for a, b in zip(spmdkit_answer(small).inputs + spmdkit_answer(small).outputs,
                                                   ours.inputs + ours.outputs))
        except spmdkit.SpmdError:
            same = False
        if not same:
            return Judgement(NOT_JUDGED, "too large to check", mine.reason)
        check_req = small
        mine = judge(check_req, ours)
    if mine.verdict == "UNSOUND":
        return Judgement(DISAGREE, "spmdkit unsound", mine.reason)
    v = judge(check_req, theirs)
    if v.verdict == "UNSOUND":
        note = "" if check_req is req else f" (checked on shapes {check_req.shapes})"
        return Judgement(BETTER, "Paddle unsound", v.reason + note)
    if v.verdict != "SOUND" or mine.verdict != "SOUND":
        return Judgement(NOT_JUDGED, "not checkable", f"Paddle {v.verdict}, spmdkit {mine.verdict}: "
                                                      f"{v.reason or mine.reason}")
    try:
        b_theirs, b_ours = reshard_bytes(req, theirs), reshard_bytes(req, ours)
    except spmdkit.SpmdError as e:
        return Judgement(NOT_JUDGED, "not priced", str(e))
    detail = f"Paddle {b_theirs} B, spmdkit {b_ours} B"
    if b_ours < b_theirs:
        return Judgement(BETTER, "fewer bytes", detail)
    if b_ours > b_theirs:
        return Judgement(DISAGREE, "spmdkit moves more", detail)
    return Judgement(EQUAL, "same bytes", detail)


def layout_text(l: dict) -> str:
    p = "".join(f" P{a}:{o}" for a, o in sorted(l["partial"].items()))
    return f"{l['dims_mapping']}{p}"


def evaluate(records: List[dict]) -> List[dict]:
    """Every recorded call of every file, translated and judged: a list of
    {"file", "rule", "op", "category", "kind", "detail", "case"}."""
    import spmdkit
    from spmdkit.audit.cases import Request
    from spmdkit.audit.core import spmdkit_answer

    results = []
    for rec in records:
        for call in rec["calls"]:
            entry = {"file": rec["file"], "rule": call["rule"], "test": call.get("test", "")}
            try:
                case = translate(call, rec["file"])
            except NotJudged as e:
                entry.update(op=call["rule"], category=NOT_JUDGED, kind=_kind(str(e)), detail=str(e))
                results.append(entry)
                continue
            try:
                j = judge_case(case)
            except Exception as e:  # a translation spmdkit's checker cannot take
                j = Judgement(NOT_JUDGED, "not expressible", f"{type(e).__name__}: {e}")
            req = Request(case.op, case.mesh, case.shapes, case.layouts, case.attrs)
            example = {"request": req.infer_line(),
                       "paddle": (case.paddle_raised or
                                  {"inputs": [layout_text(l) for l in case.paddle_inputs],
                                   "outputs": [layout_text(l) for l in case.paddle_outputs]})}
            try:
                ours = spmdkit_answer(req)
                example["spmdkit"] = {"inputs": [layout_text(l) for l in ours.inputs],
                                      "outputs": [layout_text(l) for l in ours.outputs]}
            except spmdkit.SpmdError as e:
                example["spmdkit"] = f"{type(e).__name__}: {e}"
            entry.update(op=case.op, category=j.category, kind=j.kind, detail=j.detail, case=example)
            results.append(entry)
    return results


def _kind(reason: str) -> str:
    if reason.startswith("no spmdkit op"):
        return "rule spmdkit lacks"
    if reason.startswith("reverse"):
        return "reverse inference"
    return "not expressible"


CATEGORIES = [AGREE, EQUAL, BETTER, DISAGREE, NOT_JUDGED]


def summary(results: List[dict]) -> dict:
    per_op: Dict[str, Dict[str, int]] = {}
    for r in results:
        per_op.setdefault(r["op"], {c: 0 for c in CATEGORIES})[r["category"]] += 1
    total = {c: sum(p[c] for p in per_op.values()) for c in CATEGORIES}
    judged = sum(total[c] for c in CATEGORIES if c != NOT_JUDGED)
    good = total[AGREE] + total[EQUAL] + total[BETTER]
    ops_judged = sorted(op for op, p in per_op.items() if sum(p[c] for c in CATEGORIES if c != NOT_JUDGED))
    return {"per_op": per_op, "total": total, "judged": judged,
            "agreement": (good / judged) if judged else 0.0, "ops_judged": ops_judged}


def render(records: List[dict], results: List[dict], version: str) -> str:
    s = summary(results)
    lines = [f"Paddle {version} rule tests: {len(records)} files, "
             f"{sum(r['tests'] for r in records)} tests "
             f"({sum(1 for r in records for _ in r['failed'])} failing under this Paddle), "
             f"{len(results)} recorded calls\n",
             "| op | agree | equal | spmdkit better | disagree | not judged |",
             "|---|---|---|---|---|---|"]
    for op in sorted(s["per_op"]):
        p = s["per_op"][op]
        lines.append(f"| {op} | " + " | ".join(str(p[c]) for c in CATEGORIES) + " |")
    t = s["total"]
    lines.append("| **total** | " + " | ".join(str(t[c]) for c in CATEGORIES) + " |")
    lines.append(f"\nagreement: {s['agreement'] * 100:.1f}% of {s['judged']} judged calls "
                 f"over {len(s['ops_judged'])} ops "
                 f"((agree + equal + spmdkit better) / judged)")
    seen = set()
    examples = []
    for r in results:
        if r["category"] == DISAGREE and (r["op"], r["kind"]) not in seen:
            seen.add((r["op"], r["kind"]))
            examples.append(f"- {r['op']} ({r['kind']}; {r['file']} {r['test']}): {r['detail']}\n"
                            f"  request: {r['case']['request']}\n"
                            f"  Paddle:  {r['case']['paddle']}\n  spmdkit: {r['case']['spmdkit']}")
    if examples:
        lines.append("\n## Disagreements (one example per op and kind)\n")
        lines.extend(examples)
    reasons: Dict[str, int] = {}
    for r in results:
        if r["category"] == NOT_JUDGED:
            key = r["kind"] if r["kind"] != "rule spmdkit lacks" else f"rule spmdkit lacks: {r['rule']}"
            reasons[key] = reasons.get(key, 0) + 1
    if reasons:
        lines.append("\n## Not judged, by reason\n")
        lines.extend(f"- {k}: {v}" for k, v in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m spmdkit.audit paddle-tests --tests DIR [--json]`."""
    import argparse

    from spmdkit.audit.core import EXIT_NOT_IMPORTABLE, EXIT_OK, EXIT_USAGE
    p = argparse.ArgumentParser(prog="spmd audit paddle-tests",
                                description="Runs Paddle's own SPMD rule tests, records every rule call "
                                            "and judges spmdkit's answer against Paddle's.")
    p.add_argument("--tests", required=True, help="a folder of Paddle's test_*_rule.py files")
    p.add_argument("--json", action="store_true", help="every judged call as one JSON object")
    args = p.parse_args(argv)
    if not os.path.isdir(args.tests) or not glob.glob(os.path.join(args.tests, "test_*.py")):
        print(f"spmd audit: InvalidArgument: --tests: no test_*.py in {args.tests!r}", file=sys.stderr)
        return EXIT_USAGE
    probe = subprocess.run([sys.executable, "-c", "import paddle; print(paddle.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("spmd audit: Unsupported: paddle: paddle is not importable; install it with "
              "`pip install paddlepaddle`", file=sys.stderr)
        return EXIT_NOT_IMPORTABLE
    version = probe.stdout.strip().splitlines()[-1]
    records = record_dir(args.tests)
    results = evaluate(records)
    if args.json:
        print(json.dumps({"paddle": version, "files": records, "results": results,
                          "summary": summary(results)}, sort_keys=True))
    else:
        print(render(records, results, version))
    return EXIT_OK


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--record":
        out = os.dup(1)
        os.dup2(2, 1)        # Paddle prints C++ traces on stdout

        def emit(msg):
            os.write(out, (json.dumps(msg) + "\n").encode())

        result = record(sys.argv[2], emit)
        emit({"done": {"tests": result["tests"], "failed": result["failed"]}})
        sys.exit(0)
    sys.exit(main())
