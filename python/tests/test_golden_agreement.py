"""spmdkit.infer (the direct C++ path) answers every rule golden line exactly as `spmd infer`
(the JSON path, spmdkit.infer_json = io::InferLine): the same dist attrs, or the same error
type with the same field."""

import json

import spmdkit

GOLDEN_ONLY = ("name", "why", "expect")


def call_infer(request):
    """spmdkit.infer with the request's fields as Python values (tensors as dicts)."""
    mesh_shape = request.get("mesh_shape")
    if isinstance(mesh_shape, list) and ("process_ids" in request or "axis_names" in request):
        mesh = spmdkit.Mesh(mesh_shape, request.get("process_ids"), request.get("axis_names"))
    else:
        mesh = mesh_shape
    return spmdkit.infer(request.get("op"), mesh, request.get("inputs", []), request.get("attrs"),
                         request.get("outputs") if request.get("direction") == "reverse" else None,
                         request.get("direction"))


def field_of(message):
    return message.split(": ", 1)[0]


def test_every_golden_line_agrees_with_the_json_path(golden):
    compared = errors = 0
    mismatches = []
    for where, obj, _ in golden:
        if not isinstance(obj, dict) or not isinstance(obj.get("op"), str):
            continue  # not representable as a Python call (the JSON parser's own cases)
        request = {k: v for k, v in obj.items() if k not in GOLDEN_ONLY}
        want = json.loads(spmdkit.infer_json(json.dumps(request)))
        try:
            got = call_infer(request).to_dict()
        except spmdkit.SpmdError as e:
            got = {"error": {"type": type(e).__name__, "field": e.field}}
            assert str(e).startswith(e.field + ": "), (where, str(e))
        if "error" in want:
            errors += 1
            want = {"error": {"type": want["error"]["type"], "field": field_of(want["error"]["message"])}}
        compared += 1
        if got != want:
            mismatches.append((where, want, got))
    assert not mismatches, f"{len(mismatches)} of {compared} differ, first: {mismatches[:3]}"
    assert compared > 300 and errors > 20, (compared, errors)


def test_placements_strings_give_the_dims_mapping_answers(golden):
    """The same forward requests with every input as a (shape, placements string) pair."""
    compared = 0
    for where, obj, _ in golden:
        if not isinstance(obj, dict) or obj.get("direction", "forward") != "forward" or "expect" not in obj:
            continue
        if "error" in obj["expect"]:
            continue
        request = {k: v for k, v in obj.items() if k not in GOLDEN_ONLY}
        mesh = spmdkit.Mesh(request["mesh_shape"], request.get("process_ids"), request.get("axis_names"))
        pairs = []
        for t in request["inputs"]:
            partial = {a: "sum" for a in t.get("partial_dims", [])}
            partial.update(t.get("partial", {}))
            dims = t.get("dims_mapping", [-1] * len(t["shape"]))
            pairs.append((t["shape"], spmdkit.DistAttr(dims, partial).placements(mesh)))
        by_dims = call_infer(request)
        by_placements = spmdkit.infer(request["op"], mesh, pairs, request.get("attrs"))
        assert by_placements.to_dict() == by_dims.to_dict(), (where, pairs)
        compared += 1
    assert compared > 200, compared
