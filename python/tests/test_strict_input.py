"""Input the CLI refuses is refused here too, naming the field: a misspelt key of a tensor
dict (it used to leave the tensor replicated without a word), a placements string whose
count does not match the mesh (it used to be padded with R or cut short), and JSON lines
over the depth limit."""

import json
import random

import pytest

import spmdkit

SEEDS = range(30)
TENSOR_KEYS = ["shape", "dims_mapping", "placements", "partial_dims", "partial"]


def misspellings(key, rng):
    """A few misspellings of `key`: a letter dropped, two letters swapped, one doubled."""
    out = set()
    for _ in range(6):
        i = rng.randrange(len(key))
        out.add(key[:i] + key[i + 1:])
        if i + 1 < len(key):
            out.add(key[:i] + key[i + 1] + key[i] + key[i + 2:])
        out.add(key[:i] + key[i] + key[i:])
    return sorted(k for k in out if k not in TENSOR_KEYS and k)


def valid_tensor(rng, ndim):
    shape = [rng.choice([4, 6, 12]), rng.choice([4, 6, 12])]
    axes = list(range(ndim)) + [-1, -1]
    mapping = [rng.choice(axes), -1]
    return {"shape": shape, "dims_mapping": mapping}


@pytest.mark.parametrize("key", ["dims_mapping", "partial", "partial_dims", "placements", "shape"])
def test_a_misspelt_tensor_key_is_named(key):
    for seed in SEEDS:
        rng = random.Random(seed)
        ndim = rng.choice([1, 2])
        mesh = [2] * ndim
        x = valid_tensor(rng, ndim)
        spmdkit.infer("add", mesh, [x, dict(x)])  # the valid request is answered
        for wrong in misspellings(key, rng):
            bad = dict(x)
            bad[wrong] = bad.pop(key) if key in bad else [0]
            with pytest.raises(spmdkit.InvalidArgument) as info:
                spmdkit.infer("add", mesh, [dict(x), bad])
            assert info.value.field == f"inputs[1].{wrong}", (seed, str(info.value))
            assert "unknown key" in str(info.value)
            # The JSON path says the same.
            line = json.dumps({"op": "add", "mesh_shape": mesh, "inputs": [dict(x), bad]})
            answer = json.loads(spmdkit.infer_json(line))
            assert answer["error"]["message"].startswith(f"inputs[1].{wrong}: unknown key"), answer


def test_misspelt_keys_in_claims_explain_and_reverse_outputs():
    with pytest.raises(spmdkit.InvalidArgument) as info:
        spmdkit.check_claim("relu", [2], [([4], [0])], [{"dims_mappin": [0]}])
    assert info.value.field == "claim_outputs[0].dims_mappin"
    with pytest.raises(spmdkit.InvalidArgument) as info:
        spmdkit.explain("relu", [2], [{"shape": [4], "partail": {0: "sum"}}])
    assert info.value.field == "inputs[0].partail"
    with pytest.raises(spmdkit.InvalidArgument) as info:
        spmdkit.infer("relu", [2], [[4]], outputs=[{"shape": [4], "dims_mapin": [0]}], direction="reverse")
    assert info.value.field == "outputs[0].dims_mapin"


def test_a_placements_count_that_is_not_the_mesh_is_refused():
    for seed in SEEDS:
        rng = random.Random(seed)
        ndim = rng.choice([1, 2, 3])
        mesh = [2] * ndim
        shape = [8, 8]
        good = "[" + ", ".join(["R"] * ndim) + "]"
        spmdkit.infer("relu", mesh, [(shape, good)])
        for count in (c for c in (ndim - 1, ndim + 1) if c >= 1):
            text = "[" + ", ".join(["R"] * count) + "]"
            for inputs in ([(shape, text)], [{"shape": shape, "placements": text}]):
                with pytest.raises(spmdkit.InvalidArgument) as info:
                    spmdkit.infer("relu", mesh, inputs)
                assert info.value.field == "inputs[0].placements", (seed, text, str(info.value))
                assert f"for a mesh of {ndim} axis/axes" in str(info.value)
            with pytest.raises(spmdkit.InvalidArgument) as info:
                spmdkit.plan(mesh, shape, text, good)
            assert info.value.field == "src.placements"
            with pytest.raises(spmdkit.InvalidArgument) as info:
                spmdkit.plan(mesh, shape, good, text)
            assert info.value.field == "dst.placements"
            with pytest.raises(spmdkit.InvalidArgument) as info:
                spmdkit.check_claim("relu", mesh, [(shape, good)], [text])
            assert info.value.field == "claim_outputs[0].placements"


def test_a_line_nested_too_deep_is_an_error_naming_the_limit():
    answer = json.loads(spmdkit.infer_json("[" * 100000))
    assert answer["error"]["type"] == "InvalidArgument"
    assert answer["error"]["message"].startswith("line: lists and objects nest deeper than 64")
