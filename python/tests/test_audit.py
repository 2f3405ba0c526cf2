"""The auditor of other frameworks' rules (spmdkit.audit): the layout converter round-trips,
a deliberately wrong stand-in for a framework rule is caught with a counterexample that
replays, a right one is not, and (where paddle is importable) a short real audit runs."""

import json
import os
import pathlib
import random
import subprocess
import sys

import pytest

import spmdkit
from spmdkit import audit
from spmdkit.audit import cases, paddle

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPMD = ROOT / "build" / "bin" / "spmd"


def paddle_missing():
    """Why paddle cannot be audited here (None when it can)."""
    try:
        import paddle  # noqa: F401
        from paddle.base import core  # noqa: F401
    except Exception as e:  # a missing or broken install
        return f"paddle is not importable ({type(e).__name__}: {e}); ci/audit-check.sh installs it"
    return None


def test_layouts_round_trip_through_paddles_form():
    rng = random.Random(7)
    for _ in range(500):
        mesh = audit.random_mesh(rng)
        layout = audit.random_layout(rng, rng.randint(0, 4), mesh, allow_partial=True)
        p = paddle.to_paddle_layout(layout)
        back = paddle.from_paddle_layout(p["dims_mapping"], {d: "SUM" for d in p["partial_dims"]})
        assert back == layout
        # and through the JSON an answer is printed in
        a = audit.Answer([layout], [layout])
        j = json.loads(json.dumps(a.to_json()))
        assert paddle.from_paddle_layout(j["inputs"][0]["dims_mapping"],
                                        {int(k): v.upper() for k, v in j["inputs"][0]["partial"].items()}) == layout


def test_paddles_printed_partial_status_is_read():
    text = "{dim_mappings: [[0] [] ], partial: [Partial(dims:1, SUM), Partial(dims:2, MAX), ], split_factor: .}"
    found = dict((int(d), k) for d, k in paddle._PARTIAL_RE.findall(text))
    assert paddle.from_paddle_layout([[0], []], found) == {"dims_mapping": [[0], []],
                                                          "partial": {1: "sum", 2: "max"}}


def test_cases_come_from_every_declaration():
    """Every op spmdkit declares gives cases, spmdkit accepts some of them, and an input
    holding ids, labels or conditions is never made partial."""
    for op in spmdkit.ops():
        accepted = 0
        for seed in range(12):
            ex = cases.example(op, random.Random(seed))
            req = cases.generate(op, random.Random(seed))  # the same draw, then a layout
            assert req.shapes == [list(s) for s in ex["shapes"]] and req.attrs == ex["attrs"], op
            for i in ex["int_inputs"]:
                assert req.layouts[i]["partial"] == {}, (op, i, req)
            try:
                spmdkit.infer(op, req.mesh, req.inputs(), req.attrs)
                accepted += 1
            except spmdkit.SpmdError:
                pass
        assert accepted > 0, op
    assert 0 in cases.example("lookup_table_v2", random.Random(1))["int_inputs"]
    assert cases.example("relu", random.Random(1))["int_inputs"] == []


def test_examples_refuse_bad_arguments_naming_the_field():
    with pytest.raises(spmdkit.UnknownOp, match="op"):
        spmdkit._core.examples("no_such_op", [2, 3])
    with pytest.raises(spmdkit.InvalidArgument, match="^sizes"):
        spmdkit._core.examples("relu", [])
    with pytest.raises(spmdkit.InvalidArgument, match=r"^sizes\[1\]"):
        spmdkit._core.examples("relu", [2, -1])


def test_an_argument_list_that_leaves_out_a_changed_attr_is_not_asked():
    # sum with reduce_all: Paddle's sum rule takes (x, axis, keep_dim) only.
    sig = paddle.TABLE["sum"].signatures[0]
    assert paddle.paddle_attrs("sum", sig, {"axis": [0], "keep_dim": True, "reduce_all": False})["keepdim"] is True
    with pytest.raises(audit.NotExpressible, match="reduce_all"):
        paddle.paddle_attrs("sum", sig, {"axis": [0], "keep_dim": False, "reduce_all": True})


