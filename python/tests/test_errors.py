"""Bad input raises a typed spmdkit exception naming the field, never a crash or a silent
answer: generated corruptions of valid requests, one field at a time."""

import random

import pytest

import spmdkit

SEEDS = range(40)


def valid_matmul(rng):
    """A random valid matmul request on a 1- or 2-axis mesh: (mesh, inputs)."""
    mesh = [rng.choice([2, 3]) for _ in range(rng.choice([1, 2]))]
    m, k, n = (rng.choice([4, 6, 12]) for _ in range(3))
    axes = list(range(len(mesh))) + [-1, -1]
    x = [rng.choice(axes), rng.choice(axes)]
    if x[0] == x[1] != -1:
        x[1] = -1
    return mesh, [([m, k], x), ([k, n], [-1, -1])]


# (name, corruption of (mesh, inputs, attrs) -> the same, expected class, expected field)
CORRUPTIONS = [
    ("axis out of range", lambda m, i, a: (m, [(i[0][0], [len(m), -1]), i[1]], a),
     spmdkit.InvalidArgument, "inputs[0].dims_mapping[0]"),
    ("integer 2^64-1", lambda m, i, a: (m, [i[0], (i[1][0], [-1, 2**64 - 1])], a),
     spmdkit.InvalidArgument, "inputs[1].dims_mapping[1]"),
    ("integer -2^63-1", lambda m, i, a: (m, [i[0], (i[1][0], [-(2**63) - 1, -1])], a),
     spmdkit.InvalidArgument, "inputs[1].dims_mapping[0]"),
    ("float in a shape", lambda m, i, a: (m, [([4.0, i[0][0][1]], i[0][1]), i[1]], a),
     spmdkit.InvalidArgument, "inputs[0].shape[0]"),
    ("bool as an axis", lambda m, i, a: (m, [(i[0][0], [True, -1]), i[1]], a),
     spmdkit.InvalidArgument, "inputs[0].dims_mapping[0]"),
    ("shape of 2^64", lambda m, i, a: (m, [([2**64, i[0][0][1]], i[0][1]), i[1]], a),
     spmdkit.InvalidArgument, "inputs[0].shape[0]"),
    ("bad placements", lambda m, i, a: (m, [(i[0][0], "[S(7)" + ", R" * (len(m) - 1) + "]"), i[1]], a),
     spmdkit.InvalidArgument, "inputs[0].placements[0]"),
    ("attr of the wrong kind", lambda m, i, a: (m, i, {"trans_x": "yes"}),
     spmdkit.InvalidArgument, "attrs.trans_x"),
    ("attr 2^64", lambda m, i, a: (m, i, {"trans_x": 2**64}),
     spmdkit.InvalidArgument, "attrs.trans_x"),
    ("mesh axis of size 0", lambda m, i, a: ([0] + m[1:], i, a),
     spmdkit.InvalidArgument, "mesh_shape"),
    ("partial with a bad op", lambda m, i, a: (m, [{"shape": i[0][0], "dims_mapping": [-1, -1],
                                                    "partial": {0: "median"}}, i[1]], a),
     spmdkit.InvalidArgument, "inputs[0].partial.0"),
    ("one input missing", lambda m, i, a: (m, i[:1], a), spmdkit.InvalidArgument, "inputs"),
    ("a tensor that is a number", lambda m, i, a: (m, [i[0], 5], a),
     spmdkit.InvalidArgument, "inputs[1]"),
]


@pytest.mark.parametrize("name,corrupt,cls,field", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_a_corrupted_field_is_named(name, corrupt, cls, field):
    for seed in SEEDS:
        rng = random.Random(seed)
        mesh, inputs = valid_matmul(rng)
        spmdkit.infer("matmul", mesh, inputs)  # the valid request is answered
        bad_mesh, bad_inputs, bad_attrs = corrupt(mesh, inputs, None)
        with pytest.raises(cls) as info:
            spmdkit.infer("matmul", bad_mesh, bad_inputs, bad_attrs)
        assert info.value.field.startswith(field), (seed, str(info.value))
        assert str(info.value).startswith(info.value.field + ": ")
        assert info.value.type == cls.__name__


def test_unknown_op_and_direction():
    with pytest.raises(spmdkit.UnknownOp) as info:
        spmdkit.infer("matmull", [2], [[4]])
    assert info.value.field == "op" and "matmull" in str(info.value)
    with pytest.raises(spmdkit.InvalidArgument) as info:
        spmdkit.infer("relu", [2], [[4]], direction="sideways")
    assert info.value.field == "direction"


def test_text_that_is_not_unicode_is_named_not_echoed():
    with pytest.raises(spmdkit.InvalidArgument) as info:
        spmdkit.infer("relu", [2], [([4], "[S(0)\udc80]")])
    assert info.value.field == "inputs[0].placements"


def test_hierarchy():
    assert issubclass(spmdkit.InvalidArgument, spmdkit.SpmdError)
    assert issubclass(spmdkit.InvalidArgument, ValueError)
    assert issubclass(spmdkit.UnknownOp, LookupError)
    for cls in (spmdkit.Unsupported, spmdkit.Conflict, spmdkit.UnknownOp):
        assert issubclass(cls, spmdkit.SpmdError)


def test_plan_check_claim_and_explain_name_their_fields():
    with pytest.raises(spmdkit.InvalidArgument) as info:
        spmdkit.plan([2, 2], [4, 4], "[S(2), R]", "[R, R]")
    assert info.value.field.startswith("src")
    with pytest.raises(spmdkit.InvalidArgument) as info:
        spmdkit.plan([2, 2], [4, 4], "[R, R]", "[R, R]", dtype="float8")
    assert info.value.field == "dtype"
    with pytest.raises(spmdkit.InvalidArgument) as info:
        spmdkit.plan([1 << 20], [4], "[R]", "[R]")
    assert info.value.field == "mesh_shape"
    with pytest.raises(spmdkit.InvalidArgument) as info:
        spmdkit.check_claim("relu", [2], [([4], [0])], [[5]])
    assert info.value.field.startswith("claim_outputs[0]")
    with pytest.raises(spmdkit.InvalidArgument) as info:
        spmdkit.check_claim("relu", [2], [([-4], [0])], [[0]])
    assert info.value.field.startswith("inputs[0].shape")
    with pytest.raises(spmdkit.UnknownOp):
        spmdkit.explain("nope", [2], [[4]])
