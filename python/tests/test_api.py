"""The Python API over generated cases: every form of an argument gives the same answer,
the planner's figures hold together, the checker accepts the rule's answers and rejects a
wrong one, explain describes the case it is given."""

import json
import random

import spmdkit

OPS = set(spmdkit.ops())


def random_placements(rng, ndim, rank):
    """A valid placements string: each mesh axis R, P(sum) or S(d) with no dim twice."""
    free = list(range(rank))
    out = []
    for _ in range(ndim):
        kind = rng.choice(["R", "P", "S"] if free else ["R", "P"])
        if kind == "S":
            d = rng.choice(free)
            free.remove(d)
            out.append(f"S({d})")
        else:
            out.append("R" if kind == "R" else "P(sum)")
    return "[" + ", ".join(out) + "]"


def test_the_readme_example():
    mesh = spmdkit.Mesh([2, 2])
    r = spmdkit.infer("matmul", mesh, [([64, 32], "[S(0), S(1)]"), ([32, 48], [-1, -1])])
    assert r.outputs[0].placements(mesh) == "[S(0), P(sum)]"
    assert r.inputs[1].dims_mapping == [1, -1]
    assert r.outputs[0].partial == {1: "sum"}


def test_forms_of_a_tensor_agree():
    rng = random.Random(3)
    for _ in range(200):
        mesh = spmdkit.Mesh([rng.choice([2, 3]) for _ in range(rng.choice([1, 2, 3]))])
        shape = [rng.choice([1, 4, 6, 7]) for _ in range(rng.choice([1, 2, 3]))]
        text = random_placements(rng, mesh.ndim, len(shape))
        attr = spmdkit.DistAttr.from_placements(text, len(shape))
        assert attr.placements(mesh) == text
        as_dict = {"shape": shape, "dims_mapping": attr.dims_mapping, "partial": attr.partial}
        answers = [spmdkit.infer("relu", mesh, [form]).to_dict()
                   for form in ([shape, text], (shape, attr), as_dict, {"shape": shape, "placements": text})]
        assert all(a == answers[0] for a in answers), (text, answers)
        request = {"op": "relu", "mesh_shape": mesh.shape, "inputs": [as_dict]}
        assert answers[0] == json.loads(spmdkit.infer_json(json.dumps(request)))


def test_reverse_matches_the_json_path():
    rng = random.Random(5)
    for _ in range(100):
        mesh = [2, 2]
        out = [rng.choice([-1, 0, 1]) for _ in range(2)]
        if out[0] == out[1] != -1:
            out[1] = -1
        r = spmdkit.infer("matmul", mesh, [[8, 6], [6, 4]], outputs=[([8, 4], out)])
        request = {"op": "matmul", "mesh_shape": mesh, "direction": "reverse",
                   "inputs": [{"shape": [8, 6]}, {"shape": [6, 4]}],
                   "outputs": [{"shape": [8, 4], "dims_mapping": out}]}
        assert r.to_dict() == json.loads(spmdkit.infer_json(json.dumps(request)))
        assert r.outputs[0].dims_mapping == out


def test_plan_figures_hold_together():
    rng = random.Random(11)
    for _ in range(150):
        mesh = [rng.choice([2, 3, 4]) for _ in range(rng.choice([1, 2, 3]))]
        shape = [rng.choice([4, 6, 12, 7]) for _ in range(rng.choice([1, 2]))]
        src = random_placements(rng, len(mesh), len(shape))
        dst = random_placements(rng, len(mesh), len(shape)).replace("P(sum)", "R")
        p = spmdkit.plan(mesh, shape, src, dst, dtype=rng.choice(["float32", "float64", "bfloat16"]))
        assert p.bytes_per_rank >= p.lower_bound_bytes >= 0
        assert p.bytes_per_rank == sum(s["bytes_per_rank"] for s in p.steps)
        before = src
        for step in p.steps:
            assert step["before"] == before
            before = step["after"]
        assert before == dst or (not p.steps and src == dst)
        *_, total, modelled = str(p).splitlines()
        assert total.startswith(f"total {p.bytes_per_rank} bytes per rank")
        assert modelled.startswith("modelled time ") and "planned for least bytes" in modelled


def test_the_rules_answers_are_sound_and_a_dropped_partial_is_not():
    rng = random.Random(7)
    unsound = 0
    for _ in range(25):
        mesh = [2, 2]
        m, k, n = (rng.choice([4, 6, 5]) for _ in range(3))
        x = [rng.choice([-1, 0, 1]) for _ in range(2)]
        if x[0] == x[1] != -1:
            x[1] = -1
        inputs = [([m, k], x), ([k, n], [-1, -1])]
        r = spmdkit.infer("matmul", mesh, inputs)
        required = [(s, d) for (s, _), d in zip(inputs, r.inputs)]
        verdict = spmdkit.check_claim("matmul", mesh, required, r.outputs)
        assert verdict.sound, (inputs, verdict)
        if r.outputs[0].partial:  # the same claim without the partial sum is wrong
            wrong = spmdkit.DistAttr(r.outputs[0].dims_mapping)
            bad = spmdkit.check_claim("matmul", mesh, required, [wrong])
            assert bad.verdict == "UNSOUND" and bad.counterexample["message"], bad
            unsound += 1
    assert unsound > 3


def test_explain_names_the_op_and_the_answer():
    mesh = spmdkit.Mesh([2, 3])
    text = spmdkit.explain("matmul", mesh, [([64, 32], [1, 0]), ([32, 48], [-1, -1])])
    r = spmdkit.infer("matmul", mesh, [([64, 32], [1, 0]), ([32, 48], [-1, -1])])
    assert text.startswith("op         matmul on ")
    assert f"output     0 {r.outputs[0].placements(mesh)}" in text


def test_ops_lists_the_registry():
    assert {"matmul", "relu", "softmax", "reshape"} <= OPS
    for op in OPS:
        assert spmdkit.infer_json(json.dumps({"op": op, "mesh_shape": [2]})).find("UnknownOp") < 0