class FakeRules(paddle.InProcessRules):
    """A stand-in for a framework: each rule answers with spmdkit's own answer, passed
    through `corrupt` (identity: a right rule)."""

    framework = "fake"

    def __init__(self, corrupt=lambda op, answer: answer, raise_on=None):
        super().__init__()
        self.corrupt, self.raise_on = corrupt, raise_on

    def rule(self, name):
        spec = paddle.TABLE[name]
        names = spec.signatures[0].attr_names
        outer = self

        class Rule:
            def infer_forward(self, *args):
                if names and args and isinstance(args[0], list):   # a list of tensors first
                    specs, values = args[0], args[1:]
                else:
                    specs, values = args[:len(args) - len(names)], args[len(args) - len(names):]
                attrs = dict(zip(names, values))
                mesh = specs[0]["mesh"]
                if outer.raise_on is not None and outer.raise_on(specs):
                    raise RuntimeError("the stand-in refuses this case")
                inputs = [{"shape": s["shape"], "dims_mapping": s["layout"]["dims_mapping"],
                           "partial": {a: "sum" for a in s["layout"]["partial_dims"]}} for s in specs]
                r = spmdkit.infer(name, mesh, inputs, attrs)
                ans = audit.Answer([{"dims_mapping": t.dims_mapping, "partial": dict(t.partial)} for t in r.inputs],
                                   [{"dims_mapping": t.dims_mapping, "partial": dict(t.partial)} for t in r.outputs])
                ans = outer.corrupt(name, ans)
                return ans.inputs, ans.outputs

        return Rule()

    def spec(self, mesh, shape, layout):
        return {"mesh": list(mesh), "shape": list(shape), "layout": layout}

    def read(self, layout):
        return layout


def drop_partials(op, answer):
    """The bug: every output's partial status is dropped (a partial sum claimed replicated)."""
    return audit.Answer(answer.inputs, [{"dims_mapping": o["dims_mapping"], "partial": {}} for o in answer.outputs])


OPS = ["matmul", "sum", "einsum", "relu", "concat"]


def test_a_right_rule_is_sound_and_costs_the_same():
    reports = audit.audit(FakeRules(), OPS, cases=40, seed=3)
    for r in reports:
        assert r.cases > 0 and not r.skipped, r
        assert r.sound == r.cases and r.unsound == 0 and r.errors == 0, r
        assert r.framework_more_bytes == 0 and r.spmdkit_more_bytes == 0, r


def test_a_dropped_partial_is_unsound_with_a_counterexample_that_replays():
    reports = {r.op: r for r in audit.audit(FakeRules(drop_partials), ["matmul", "sum"], cases=60, seed=5)}
    for op in ("matmul", "sum"):
        r = reports[op]
        assert r.unsound > 0, r
        assert r.sound + r.unsound + r.not_applicable + r.errors == r.cases
        ce = r.counterexample
        assert ce["verdict"]["verdict"] == "UNSOUND" and ce["verdict"]["counterexample"]
        # The request is a valid `spmd infer` line, and the claim replays through the checker.
        request = json.loads(ce["request"])
        assert json.loads(spmdkit.infer_json(ce["request"])).get("error") is None
        claim = json.loads(ce["claim"])
        assert claim["op"] == op and request["mesh_shape"] == claim["mesh_shape"]
        again = spmdkit.check_claim(claim["op"], claim["mesh_shape"], claim["inputs"],
                                    claim["claim_outputs"], claim["attrs"])
        assert again.verdict == "UNSOUND"
        # spmdkit's own answer to the same request is sound.
        assert r.spmdkit_unsound == 0
        if SPMD.exists():
            out = subprocess.run([str(SPMD), "check", "--claim", ce["claim"]], capture_output=True, text=True)
            assert "UNSOUND" in out.stdout + out.stderr, out


def replicate_all(op, answer):
    """Sound and costly: every input gathered whole, every output replicated."""
    def rep(l):
        dm = l["dims_mapping"]
        return {"dims_mapping": [-1] * len(dm), "partial": {}}
    return audit.Answer([rep(l) for l in answer.inputs], [rep(l) for l in answer.outputs])


def test_a_rule_that_gathers_everything_moves_more_bytes():
    for r in audit.audit(FakeRules(replicate_all), ["matmul", "relu", "sum"], cases=40, seed=4):
        assert r.sound == r.cases and r.unsound == 0, r
        assert r.framework_more_bytes > 0 and r.spmdkit_more_bytes == 0, r
        ex = r.more_bytes_example
        assert ex["framework_bytes"] > ex["spmdkit_bytes"] >= 0


def test_each_direction_is_counted_and_shown(monkeypatch):
    # The framework gathers everything: it moves more, with an example.
    reports = audit.audit(FakeRules(replicate_all), ["relu"], cases=40, seed=4)
    text = audit.byte_examples(reports, "fake")
    assert "relu: fake moves more" in text and "relu: spmdkit moves more" not in text
    # spmdkit's own answer made to gather everything: now spmdkit moves more, counted in its
    # column and shown with an example of its own.
    real = audit.core.spmdkit_answer
    monkeypatch.setattr(audit.core, "spmdkit_answer", lambda req: replicate_all(req.op, real(req)))
    (r,) = audit.audit(FakeRules(), ["relu"], cases=40, seed=4)
    assert r.spmdkit_more_bytes > 0 and r.framework_more_bytes == 0, r
    ex = r.spmdkit_more_bytes_example
    assert ex["spmdkit_bytes"] > ex["framework_bytes"] >= 0
    text = audit.byte_examples([r], "fake")
    assert "relu: spmdkit moves more" in text and ex["request"] in text
    total = [line for line in audit.table([r], "fake").splitlines() if line.startswith("| total")][0]
    assert int(total.strip("|").split("|")[7]) == r.spmdkit_more_bytes


def test_a_rule_that_raises_counts_as_an_error():
    rules = FakeRules(raise_on=lambda specs: any(s["layout"]["partial_dims"] for s in specs))
    (r,) = audit.audit(rules, ["relu"], cases=80, seed=2)
    assert 0 < r.errors < r.cases and r.unsound == 0
    assert "refuses" in r.error_example


def test_the_table_adds_up():
    reports = audit.audit(FakeRules(drop_partials), ["sum", "relu"], cases=30, seed=9)
    text = audit.table(reports, "fake")
    total = [line for line in text.splitlines() if line.startswith("| total")][0]
    cells = [c.strip() for c in total.strip("|").split("|")]
    assert int(cells[2]) == sum(r.cases for r in reports)
    assert int(cells[4]) == sum(r.unsound for r in reports) > 0


def run_module(*args, env=None):
    return subprocess.run([sys.executable, "-m", "spmdkit.audit", *args], capture_output=True, text=True,
                          env=env, timeout=600)


def test_bad_arguments_are_typed_errors():
    out = run_module("paddle", "--op", "no_such_op")
    assert out.returncode == 2 and "InvalidArgument: --op" in out.stderr


def torch_missing():
    """Why DTensor cannot be audited here (None when it can)."""
    try:
        import torch  # noqa: F401
        import torch.distributed  # noqa: F401
    except Exception as e:
        return f"torch is not installed ({type(e).__name__}: {e}): the DTensor audit cannot run here"
    return None


def test_dtensor_without_torch_is_a_typed_error():
    if torch_missing() is None:
        pytest.skip("torch is installed: test_a_short_real_dtensor_audit runs instead")
    out = run_module("dtensor")
    assert out.returncode == 3, out
    assert "Unsupported: dtensor: torch is not importable" in out.stderr


@pytest.mark.skipif(torch_missing() is not None, reason=torch_missing() or "")
def test_a_short_real_dtensor_audit():
    rules = audit.IsolatedRules("dtensor")
    try:
        reports = audit.audit(rules, ["matmul", "sum", "transpose", "relu", "stack"], cases=15, seed=1)
    finally:
        rules.close()
    for r in reports:
        assert not r.skipped and r.cases > 0, r
        assert r.sound + r.unsound + r.not_applicable + r.errors == r.cases, r
        assert r.spmdkit_unsound == 0, r.spmdkit_counterexample
    # DTensor's sum over a sharded dim is a partial sum, as spmdkit's: judged SOUND.
    assert {r.op: r for r in reports}["sum"].sound > 0


def test_a_missing_paddle_is_a_typed_error(tmp_path):
    # A directory named paddle with a failing __init__ shadows any installed paddle.
    (tmp_path / "paddle").mkdir()
    (tmp_path / "paddle" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    out = run_module("paddle", "--cases", "1", "--json", env=env)
    assert out.returncode == 3, out
    assert "Unsupported: paddle: paddle is not importable" in out.stderr
    assert json.loads(out.stdout)["error"]["type"] == "Unsupported"
    if SPMD.exists():
        cli = subprocess.run([str(SPMD), "audit", "paddle", "--cases", "1"], capture_output=True, text=True,
                             env=dict(env, SPMD_PYTHON=sys.executable), timeout=600)
        assert cli.returncode == 3 and "Unsupported: paddle" in cli.stderr, cli
        cli = subprocess.run([str(SPMD), "audit", "paddle"], capture_output=True, text=True,
                             env=dict(os.environ, SPMD_PYTHON="/nonexistent/python"), timeout=60)
        assert cli.returncode == 3 and "Unsupported: python: spmdkit is not importable" in cli.stderr, cli


@pytest.mark.skipif(paddle_missing() is not None, reason=paddle_missing() or "")
def test_a_short_real_paddle_audit():
    rules = audit.IsolatedRules("paddle")
    try:
        reports = audit.audit(rules, ["matmul", "max", "transpose", "relu", "concat"], cases=15, seed=1)
    finally:
        rules.close()
    assert rules.version
    for r in reports:
        assert not r.skipped, r
        assert r.cases > 0
        assert r.sound + r.unsound + r.not_applicable + r.errors == r.cases, r
        assert r.spmdkit_unsound == 0, r.spmdkit_counterexample
        if r.counterexample:
            claim = json.loads(r.counterexample["claim"])
            again = spmdkit.check_claim(claim["op"], claim["mesh_shape"], claim["inputs"],
                                        claim["claim_outputs"], claim["attrs"])
            assert again.verdict == "UNSOUND"
    # Paddle's max over a sharded axis is a partial sum (docs/DECISIONS.md D3): some are caught.
    assert {r.op: r for r in reports}["max"].unsound > 0


@pytest.mark.skipif(paddle_missing() is not None, reason=paddle_missing() or "")
def test_a_rule_that_kills_its_process_costs_one_case():
    # Paddle 3.3.1's squared_l2_norm rule called without its attrs (the second candidate
    # argument list) reads an attr as the wrong type: it segfaults on some runs and raises
    # on others. Either way the case fails alone; then the worker is killed, as a crash
    # would, and the next case is answered by a restarted worker.
    op = "squared_l2_norm"
    layout = [{"dims_mapping": [0, -1], "partial": {}}]
    # The argument list without attrs asks Paddle the case's question only when the attrs
    # are the defaults (paddle.paddle_attrs).
    plain = audit.Request(op, [2], [[4, 6]], layout, {"axis": [], "keep_dim": False})
    req = audit.Request(op, [2], [[4, 6]], layout, {"axis": [1], "keep_dim": False})
    rules = audit.IsolatedRules("paddle")
    try:
        with pytest.raises((audit.FrameworkCrash, audit.FrameworkError)):
            rules.answer(op, op, 1, plain)
        rules.answer(op, op, 0, req)  # a worker is running
        rules._proc.kill()
        rules._proc.wait()
        with pytest.raises(audit.FrameworkCrash):
            rules.answer(op, op, 0, req)
        answer = rules.answer(op, op, 0, req)
    finally:
        rules.close()
    assert answer.outputs[0]["dims_mapping"] == [0]


def test_an_avg_partial_of_a_mean_is_sound_on_even_shards_only():
    rng = random.Random(11)
    for _ in range(60):
        ranks = rng.choice([2, 3, 4])
        rows = rng.choice([4, 5, 6, 7, 8, 12])
        layout = {"dims_mapping": [0, -1], "partial": {}}
        for op, attrs, out_rank in (("mean_all", {}, 0), ("mean", {"axis": [0], "keep_dim": False}, 1)):
            req = audit.Request(op, [ranks], [[rows, 3]], [layout], attrs)
            claim = audit.Answer([layout], [{"dims_mapping": [-1] * out_rank, "partial": {0: "avg"}}])
            v = audit.judge(req, claim)
            assert v.verdict == ("SOUND" if rows % ranks == 0 else "UNSOUND"), (op, rows, ranks, v)


def test_paddles_absent_layer_norm_parameters_are_0d():
    """The held-out corpus harness (paddle_tests.translate, no paddle needed): Paddle's rule
    test passes an absent layer_norm bias (or scale) as a spec of shape [0] on no mesh, or as
    an empty TensorDistAttr; spmdkit's layer_norm takes it as a 0-d tensor, and Paddle's
    `[-1]` layout of it is judged as the unset one. Both of Paddle's cases agree."""
    from spmdkit.audit import paddle_tests as pt

    def spec(shape, dims_mapping, mesh=(2, 3)):
        return {"tensor": {"shape": shape, "mesh": list(mesh), "dims_mapping": dims_mapping, "partial": {}}}

    def layout(dims_mapping):
        return {"dims_mapping": dims_mapping, "partial": {}}

    no_bias = {"rule": "layer_norm", "direction": "infer_forward", "test": "without_bias",
               "args": [spec([64, 32, 1024], [1, -1, -1]), spec([1024], [-1]), spec([0], [-1], mesh=()),
                        {"value": 1e-3}, {"value": 2}],
               "answer": {"inputs": [layout([1, -1, -1]), layout([-1]), layout([-1])],
                          "outputs": [layout([1, -1, -1]), layout([1, -1]), layout([1, -1])]}}
    neither = {"rule": "layer_norm", "direction": "infer_forward", "test": "without_both",
               "args": [spec([64, 32, 1024], [1, 0, -1]), {"absent": True}, spec([0], [0], mesh=()),
                        {"value": 1e-3}, {"value": 2}],
               "answer": {"inputs": [layout([1, 0, -1]), layout([-1]), layout([-1])],
                          "outputs": [layout([1, 0, -1]), layout([1, 0]), layout([1, 0])]}}
    case = pt.translate(no_bias)
    assert case.shapes == [[64, 32, 1024], [1024], []]
    assert case.paddle_inputs[2] == {"dims_mapping": [], "partial": {}}
    assert case.attrs == {"epsilon": 1e-3, "begin_norm_axis": 2}
    assert pt.judge_case(case).category == pt.AGREE
    case = pt.translate(neither)
    assert case.shapes == [[64, 32, 1024], [], []] and case.mesh == [2, 3]
    assert pt.judge_case(case).category == pt.AGREE
