#!/usr/bin/env python3
"""Numeric goldens for the float64 references (reference/*.cc), computed with numpy.

Writes one JSONL file per op family next to this script. Each line is one case:

  value case: {"op", "name", "attrs"[, "local"], "inputs", "outputs"}
  error case: {"op", "name", "attrs"[, "local"], "inputs", "error_field"[, "error_type"]}

A tensor is {"shape": [..], "dtype": "float64" | "float32" | "int64" | "bool",
"data": [..] (row-major)}. int64 / bool data are JSON integers; float data are written
with full precision (repr); a non-finite value is the string "inf", "-inf" or "nan".
"attrs" holds every attr the op declares (docs/OPS.md), defaults filled in, with the JSON
type of the attr kind (bool, int, float such as 1.0, string, list of ints). Cases named
localized_* also carry "local": the localized part (rules/model/attrs.h, `Localized`: "count",
"vocab_start", "exact", "offset", "global_shape"), what an op's localizer sets when one rank
runs the op on its shards; a case's attrs dict below gives it under the key "local".
error_type defaults to "InvalidArgument".

The expected values come from numpy (np.matmul, np.einsum, np.cumsum, np.logaddexp, ...),
written from docs/OPS.md and not from the C++ code. Run: python3 gen_numeric.py
"""

import json
import math
import os
from collections import defaultdict

import numpy as np

# Every declared attr of every op with its default, checked against the declarations by
# check_attr_defaults.py.
from attr_defaults import BINARY_MATH_DEFAULTS, DEFAULTS, REQUIRED, UNARY_MATH_DEFAULTS

HERE = os.path.dirname(os.path.abspath(__file__))
RNG = np.random.default_rng(20240531)


def full_attrs(op, given):
    """Every declared attr of `op`, `given` over the defaults, typed by the attr kind."""
    declared = DEFAULTS[op]
    for name in given:
        if name not in declared:
            raise KeyError(f"{op} declares no attr {name}")
    out = {}
    for name, default in declared.items():
        value = given.get(name, default)
        if value is REQUIRED:
            raise KeyError(f"{op}: attr {name} is required")
        kind = default if default is not REQUIRED else value
        if isinstance(kind, bool):
            value = bool(value)
        elif isinstance(kind, int):
            value = int(value)
        elif isinstance(kind, float):
            value = float(value)
        elif isinstance(kind, list):
            value = [int(v) for v in value]
        out[name] = value
    return out


def split_local(attrs):
    """The named attrs and the localized part (None when absent) of a case's attrs."""
    attrs = dict(attrs)
    return attrs, attrs.pop("local", None)


# ---------------------------------------------------------------- tensors and cases

def enc(v, dtype):
    if dtype in ("int64", "bool"):
        return int(v)
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


class T:
    """An array with a dtype tag (float64 unless said otherwise)."""

    def __init__(self, array, dtype="float64"):
        self.array = np.asarray(array, dtype=np.float64)
        self.dtype = dtype

    def to_json(self):
        return {"shape": [int(s) for s in self.array.shape], "dtype": self.dtype,
                "data": [enc(v, self.dtype) for v in self.array.reshape(-1)]}


def as_t(x):
    return x if isinstance(x, T) else T(x)


FAMILIES = defaultdict(list)
FAMILY_OF = {}


def family(name, ops):
    for op in ops:
        FAMILY_OF[op] = name


def case(op, name, attrs, inputs, outputs):
    attrs, local = split_local(attrs)
    line = {"op": op, "name": name, "attrs": full_attrs(op, attrs)}
    if local is not None:
        line["local"] = local
    line["inputs"] = [as_t(x).to_json() for x in inputs]
    line["outputs"] = [as_t(x).to_json() for x in outputs]
    FAMILIES[FAMILY_OF[op]].append(line)


def error(op, name, attrs, inputs, field, error_type="InvalidArgument"):
    attrs, local = split_local(attrs)
    line = {"op": op, "name": name, "attrs": full_attrs(op, attrs)}
    if local is not None:
        line["local"] = local
    line["inputs"] = [as_t(x).to_json() if not isinstance(x, dict) else x for x in inputs]
    line["error_field"] = field
    if error_type != "InvalidArgument":
        line["error_type"] = error_type
    FAMILIES[FAMILY_OF[op]].append(line)


def vals(*shape, lo=-3.0, hi=3.0):
    """Random values with two decimals."""
    return np.round(RNG.uniform(lo, hi, size=shape), 2)


def pos(*shape):
    return np.round(RNG.uniform(0.1, 3.0, size=shape), 2)


def small_ints(*shape, lo=-2, hi=3):
    """Small integral values as floats (ties for max / argmax / comparisons)."""
    return RNG.integers(lo, hi, size=shape).astype(np.float64)


def bools(*shape):
    return T(RNG.integers(0, 2, size=shape), "bool")


# ---------------------------------------------------------------- elementwise

UNARY = ["relu", "gelu", "silu", "exp", "log", "tanh", "sigmoid", "sqrt", "abs", "scale",
         "clip", "cast"]
BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "greater_than",
          "less_than"]
family("elementwise", UNARY + BINARY + ["where"])


def gelu_exact(x):
    return np.vectorize(lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))), otypes=[np.float64])(x)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


UNARY_FN = {
    "relu": lambda x: np.maximum(x, 0.0),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "sqrt": np.sqrt,
    "abs": np.abs,
}


def unary_input(op, shape):
    if op == "log":
        return pos(*shape)
    if op == "sqrt":
        x = pos(*shape)
        if x.size:
            x.reshape(-1)[0] = 0.0
        return x
    return vals(*shape)


def gen_elementwise():
    shapes = [("2x3", (2, 3)), ("0d", ()), ("empty_0x3", (0, 3)), ("size1_1x4x1", (1, 4, 1))]
    for op, fn in UNARY_FN.items():
        for label, shape in shapes:
            x = unary_input(op, shape)
            case(op, label, {}, [x], [fn(x)])
    for label, shape in shapes:
        x = vals(*shape)
        case("gelu", label, {}, [x], [gelu_exact(x)])
    for label, shape in shapes[:2]:
        x = vals(*shape)
        case("gelu", "approximate_" + label, {"approximate": True}, [x], [gelu_tanh(x)])
    error("relu", "two_inputs", {}, [vals(2), vals(2)], "inputs")
    error("exp", "data_size_mismatch",
          {}, [{"shape": [2, 3], "dtype": "float64", "data": [1.0, 2.0, 3.0, 4.0, 5.0]}],
          "inputs[0].data")

    # scale
    x = vals(2, 3)
    case("scale", "defaults", {}, [x], [x * 1.0 + 0.0])
    case("scale", "after", {"scale": 2.5, "bias": 0.5}, [x], [2.5 * x + 0.5])
    case("scale", "before", {"scale": -1.5, "bias": 0.25, "bias_after_scale": False}, [x],
         [-1.5 * (x + 0.25)])
    x0 = vals()
    case("scale", "0d", {"scale": 3.0, "bias": -1.0}, [x0], [3.0 * x0 - 1.0])

    # clip
    x = vals(3, 4)
    case("clip", "both", {"min": -1.0, "max": 1.5}, [x], [np.clip(x, -1.0, 1.5)])
    case("clip", "min_only", {"min": 0.5}, [x], [np.maximum(x, 0.5)])
    case("clip", "defaults", {}, [x], [x])
    case("clip", "min_eq_max", {"min": 0.25, "max": 0.25}, [vals(4)], [np.full(4, 0.25)])
    x0 = vals()
    case("clip", "0d", {"min": -0.5, "max": 0.5}, [x0], [np.clip(x0, -0.5, 0.5)])
    error("clip", "min_gt_max", {"min": 2.0, "max": 1.0}, [x], "attrs.min")

    # cast
    x = np.array([[0.1, -2.7, 3.5], [0.0, 1e-3, -0.0], [2.9, -0.5, 1234.5678]])
    case("cast", "float64", {}, [x], [T(x, "float64")])
    case("cast", "float32", {"dtype": "float32"}, [x],
         [T(x.astype(np.float32).astype(np.float64), "float32")])
    case("cast", "int64", {"dtype": "int64"}, [x], [T(np.trunc(x), "int64")])
    case("cast", "bool", {"dtype": "bool"}, [x], [T(x != 0, "bool")])
    ids = T(np.array([3, 0, -2]), "int64")
    case("cast", "int64_to_float64", {}, [ids], [T(ids.array, "float64")])
    case("cast", "bool_0d", {"dtype": "bool"}, [np.array(0.0)], [T(np.array(0), "bool")])
    error("cast", "unknown_dtype", {"dtype": "int8"}, [x], "attrs.dtype")

    # binary
    binary_fn = {
        "add": lambda a, b: (a + b, "float64"),
        "subtract": lambda a, b: (a - b, "float64"),
        "multiply": lambda a, b: (a * b, "float64"),
        "divide": lambda a, b: (a / b, "float64"),
        "maximum": lambda a, b: (np.maximum(a, b), "float64"),
        "minimum": lambda a, b: (np.minimum(a, b), "float64"),
        "greater_than": lambda a, b: (a > b, "bool"),
        "less_than": lambda a, b: (a < b, "bool"),
    }
    pairs = [("same_2x3", (2, 3), (2, 3)), ("broadcast_2x1x3_4x1", (2, 1, 3), (4, 1)),
             ("0d_and_3", (), (3,)), ("3_and_0d", (3,), ()), ("empty_0x3_1x3", (0, 3), (1, 3)),
             ("0d_0d", (), ())]
    for op, fn in binary_fn.items():
        for label, sx, sy in pairs:
            if op in ("maximum", "minimum", "greater_than", "less_than"):
                a, b = small_ints(*sx), small_ints(*sy)  # ties included
            else:
                a = vals(*sx)
                b = vals(*sy)
                if op == "divide":
                    b = pos(*sy) * np.where(RNG.integers(0, 2, size=sy) == 0, -1.0, 1.0)
            out, dtype = fn(a, b)
            case(op, label, {}, [a, b], [T(out, dtype)])
        error(op, "not_broadcastable", {}, [vals(2, 3), vals(4)], "inputs[1].shape")

    # where
    for label, sc, sx, sy in [("same_2x3", (2, 3), (2, 3), (2, 3)),
                              ("broadcast", (2, 1), (3,), ()),
                              ("0d_condition", (), (2,), (2,)),
                              ("empty", (0, 1), (0, 2), (2,))]:
        c, a, b = bools(*sc), vals(*sx), vals(*sy)
        case("where", label, {}, [c, a, b], [np.where(c.array != 0, a, b)])
    c = T(np.array([[1.0, 0.0, 2.5]]), "float64")  # a float condition: != 0 is true
    a, b = vals(2, 3), vals(2, 3)
    case("where", "float_condition", {}, [c, a, b], [np.where(c.array != 0, a, b)])
    error("where", "not_broadcastable", {}, [bools(2), vals(3), vals(3)], "inputs[1].shape")
    error("where", "two_inputs", {}, [bools(2), vals(2)], "inputs")


# ---------------------------------------------------------------- contractions

family("contraction", ["matmul", "bmm", "einsum", "matmul_grad"])


def swap(a):
    return np.swapaxes(a, -1, -2)


def np_matmul(x, y, trans_x, trans_y):
    xx = swap(x) if trans_x and x.ndim >= 2 else x
    yy = swap(y) if trans_y and y.ndim >= 2 else y
    return np.matmul(xx, yy)


def unbroadcast(g, shape):
    """Sums g down to `shape` (the inverse of broadcasting)."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for d, s in enumerate(shape):
        if s == 1 and g.shape[d] != 1:
            g = g.sum(axis=d, keepdims=True)
    return g


def np_matmul_grad(x, y, og, trans_x, trans_y):
    # Effective operands X [.., m, k], Y [.., k, n] and out_grad G [.., m, n].
    if x.ndim == 1:
        X = x[None, :]
    else:
        X = swap(x) if trans_x else x
    if y.ndim == 1:
        Y = y[:, None]
    else:
        Y = swap(y) if trans_y else y
    G = og
    if y.ndim == 1:
        G = G[..., None]
    if x.ndim == 1:
        G = G[..., None, :]
    dX = np.matmul(G, swap(Y))
    dY = np.matmul(swap(X), G)
    dX = unbroadcast(dX, X.shape)
    dY = unbroadcast(dY, Y.shape)
    if x.ndim >= 2 and trans_x:
        dX = swap(dX)
    if y.ndim >= 2 and trans_y:
        dY = swap(dY)
    return dX.reshape(x.shape), dY.reshape(y.shape)


MATMUL_CASES = [
    ("2x3_3x4", (2, 3), (3, 4), False, False),
    ("trans_x", (3, 2), (3, 4), True, False),
    ("trans_y", (2, 3), (4, 3), False, True),
    ("trans_both", (3, 2), (4, 3), True, True),
    ("x_1d", (3,), (3, 4), False, False),
    ("y_1d", (2, 3), (3,), False, False),
    ("both_1d", (3,), (3,), False, False),
    ("x_1d_trans_flags_ignored", (3,), (4, 3), True, True),
    ("batch_broadcast", (2, 1, 2, 3), (5, 3, 4), False, False),
    ("batch_broadcast_trans", (1, 3, 2), (4, 4, 3), True, True),
    ("x_1d_batched_y", (3,), (2, 3, 4), False, False),
    ("batched_x_y_1d", (2, 2, 3), (3,), False, False),
    ("size1_dims", (1, 1), (1, 1), False, False),
    ("k0", (2, 0), (0, 3), False, False),
]


def gen_contraction():
    for label, sx, sy, tx, ty in MATMUL_CASES:
        x, y = vals(*sx), vals(*sy)
        attrs = {"trans_x": tx, "trans_y": ty}
        case("matmul", label, attrs, [x, y], [np_matmul(x, y, tx, ty)])
    error("matmul", "k_mismatch", {}, [vals(2, 3), vals(4, 2)], "inputs[1].shape")
    error("matmul", "k_mismatch_trans", {"trans_x": True}, [vals(2, 3), vals(3, 4)],
          "inputs[1].shape")
    error("matmul", "x_0d", {}, [vals(), vals(3)], "inputs[0].shape")
    error("matmul", "batch_mismatch", {}, [vals(2, 2, 3), vals(3, 3, 4)], "inputs[1].shape")

    for label, sx, sy in [("2x3x4_2x4x5", (2, 3, 4), (2, 4, 5)), ("ones", (1, 1, 1), (1, 1, 2)),
                          ("m0", (3, 0, 2), (3, 2, 2)), ("k0", (2, 2, 0), (2, 0, 3))]:
        x, y = vals(*sx), vals(*sy)
        case("bmm", label, {}, [x, y], [np.matmul(x, y)])
    error("bmm", "rank2", {}, [vals(3, 4), vals(4, 5)], "inputs[0].shape")
    error("bmm", "batch_mismatch", {}, [vals(2, 3, 4), vals(3, 4, 5)], "inputs[1].shape")
    error("bmm", "k_mismatch", {}, [vals(2, 3, 4), vals(2, 3, 5)], "inputs[1].shape")

    einsums = [
        ("matmul", "ij,jk->ik", [(2, 3), (3, 4)]),
        ("transpose", "ij->ji", [(2, 3)]),
        ("implicit_matmul", "ij,jk", [(2, 3), (3, 4)]),
        ("implicit_sorted", "ba", [(2, 3)]),
        ("implicit_upper_first", "Ab,bc", [(2, 3), (3, 4)]),
        ("batch_matmul", "bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
        ("dot_0d", "i,i->", [(4,), (4,)]),
        ("outer", "i,j->ij", [(2,), (3,)]),
        ("sum_all", "ij->", [(2, 3)]),
        ("three_operands", "ij,jk,kl->il", [(2, 3), (3, 2), (2, 2)]),
        ("scalar_operand", "i,->i", [(3,), ()]),
        ("identity_0d", "->", [()]),
        ("empty_contraction", "ij,jk->ik", [(2, 0), (0, 3)]),
        ("permute_3d", "ijk->kji", [(2, 3, 4)]),
        ("keep_summed_free", "ij,j->i", [(3, 2), (2,)]),
        ("size1", "ab,bc->ac", [(1, 1), (1, 2)]),
    ]
    for label, eq, shapes in einsums:
        ops = [vals(*s) for s in shapes]
        case("einsum", label, {"equation": eq}, ops, [np.asarray(np.einsum(eq, *ops))])
    error("einsum", "diagonal", {"equation": "ii->i"}, [vals(3, 3)], "attrs.equation",
          "Unsupported")
    xe = vals(2, 2, 3)
    case("einsum", "ellipsis", {"equation": "...ij->...ji"}, [xe],
         [np.asarray(np.einsum("...ij->...ji", xe))])
    error("einsum", "operand_count", {"equation": "ij,jk->ik"}, [vals(2, 3)], "attrs.equation")
    error("einsum", "size_mismatch", {"equation": "ij,jk->ik"}, [vals(2, 3), vals(4, 2)],
          "inputs[1].shape")
    error("einsum", "rank_mismatch", {"equation": "ijk->i"}, [vals(2, 3)], "inputs[0].shape")
    error("einsum", "unknown_output_letter", {"equation": "ij->k"}, [vals(2, 3)],
          "attrs.equation")
    error("einsum", "repeated_output_letter", {"equation": "ij->ii"}, [vals(2, 3)],
          "attrs.equation")
    error("einsum", "bad_character", {"equation": "i#j->ij"}, [vals(2, 3)], "attrs.equation")
    # Spaces are ignored (as numpy and Paddle do); a '.' outside an ellipsis is a bad
    # character, not an ellipsis. Literal inputs: these cases draw nothing from RNG.
    sx = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    sy = np.array([[1.0, -1.0], [0.5, 2.0], [-2.0, 0.25]])
    case("einsum", "spaces", {"equation": " ij, jk -> ik "}, [sx, sy],
         [np.asarray(np.einsum("ij,jk->ik", sx, sy))])
    error("einsum", "lone_dot", {"equation": "i.j->ij"}, [sx], "attrs.equation")

    grads = [c for c in MATMUL_CASES if c[0] not in ("k0",)] + [
        ("y_2d_batched_x", (2, 2, 3), (3, 4), False, False)]
    for label, sx, sy, tx, ty in grads:
        x, y = vals(*sx), vals(*sy)
        out = np_matmul(x, y, tx, ty)
        og = vals(*out.shape)
        xg, yg = np_matmul_grad(x, y, og, tx, ty)
        case("matmul_grad", label, {"trans_x": tx, "trans_y": ty}, [x, y, og], [xg, yg])
    error("matmul_grad", "out_grad_shape", {}, [vals(2, 3), vals(3, 4), vals(2, 3)],
          "inputs[2].shape")
    error("matmul_grad", "k_mismatch", {}, [vals(2, 3), vals(2, 4), vals(2, 4)],
          "inputs[1].shape")


# ---------------------------------------------------------------- reductions

REDUCE_OPS = ["sum", "mean", "max", "min", "prod", "any", "all"]
family("reduction", REDUCE_OPS + ["squared_l2_norm", "mean_all", "logsumexp", "p_norm",
                                  "argmax", "cumsum"])


def np_reduce(op, x, axis, keep):
    """axis: a tuple of dims (already normalised)."""
    if op == "sum":
        return np.sum(x, axis=axis, keepdims=keep), "float64"
    if op == "mean":
        return np.mean(x, axis=axis, keepdims=keep), "float64"
    if op == "max":
        return np.max(x, axis=axis, keepdims=keep, initial=-np.inf), "float64"
    if op == "min":
        return np.min(x, axis=axis, keepdims=keep, initial=np.inf), "float64"
    if op == "prod":
        return np.prod(x, axis=axis, keepdims=keep), "float64"
    if op == "any":
        return np.any(x != 0, axis=axis, keepdims=keep), "bool"
    if op == "all":
        return np.all(x != 0, axis=axis, keepdims=keep), "bool"
    if op == "squared_l2_norm":
        return np.sum(x * x, axis=axis, keepdims=keep), "float64"
    if op == "logsumexp":
        if x.ndim == 0:
            return x.copy(), "float64"
        return np.logaddexp.reduce(x, axis=axis, keepdims=keep), "float64"
    raise KeyError(op)


def reduce_input(op, shape):
    if op in ("any", "all"):
        x = small_ints(*shape, lo=0, hi=3)  # about a third zeros
        return x
    if op == "prod":
        return np.round(RNG.uniform(0.5, 1.5, size=shape), 2) * np.where(
            RNG.integers(0, 4, size=shape) == 0, -1.0, 1.0)
    return vals(*shape)


def gen_reduction():
    keep_name = {op: "keep_dim" for op in REDUCE_OPS + ["squared_l2_norm"]}
    keep_name["logsumexp"] = "keepdim"
    for op in REDUCE_OPS + ["squared_l2_norm", "logsumexp"]:
        kn = keep_name[op]
        x = reduce_input(op, (2, 3, 4))
        variants = [
            ("all_dims_default", {}, (0, 1, 2), False),
            ("axis1", {"axis": [1]}, (1,), False),
            ("neg_axes_keep", {"axis": [-1, 0], kn: True}, (0, 2), True),
            ("keep_all", {kn: True}, (0, 1, 2), True),
        ]
        if op != "squared_l2_norm":
            variants.append(("reduce_all_overrides_axis", {"axis": [1], "reduce_all": True},
                             (0, 1, 2), False))
        for label, attrs, axes, keep in variants:
            out, dtype = np_reduce(op, x, axes, keep)
            case(op, label, attrs, [x], [T(out, dtype)])
        x0 = reduce_input(op, ())
        out, dtype = np_reduce(op, x0, (), False)
        case(op, "0d", {}, [x0], [T(out, dtype)])
        # Paddle's 0-d convention: axis 0 / -1 names the one element; the output stays 0-d.
        case(op, "0d_axis_minus1_keep", {"axis": [-1], kn: True}, [x0], [T(out, dtype)])
        x1 = reduce_input(op, (1, 3))
        out, dtype = np_reduce(op, x1, (0,), False)
        case(op, "size1_axis0", {"axis": [0]}, [x1], [T(out, dtype)])
        xe = reduce_input(op, (0, 3))
        out, dtype = np_reduce(op, xe, (1,), False)
        case(op, "empty_keep_rows", {"axis": [1]}, [xe], [T(out, dtype)])
        if op == "mean":
            error(op, "empty_set", {"axis": [0]}, [xe], "inputs[0].shape")
        else:
            with np.errstate(divide="ignore"):
                out, dtype = np_reduce(op, xe, (0,), False)
            case(op, "empty_set_identity", {"axis": [0]}, [xe], [T(out, dtype)])
        error(op, "axis_out_of_range", {"axis": [3]}, [x], "attrs.axis")
        error(op, "duplicate_axis", {"axis": [1, -2]}, [x], "attrs.axis")

    # Localized mean (D7): a shard divides its local sum by the global count.
    x = vals(2, 3)
    case("mean", "localized_count", {"axis": [1], "local": {"count": 6}}, [x], [np.sum(x, axis=1) / 6.0])
    case("mean", "localized_empty_shard", {"axis": [0], "local": {"count": 4}}, [vals(0, 3)],
         [np.zeros(3)])
    error("mean", "localized_zero_count", {"axis": [1], "local": {"count": 0}}, [vals(2, 0)],
          "inputs[0].shape")
    case("mean_all", "localized_count", {"local": {"count": 10}}, [x], [np.array(np.sum(x) / 10.0)])
    case("mean_all", "localized_empty_shard", {"local": {"count": 10}}, [vals(0, 3)], [np.array(0.0)])

    x = T(bools(2, 3).array, "bool")
    case("any", "bool_input", {"axis": [0]}, [x], [T(np.any(x.array != 0, axis=0), "bool")])
    x = np.array([[1000.0, 1001.0, -1000.0], [-5.0, -7.0, -6.0]])
    case("logsumexp", "large_values", {"axis": [1]}, [x],
         [np.logaddexp.reduce(x, axis=1)])

    # mean_all
    for label, shape in [("2x3", (2, 3)), ("0d", ()), ("1x1x5", (1, 1, 5))]:
        x = vals(*shape)
        case("mean_all", label, {}, [x], [np.array(np.mean(x))])
    error("mean_all", "empty", {}, [vals(0, 3)], "inputs[0].shape")

    # p_norm
    def pn(x, p, axis, keep):
        return np.sum(np.abs(x) ** p, axis=axis, keepdims=keep) ** (1.0 / p)

    x = vals(3, 4)
    case("p_norm", "default_l2_last_axis", {}, [x], [pn(x, 2.0, -1, False)])
    case("p_norm", "l1_axis0_keepdim", {"porder": 1.0, "axis": 0, "keepdim": True}, [x],
         [pn(x, 1.0, 0, True)])
    case("p_norm", "p3", {"porder": 3.0, "axis": 1}, [x], [pn(x, 3.0, 1, False)])
    case("p_norm", "p_half", {"porder": 0.5, "axis": -2}, [x], [pn(x, 0.5, 0, False)])
    xn = pos(2, 3)
    case("p_norm", "p_negative", {"porder": -1.5}, [xn], [pn(xn, -1.5, 1, False)])
    case("p_norm", "asvector", {"asvector": True, "porder": 2.0}, [x],
         [pn(x, 2.0, None, False)])
    case("p_norm", "asvector_keepdim", {"asvector": True, "keepdim": True}, [x],
         [pn(x, 2.0, None, True)])
    x3 = vals(2, 3, 2)
    case("p_norm", "3d_axis1_epsilon", {"axis": 1, "epsilon": 1e-6}, [x3],
         [pn(x3, 2.0, 1, False)])
    x0 = vals()
    case("p_norm", "0d", {}, [x0], [np.array(abs(float(x0)))])
    xe = vals(2, 0)
    case("p_norm", "empty_axis", {}, [xe], [pn(xe, 2.0, -1, False)])
    error("p_norm", "porder_zero", {"porder": 0.0}, [x], "attrs.porder")
    error("p_norm", "axis_out_of_range", {"axis": 2}, [x], "attrs.axis")

    # argmax (first maximum; small integers give ties)
    x = small_ints(3, 4)
    x[0, :] = [2.0, 1.0, 2.0, 0.0]
    case("argmax", "last_axis", {}, [x], [T(np.argmax(x, axis=-1), "int64")])
    case("argmax", "axis0_keepdims", {"axis": 0, "keepdims": True}, [x],
         [T(np.argmax(x, axis=0, keepdims=True), "int64")])
    # flatten without keepdims: Paddle's rule's rank-1 [1]
    case("argmax", "flatten", {"flatten": True}, [x], [T(np.array([np.argmax(x)]), "int64")])
    case("argmax", "flatten_keepdims", {"flatten": True, "keepdims": True}, [x],
         [T(np.argmax(x).reshape(1, 1), "int64")])
    x3 = small_ints(2, 3, 2)
    case("argmax", "3d_axis1", {"axis": 1}, [x3], [T(np.argmax(x3, axis=1), "int64")])
    x0 = vals()
    case("argmax", "0d", {}, [x0], [T(np.array(0), "int64")])
    case("argmax", "empty_rows", {"axis": 1}, [vals(0, 3)],
         [T(np.zeros((0,)), "int64")])
    error("argmax", "dtype_int32", {"dtype": "int32"}, [x], "attrs.dtype")
    error("argmax", "axis_out_of_range", {"axis": 2}, [x], "attrs.axis")
    error("argmax", "empty_axis", {"axis": 0}, [vals(0, 3)], "inputs[0].shape")

    # cumsum
    def exclusive(x, axis):
        c = np.cumsum(x, axis=axis)
        shifted = np.zeros_like(c)
        idx = [slice(None)] * x.ndim
        src = [slice(None)] * x.ndim
        idx[axis] = slice(1, None)
        src[axis] = slice(0, -1)
        shifted[tuple(idx)] = c[tuple(src)]
        return shifted

    def rev(fn, x, axis):
        return np.flip(fn(np.flip(x, axis), axis), axis)

    x = vals(3, 4)
    case("cumsum", "last_axis", {}, [x], [np.cumsum(x, axis=-1)])
    case("cumsum", "axis0", {"axis": 0}, [x], [np.cumsum(x, axis=0)])
    case("cumsum", "flatten", {"flatten": True, "axis": 0}, [x], [np.cumsum(x)])
    case("cumsum", "exclusive", {"exclusive": True}, [x], [exclusive(x, 1)])
    case("cumsum", "reverse", {"reverse": True, "axis": -2}, [x],
         [rev(lambda a, ax: np.cumsum(a, axis=ax), x, 0)])
    case("cumsum", "exclusive_reverse", {"exclusive": True, "reverse": True}, [x],
         [rev(exclusive, x, 1)])
    x0 = vals()
    case("cumsum", "0d", {}, [x0], [x0])
    case("cumsum", "0d_flatten", {"flatten": True}, [x0], [x0.reshape(1)])
    xe = vals(0, 3)
    case("cumsum", "empty", {"axis": 0}, [xe], [xe])
    x3 = vals(2, 1, 3)
    case("cumsum", "size1_axis", {"axis": 1}, [x3], [np.cumsum(x3, axis=1)])
    error("cumsum", "axis_out_of_range", {"axis": -3}, [x], "attrs.axis")


# ---------------------------------------------------------------- normalisation

family("norm", ["softmax", "log_softmax", "softmax_grad", "layer_norm", "rms_norm",
                "lookup_table_v2", "cross_entropy_with_softmax"])


def np_softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def np_log_softmax(x, axis):
    return x - np.logaddexp.reduce(x, axis=axis, keepdims=True)


def gen_norm():
    for op, fn in [("softmax", np_softmax), ("log_softmax", np_log_softmax)]:
        x = vals(2, 3)
        case(op, "last_axis", {}, [x], [fn(x, -1)])
        case(op, "axis0", {"axis": 0}, [x], [fn(x, 0)])
        x3 = vals(2, 3, 4)
        case(op, "3d_axis1", {"axis": 1}, [x3], [fn(x3, 1)])
        case(op, "3d_axis_minus3", {"axis": -3}, [x3], [fn(x3, 0)])
        x1 = vals(3, 1)
        case(op, "size1_axis", {}, [x1], [fn(x1, -1)])
        big = np.array([[1000.0, 999.0, -1000.0], [0.5, 0.25, 0.0]])
        case(op, "large_values", {}, [big], [fn(big, -1)])
        x0 = vals()
        case(op, "0d", {}, [x0], [np.array(1.0 if op == "softmax" else 0.0)])
        xe = vals(0, 3)
        case(op, "empty_rows", {}, [xe], [xe])
        error(op, "axis_out_of_range", {"axis": 2}, [x], "attrs.axis")

    for label, shape, axis in [("last_axis", (2, 3), -1), ("axis0", (3, 2), 0),
                               ("3d_axis1", (2, 3, 2), 1), ("0d", (), -1)]:
        out = np_softmax(vals(*shape), axis) if shape else np.array(1.0)
        og = vals(*shape)
        expect = out * (og - np.sum(og * out, axis=axis if shape else None,
                                    keepdims=bool(shape)))
        case("softmax_grad", label, {"axis": axis}, [out, og], [expect])
    error("softmax_grad", "shape_mismatch", {}, [vals(2, 3), vals(3, 2)], "inputs[1].shape")

    # layer_norm / rms_norm: stats over dims >= begin, stats shape x.shape[:begin]
    def ln(x, scale, bias, eps, begin):
        axes = tuple(range(begin, x.ndim))
        mean = np.mean(x, axis=axes)
        var = np.var(x, axis=axes)
        mk = np.mean(x, axis=axes, keepdims=True)
        vk = np.var(x, axis=axes, keepdims=True)
        norm_shape = x.shape[begin:]
        out = (x - mk) / np.sqrt(vk + eps) * scale.reshape(norm_shape) + bias.reshape(norm_shape)
        return out, mean, var

    def rms(x, scale, eps, begin):
        axes = tuple(range(begin, x.ndim))
        ms = np.mean(x * x, axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(ms + eps)
        norm_shape = x.shape[begin:]
        return x * inv * scale.reshape(norm_shape), inv.reshape(x.shape[:begin])

    for label, shape, begin, attrs in [
            ("default_begin1", (2, 3, 4), 1, {}),
            ("begin2", (2, 3, 4), 2, {"begin_norm_axis": 2}),
            ("begin_minus1_eps", (3, 4), 1, {"begin_norm_axis": -1, "epsilon": 1e-3}),
            ("begin0", (2, 3), 0, {"begin_norm_axis": 0}),
            ("empty_outer", (0, 4), 1, {}),
            ("size1", (2, 1), 1, {})]:
        x = vals(*shape)
        n = int(np.prod(shape[begin:]))
        scale, bias = vals(n), vals(n)
        eps = attrs.get("epsilon", 1e-5)
        out, mean, var = ln(x, scale, bias, eps, begin)
        case("layer_norm", label, attrs, [x, scale, bias], [out, mean, var])
        eps = attrs.get("epsilon", 1e-6)
        out, inv = rms(x, scale, eps, begin)
        case("rms_norm", label, attrs, [x, scale], [out, inv])
    x = vals(2, 3)
    error("layer_norm", "scale_shape", {}, [x, vals(2), vals(3)], "inputs[1].shape")
    error("layer_norm", "bias_shape", {}, [x, vals(3), vals(1, 3)], "inputs[2].shape")
    error("layer_norm", "begin_out_of_range", {"begin_norm_axis": 2}, [x, vals(1), vals(1)],
          "attrs.begin_norm_axis")
    error("layer_norm", "empty_norm_set", {}, [vals(2, 0), vals(0), vals(0)], "inputs[0].shape")
    error("rms_norm", "scale_shape", {}, [x, vals(2)], "inputs[1].shape")
    error("rms_norm", "begin_out_of_range", {"begin_norm_axis": -3}, [x, vals(6)],
          "attrs.begin_norm_axis")

    # lookup_table_v2
    weight = vals(5, 4)
    ids = np.array([[0, 3, 4], [3, 1, 2]])
    case("lookup_table_v2", "2d_ids", {}, [T(ids, "int64"), weight], [weight[ids]])
    padded = weight[ids].copy()
    padded[ids == 3] = 0.0
    case("lookup_table_v2", "padding_idx", {"padding_idx": 3, "sparse": True},
         [T(ids, "int64"), weight], [padded])
    case("lookup_table_v2", "0d_id", {}, [T(np.array(2), "int64"), weight], [weight[2]])
    case("lookup_table_v2", "empty_ids", {}, [T(np.zeros((0,)), "int64"), weight],
         [np.zeros((0, 4))])
    case("lookup_table_v2", "padding_idx_0", {"padding_idx": 0},
         [T(np.array([0, 1]), "int64"), weight], [np.stack([np.zeros(4), weight[1]])])
    # Localized: the weight shard holds global rows [2, 5); other ids read zeros.
    shard = vals(3, 4)
    ids = np.array([[0, 3, 4], [2, 6, 1]])
    expect = np.zeros((2, 3, 4))
    for (i, j), v in np.ndenumerate(ids):
        if 2 <= v < 5:
            expect[i, j] = shard[v - 2]
    case("lookup_table_v2", "localized_vocab_start", {"local": {"vocab_start": 2}},
         [T(ids, "int64"), shard], [expect])
    error("lookup_table_v2", "id_too_large", {}, [T(np.array([1, 5]), "int64"), weight],
          "inputs[0].data")
    error("lookup_table_v2", "id_negative", {}, [T(np.array([-1]), "int64"), weight],
          "inputs[0].data")
    error("lookup_table_v2", "weight_1d", {}, [T(np.array([0]), "int64"), vals(5)],
          "inputs[1].shape")

    # cross_entropy_with_softmax
    def hard(logits, label, axis, ignore_index=-100, use_softmax=True):
        sm = np_softmax(logits, axis) if use_softmax else logits
        logp = np_log_softmax(logits, axis) if use_softmax else np.log(logits)
        safe = np.where(label == ignore_index, 0, label).astype(np.int64)
        loss = -np.take_along_axis(logp, safe, axis=axis)
        loss = np.where(label == ignore_index, 0.0, loss)
        return sm, loss

    logits = vals(4, 5)
    label = np.array([[0], [4], [2], [2]])
    sm, loss = hard(logits, label, -1)
    case("cross_entropy_with_softmax", "hard_label", {}, [logits, T(label, "int64")],
         [sm, loss])
    label = np.array([[0], [-100], [2], [1]])
    sm, loss = hard(logits, label, -1)
    case("cross_entropy_with_softmax", "ignore_index_default", {},
         [logits, T(label, "int64")], [sm, loss])
    label = np.array([[3], [1], [3], [0]])
    sm, loss = hard(logits, label, -1, ignore_index=3)
    case("cross_entropy_with_softmax", "ignore_index_3", {"ignore_index": 3},
         [logits, T(label, "int64")], [sm, loss])
    logits0 = vals(3, 2)
    label0 = np.array([[2, 0]])
    sm, loss = hard(logits0, label0, 0)
    case("cross_entropy_with_softmax", "axis0", {"axis": 0}, [logits0, T(label0, "int64")],
         [sm, loss])
    logits3 = vals(2, 3, 2)
    label3 = np.array([[[1, 0]], [[2, 2]]])
    sm, loss = hard(logits3, label3, 1)
    case("cross_entropy_with_softmax", "3d_axis1", {"axis": 1},
         [logits3, T(label3, "int64")], [sm, loss])
    probs = np_softmax(vals(3, 4), -1)
    labelp = np.array([[1], [0], [3]])
    sm, loss = hard(probs, labelp, -1, use_softmax=False)
    case("cross_entropy_with_softmax", "no_softmax", {"use_softmax": False,
                                                      "numeric_stable_mode": False},
         [probs, T(labelp, "int64")], [sm, loss])
    soft = np_softmax(vals(3, 4), -1)
    logits = vals(3, 4)
    loss = -np.sum(soft * np_log_softmax(logits, -1), axis=-1, keepdims=True)
    case("cross_entropy_with_softmax", "soft_label", {"soft_label": True},
         [logits, soft], [np_softmax(logits, -1), loss])
    soft0 = np_softmax(vals(3, 2), 0)
    logits = vals(3, 2)
    loss = -np.sum(soft0 * np_log_softmax(logits, 0), axis=0, keepdims=True)
    case("cross_entropy_with_softmax", "soft_label_axis0", {"soft_label": True, "axis": 0},
         [logits, soft0], [np_softmax(logits, 0), loss])
    logits = vals(4, 5)
    error("cross_entropy_with_softmax", "label_out_of_range", {},
          [logits, T(np.array([[0], [5], [1], [1]]), "int64")], "inputs[1].data")
    error("cross_entropy_with_softmax", "label_shape", {},
          [logits, T(np.array([0, 1, 2, 3]), "int64")], "inputs[1].shape")
    error("cross_entropy_with_softmax", "soft_label_shape", {"soft_label": True},
          [logits, vals(4, 1)], "inputs[1].shape")
    error("cross_entropy_with_softmax", "axis_out_of_range", {"axis": 2},
          [logits, T(np.zeros((4, 1)), "int64")], "attrs.axis")


# ---------------------------------------------------------------- shape ops

family("shape", ["reshape", "flatten", "squeeze", "unsqueeze", "transpose", "split",
                 "split_with_num", "unbind", "concat", "stack", "slice", "tile", "expand",
                 "expand_as", "triu"])


def gen_shape():
    x = vals(2, 3, 4)
    for label, shape, out_shape in [("to_4x6", [4, 6], (4, 6)),
                                    ("infer", [-1, 4], (6, 4)),
                                    ("copy_dim0_infer", [0, -1], (2, 12)),
                                    ("flat", [24], (24,)),
                                    ("add_ones", [2, 1, 3, 1, 4], (2, 1, 3, 1, 4))]:
        case("reshape", label, {"shape": shape}, [x], [x.reshape(out_shape)])
    x11 = vals(1, 1)
    case("reshape", "to_0d", {"shape": []}, [x11], [x11.reshape(())])
    x0 = vals()
    case("reshape", "0d_to_1x1", {"shape": [1, 1]}, [x0], [x0.reshape(1, 1)])
    case("reshape", "0d_infer", {"shape": [-1]}, [x0], [x0.reshape(1)])
    xe = vals(0, 3)
    case("reshape", "empty_infer", {"shape": [3, -1]}, [xe], [xe.reshape(3, 0)])
    case("reshape", "empty_copy_dim", {"shape": [0, 1, 3]}, [xe], [xe.reshape(0, 1, 3)])
    ids = T(np.arange(6).reshape(2, 3), "int64")
    case("reshape", "int64_keeps_dtype", {"shape": [3, 2]}, [ids],
         [T(ids.array.reshape(3, 2), "int64")])
    error("reshape", "two_infers", {"shape": [-1, -1]}, [x], "attrs.shape")
    error("reshape", "size_mismatch", {"shape": [5, 5]}, [x], "attrs.shape")
    error("reshape", "infer_not_divisible", {"shape": [5, -1]}, [x], "attrs.shape")
    error("reshape", "copy_beyond_rank", {"shape": [6, 2, 2, 0]}, [vals(6, 4)], "attrs.shape")
    error("reshape", "infer_with_zero", {"shape": [0, -1]}, [xe], "attrs.shape")
    error("reshape", "negative", {"shape": [-2, 12]}, [x], "attrs.shape")

    x4 = vals(2, 3, 4, 5)
    case("flatten", "default", {}, [x4], [x4.reshape(-1)])
    case("flatten", "middle", {"start_axis": 1, "stop_axis": 2}, [x4], [x4.reshape(2, 12, 5)])
    case("flatten", "negative", {"start_axis": -2}, [x4], [x4.reshape(2, 3, 20)])
    case("flatten", "start_eq_stop", {"start_axis": 1, "stop_axis": 1}, [x4], [x4])
    case("flatten", "0d", {}, [x0], [x0.reshape(1)])
    case("flatten", "empty", {"start_axis": 0, "stop_axis": 1}, [xe], [xe.reshape(0)])
    error("flatten", "start_after_stop", {"start_axis": 2, "stop_axis": 1}, [x4],
          "attrs.start_axis")
    error("flatten", "stop_out_of_range", {"stop_axis": 4}, [x4], "attrs.stop_axis")

    xs = vals(1, 3, 1)
    case("squeeze", "all_ones", {}, [xs], [xs.reshape(3)])
    case("squeeze", "axis0", {"axis": [0]}, [xs], [xs.reshape(3, 1)])
    case("squeeze", "non_one_ignored", {"axis": [-1, 1]}, [xs], [xs.reshape(1, 3)])
    case("squeeze", "0d", {}, [x0], [x0])
    case("squeeze", "0d_axis0", {"axis": [0]}, [x0], [x0])
    x1 = vals(1)
    case("squeeze", "to_0d", {}, [x1], [x1.reshape(())])
    case("squeeze", "empty_dims", {}, [vals(0, 1)], [np.zeros((0,))])
    # Localized: exactly the listed dims go (a shard's other size-1 dims stay).
    xl = vals(1, 1, 3)
    case("squeeze", "localized_exact", {"axis": [0], "local": {"exact": True}}, [xl], [xl.reshape(1, 3)])
    case("squeeze", "localized_exact_none", {"axis": [], "local": {"exact": True}}, [xl], [xl])
    error("squeeze", "localized_exact_not_1", {"axis": [2], "local": {"exact": True}}, [xl],
          "attrs.axis")
    error("squeeze", "axis_out_of_range", {"axis": [3]}, [xs], "attrs.axis")

    x2 = vals(2, 3)
    case("unsqueeze", "front", {"axis": [0]}, [x2], [np.expand_dims(x2, 0)])
    case("unsqueeze", "back", {"axis": [-1]}, [x2], [np.expand_dims(x2, -1)])
    case("unsqueeze", "two", {"axis": [0, 3]}, [x2], [np.expand_dims(x2, (0, 3))])
    case("unsqueeze", "two_negative", {"axis": [1, -1]}, [x2], [np.expand_dims(x2, (1, -1))])
    case("unsqueeze", "0d", {"axis": [0]}, [x0], [np.expand_dims(x0, 0)])
    case("unsqueeze", "none", {"axis": []}, [x2], [x2])
    error("unsqueeze", "duplicate", {"axis": [0, -4]}, [x2], "attrs.axis")
    error("unsqueeze", "out_of_range", {"axis": [3]}, [x2], "attrs.axis")

    case("transpose", "3d", {"perm": [2, 0, 1]}, [x], [np.transpose(x, (2, 0, 1))])
    case("transpose", "2d", {"perm": [1, 0]}, [x2], [x2.T])
    case("transpose", "negative_entries", {"perm": [-1, 0, 1]}, [x],
         [np.transpose(x, (2, 0, 1))])
    case("transpose", "identity", {"perm": [0, 1, 2]}, [x], [x])
    case("transpose", "0d", {"perm": []}, [x0], [x0])
    case("transpose", "empty", {"perm": [1, 0]}, [xe], [xe.T])
    error("transpose", "not_permutation", {"perm": [0, 0, 1]}, [x], "attrs.perm")
    error("transpose", "wrong_length", {"perm": [1, 0]}, [x], "attrs.perm")
    error("transpose", "out_of_range", {"perm": [0, 1, 3]}, [x], "attrs.perm")

    x6 = vals(6, 2)
    case("split", "two", {"sections": [2, 4]}, [x6], np.split(x6, [2]))
    case("split", "infer", {"sections": [1, -1, 2]}, [x6], np.split(x6, [1, 4]))
    case("split", "last_axis", {"sections": [1, 1], "axis": -1}, [x6], np.split(x6, [1], 1))
    case("split", "zero_section", {"sections": [0, 6, 0]}, [x6], np.split(x6, [0, 6]))
    case("split", "one", {"sections": [2], "axis": 1}, [x6], [x6])
    error("split", "sum_mismatch", {"sections": [2, 3]}, [x6], "attrs.sections")
    error("split", "two_infers", {"sections": [-1, -1]}, [x6], "attrs.sections")
    error("split", "axis_out_of_range", {"sections": [6], "axis": 2}, [x6], "attrs.axis")

    case("split_with_num", "three", {"num": 3}, [x6], np.split(x6, 3))
    case("split_with_num", "last_axis", {"num": 2, "axis": -1}, [x6], np.split(x6, 2, axis=1))
    case("split_with_num", "one", {"num": 1}, [x6], [x6])
    case("split_with_num", "empty_dim", {"num": 2, "axis": 1}, [vals(0, 4)],
         np.split(np.zeros((0, 4)), 2, axis=1))
    error("split_with_num", "not_divisible", {"num": 4}, [x6], "attrs.num")
    error("split_with_num", "zero", {"num": 0}, [x6], "attrs.num")

    case("unbind", "axis0", {}, [x2], list(x2))
    case("unbind", "last_axis", {"axis": -1}, [x2], [x2[:, j] for j in range(3)])
    x213 = vals(2, 1, 3)
    case("unbind", "size1", {"axis": 1}, [x213], [x213[:, 0, :]])
    x3 = vals(3)
    case("unbind", "to_0d", {}, [x3], [x3[i] for i in range(3)])
    error("unbind", "0d", {}, [x0], "attrs.axis")

    a, b, c = vals(2, 3), vals(1, 3), vals(4, 3)
    case("concat", "axis0", {}, [a, b, c], [np.concatenate([a, b, c], 0)])
    a2, b2 = vals(2, 1), vals(2, 4)
    case("concat", "last_axis", {"axis": -1}, [a2, b2], [np.concatenate([a2, b2], -1)])
    case("concat", "single", {}, [a], [a])
    case("concat", "with_empty", {}, [a, vals(0, 3)], [a])
    bt = T(np.array([[1, 0, 1]]), "bool")
    case("concat", "bool_keeps_dtype", {}, [bt, bt], [T(np.array([[1, 0, 1], [1, 0, 1]]), "bool")])
    error("concat", "dim_mismatch", {}, [a, vals(2, 4)], "inputs[1].shape")
    error("concat", "rank_mismatch", {}, [a, vals(3)], "inputs[1].shape")
    error("concat", "0d", {}, [x0, x0], "attrs.axis")
    error("concat", "no_inputs", {}, [], "inputs")

    p, q = vals(2, 3), vals(2, 3)
    case("stack", "axis0", {}, [p, q], [np.stack([p, q], 0)])
    case("stack", "last_axis", {"axis": -1}, [p, q, p], [np.stack([p, q, p], -1)])
    case("stack", "middle", {"axis": 1}, [p, q], [np.stack([p, q], 1)])
    s1, s2 = vals(), vals()
    case("stack", "0d", {}, [s1, s2], [np.stack([s1, s2])])
    case("stack", "single", {"axis": 2}, [p], [np.stack([p], 2)])
    error("stack", "shape_mismatch", {}, [p, vals(3, 2)], "inputs[1].shape")
    error("stack", "axis_out_of_range", {"axis": 3}, [p, q], "attrs.axis")

    xsl = vals(4, 5)
    slices = [
        ("axis0", {"axes": [0], "starts": [1], "ends": [3]}, xsl[1:3]),
        ("negative", {"axes": [1], "starts": [-3], "ends": [-1]}, xsl[:, -3:-1]),
        ("clamped", {"axes": [0, 1], "starts": [-100, 2], "ends": [100, 1000000]},
         xsl[:, 2:]),
        ("end_before_start", {"axes": [1], "starts": [3], "ends": [1]}, xsl[:, 3:1]),
        ("decrease", {"axes": [0], "starts": [2], "ends": [3], "decrease_axis": [0],
                      "infer_flags": [1]}, xsl[2]),
        ("decrease_all", {"axes": [0, 1], "starts": [1, 4], "ends": [2, 5],
                          "decrease_axis": [0, -1]}, np.array(xsl[1, 4])),
        ("no_axes", {"axes": [], "starts": [], "ends": []}, xsl),
    ]
    for label, attrs, out in slices:
        case("slice", label, attrs, [xsl], [out])
    error("slice", "decrease_size2", {"axes": [0], "starts": [0], "ends": [2],
                                      "decrease_axis": [0]}, [xsl], "attrs.decrease_axis")
    error("slice", "starts_length", {"axes": [0, 1], "starts": [0], "ends": [1, 1]}, [xsl],
          "attrs.starts")
    error("slice", "axis_out_of_range", {"axes": [2], "starts": [0], "ends": [1]}, [xsl],
          "attrs.axes")

    case("tile", "2x1", {"repeat_times": [2, 1]}, [x2], [np.tile(x2, (2, 1))])
    case("tile", "shorter_repeats", {"repeat_times": [2]}, [x2], [np.tile(x2, 2)])
    case("tile", "longer_repeats", {"repeat_times": [2, 1, 2]}, [x2], [np.tile(x2, (2, 1, 2))])
    case("tile", "zero", {"repeat_times": [0, 2]}, [x2], [np.tile(x2, (0, 2))])
    case("tile", "0d", {"repeat_times": [3]}, [x0], [np.tile(x0, 3)])
    case("tile", "empty_repeats", {"repeat_times": []}, [x2], [x2])
    error("tile", "negative", {"repeat_times": [1, -1]}, [x2], "attrs.repeat_times")

    v3 = vals(3)
    case("expand", "new_dim", {"shape": [2, 3]}, [v3], [np.broadcast_to(v3, (2, 3))])
    c21 = vals(2, 1)
    case("expand", "size1", {"shape": [2, 4]}, [c21], [np.broadcast_to(c21, (2, 4))])
    case("expand", "keep_minus1", {"shape": [3, -1, 4]}, [c21],
         [np.broadcast_to(c21, (3, 2, 4))])
    case("expand", "0d", {"shape": [2, 2]}, [x0], [np.broadcast_to(x0, (2, 2))])
    case("expand", "to_empty", {"shape": [0, 3]}, [v3], [np.zeros((0, 3))])
    error("expand", "incompatible", {"shape": [2, 4]}, [x2], "attrs.shape")
    error("expand", "fewer_dims", {"shape": [3]}, [x2], "attrs.shape")
    error("expand", "minus1_new_dim", {"shape": [-1, 3]}, [v3], "attrs.shape")

    y23 = vals(2, 3)
    case("expand_as", "from_y", {}, [v3, y23], [np.broadcast_to(v3, (2, 3))])
    r13 = vals(1, 3)
    case("expand_as", "target_shape", {"target_shape": [4, 3]}, [r13, vals(4, 3)],
         [np.broadcast_to(r13, (4, 3))])
    case("expand_as", "0d_x", {}, [x0, vals(2)], [np.broadcast_to(x0, (2,))])
    case("expand_as", "same", {}, [y23, vals(2, 3)], [y23])
    error("expand_as", "incompatible_y", {}, [vals(2), y23], "inputs[1].shape")
    error("expand_as", "incompatible_target", {"target_shape": [2, 4]}, [v3, y23],
          "attrs.target_shape")

    xt = vals(2, 4, 5)
    for k in [0, 1, -2, 7]:
        case("triu", f"diagonal_{k}", {"diagonal": k}, [xt], [np.triu(xt, k)])
    wide = vals(3, 7)
    case("triu", "wide", {"diagonal": -1}, [wide], [np.triu(wide, -1)])
    # A shard's localized diagonal: rows from 2, columns from 3 of the global x.
    case("triu", "localized_shifted_diagonal", {"diagonal": 1 + 2 - 3}, [wide[2:, 3:]],
         [np.triu(wide, 1)[2:, 3:]])
    error("triu", "rank1", {}, [vals(4)], "inputs[0].shape")


# ---------------------------------------------------------------- Paddle's other ops
# Drawn from a generator of their own (PADDLE_RNG), so that these cases and every other
# case keep their values wherever this runs among the generators.

family("elementwise", ["pow", "rsqrt", "add_n"])
family("shape", ["tril", "tril_triu"])
family("indexing", ["one_hot", "roll", "index_select", "gather", "pad", "swiglu"])


PADDLE_RNG = np.random.default_rng(20261201)


def gen_paddle_ops():
    global RNG
    saved, RNG = RNG, PADDLE_RNG
    try:
        gen_paddle_ops_cases()
    finally:
        RNG = saved


def gen_paddle_ops_cases():
    x = vals(2, 3)
    for y in [2.0, 3.0, 0.0, 1.0, -1.0]:
        case("pow", f"y_{y:g}", {"y": y}, [x], [np.power(x, y)])
    pos = vals(2, 3, lo=0.1, hi=3.0)
    for y in [0.5, -1.5, 2.5]:
        case("pow", f"positive_y_{y:g}", {"y": y}, [pos], [np.power(pos, y)])
    case("pow", "negative_base_integer_y", {"y": -3.0}, [np.array([-2.0, 0.5])],
         [np.array([-0.125, 8.0])])
    case("pow", "0d", {"y": 2.0}, [np.array(1.5)], [np.array(2.25)])
    case("rsqrt", "basic", {}, [pos], [1.0 / np.sqrt(pos)])
    case("rsqrt", "0d", {}, [np.array(0.25)], [np.array(2.0)])
    case("rsqrt", "zero_and_inf", {}, [np.array([0.0, np.inf, 4.0])],
         [np.array([np.inf, 0.0, 0.5])])

    a, b, c = vals(2, 3), vals(2, 3), vals(2, 3)
    case("add_n", "three", {}, [a, b, c], [a + b + c])
    case("add_n", "one", {}, [a], [a])
    case("add_n", "0d", {}, [np.array(1.25), np.array(-0.5)], [np.array(0.75)])
    error("add_n", "shape_mismatch", {}, [a, vals(3)], "inputs[1].shape")

    xt = vals(2, 4, 5)
    for k in [0, 1, -2, 7, -9]:
        case("tril", f"diagonal_{k}", {"diagonal": k}, [xt], [np.tril(xt, k)])
    wide = vals(3, 7)
    # A shard's localized diagonal: rows from 1, columns from 4 of the global x.
    case("tril", "localized_shifted_diagonal", {"diagonal": 2 + 1 - 4}, [wide[1:, 4:]],
         [np.tril(wide, 2)[1:, 4:]])
    error("tril", "rank1", {}, [vals(4)], "inputs[0].shape")
    for lower in [True, False]:
        for k in [0, 2, -1]:
            expect = np.tril(xt, k) if lower else np.triu(xt, k)
            case("tril_triu", f"lower_{lower}_diagonal_{k}", {"diagonal": k, "lower": lower},
                 [xt], [expect])
    error("tril_triu", "rank0", {"lower": True}, [np.array(2.0)], "inputs[0].shape")

    ids = np.array([[0, 3, 1], [4, 4, 2]])
    case("one_hot", "2d", {"num_classes": 5}, [T(ids, "int64")],
         [T(np.eye(5)[ids], "float32")])
    case("one_hot", "0d", {"num_classes": 3}, [T(np.array(2), "int64")],
         [T(np.eye(3)[2], "float32")])
    case("one_hot", "one_class", {"num_classes": 1}, [T(np.zeros((2, 1)), "int64")],
         [T(np.ones((2, 1, 1)), "float32")])
    error("one_hot", "id_out_of_range", {"num_classes": 3}, [T(np.array([0, 3]), "int64")],
          "inputs[0].data")
    error("one_hot", "negative_id", {"num_classes": 3}, [T(np.array([-1]), "int64")],
          "inputs[0].data")
    error("one_hot", "zero_classes", {"num_classes": 0}, [T(np.array([0]), "int64")],
          "attrs.num_classes")

    xr = vals(3, 4, 5)
    for label, shifts, axis in [("one_axis", [2], [1]), ("two_axes", [-1, 7], [0, 2]),
                                ("repeated_axis", [1, 2], [2, -1]), ("flat", [5], []),
                                ("flat_negative", [-13], []), ("big_shift", [1000000007], [1])]:
        expect = np.roll(xr, shifts[0]) if not axis else np.roll(xr, shifts, axis)
        case("roll", label, {"shifts": shifts, "axis": axis}, [xr], [expect])
    error("roll", "shift_count", {"shifts": [1, 2], "axis": [0]}, [xr], "attrs.shifts")
    error("roll", "flat_needs_one_shift", {"shifts": [1, 2]}, [xr], "attrs.shifts")
    error("roll", "axis_out_of_range", {"shifts": [1], "axis": [3]}, [xr], "attrs.axis")

    xs = vals(3, 4, 5)
    idx = np.array([3, 0, 3, 1])
    case("index_select", "axis1", {"axis": 1}, [xs, T(idx, "int64")], [np.take(xs, idx, axis=1)])
    case("index_select", "axis0", {}, [xs, T(np.array([2, 2]), "int64")],
         [np.take(xs, [2, 2], axis=0)])
    case("index_select", "axis_last_empty_index", {"axis": -1},
         [xs, T(np.zeros(0), "int64")], [np.take(xs, np.zeros(0, dtype=int), axis=2)])
    # A shard holding rows [2, 4) of axis 1: the other ids read zeros.
    local = np.take(xs, idx, axis=1)
    local[:, [1, 3], :] = 0.0
    case("index_select", "localized_row_shard", {"axis": 1, "local": {"vocab_start": 2}},
         [xs[:, 2:4, :], T(idx, "int64")], [local])
    error("index_select", "id_out_of_range", {}, [xs, T(np.array([3]), "int64")],
          "inputs[1].data")
    error("index_select", "index_2d", {}, [xs, T(np.zeros((1, 1)), "int64")], "inputs[1].shape")
    error("index_select", "index_0d", {}, [xs, T(np.array(0), "int64")], "inputs[1].shape")
    case("gather", "axis0", {}, [xs, T(np.array([1, 0, 1]), "int64")],
         [np.take(xs, [1, 0, 1], axis=0)])
    case("gather", "index_0d_drops_axis", {"axis": 2}, [xs, T(np.array(4), "int64")],
         [np.take(xs, 4, axis=2)])
    case("gather", "negative_axis", {"axis": -2}, [xs, T(np.array([3, 3]), "int64")],
         [np.take(xs, [3, 3], axis=1)])
    error("gather", "axis_out_of_range", {"axis": 3}, [xs, T(np.array([0]), "int64")],
          "attrs.axis")
    error("gather", "id_out_of_range", {"axis": 2}, [xs, T(np.array(5), "int64")],
          "inputs[1].data")

    xp = vals(2, 3)
    for label, paddings, value in [("last_dim", [0, 0, 1, 2], 0.0), ("both_dims", [2, 1, 0, 3], -1.5),
                                   ("none", [0, 0, 0, 0], 7.0)]:
        width = [(paddings[0], paddings[1]), (paddings[2], paddings[3])]
        case("pad", label, {"paddings": paddings, "pad_value": value}, [xp],
             [np.pad(xp, width, mode="constant", constant_values=value)])
    case("pad", "0d", {"paddings": []}, [np.array(3.5)], [np.array(3.5)])
    error("pad", "odd_paddings", {"paddings": [1, 1, 1]}, [xp], "attrs.paddings")
    error("pad", "negative_padding", {"paddings": [0, 0, -1, 0]}, [xp], "attrs.paddings")

    xw, yw = vals(2, 3), vals(2, 3)
    case("swiglu", "basic", {}, [xw, yw], [xw / (1.0 + np.exp(-xw)) * yw])
    case("swiglu", "large_negative", {}, [np.array([-800.0, 0.0, 30.0]), np.array([2.0, 3.0, -1.0])],
         [np.array([-0.0, 0.0, -30.0 / (1.0 + np.exp(-30.0))])])
    case("swiglu", "0d", {}, [np.array(1.0), np.array(2.0)], [np.array(2.0 / (1.0 + np.exp(-1.0)))])
    error("swiglu", "shape_mismatch", {}, [xw, vals(3)], "inputs[1].shape")


# ---------------------------------------------------------------- more of Paddle's ops
# From a generator of their own (PADDLE2_RNG), as Paddle's other ops above.

family("sort", ["argsort", "topk"])
family("indexing", ["gather_nd", "scatter", "scatter_nd_add"])
family("fused", ["fused_rotary_position_embedding", "fused_dropout_add"])
family("contraction", ["bmm_grad"])

PADDLE2_RNG = np.random.default_rng(20261202)


def gen_paddle_ops2():
    global RNG
    saved, RNG = RNG, PADDLE2_RNG
    try:
        gen_sort_cases()
        gen_scatter_cases()
        gen_fused_cases()
    finally:
        RNG = saved


def np_sort(x, axis, descending):
    """values and int64 indices along axis (docs/OPS.md): ascending (descending: largest
    first), NaN above every number, ties in index order."""
    def line_order(line):
        def key(i):
            v = line[i]
            nan = bool(np.isnan(v))
            if descending:
                return (0 if nan else 1, 0.0 if nan else -v, i)
            return (1 if nan else 0, 0.0 if nan else v, i)
        return np.array(sorted(range(len(line)), key=key), dtype=np.int64)

    order = np.apply_along_axis(line_order, axis, x).astype(np.int64)
    return np.take_along_axis(x, order, axis), order


def gen_sort_cases():
    x = vals(3, 5)
    ties = small_ints(2, 6)
    x3 = vals(2, 4, 3)
    for label, xi, attrs in [("last_axis", x, {}), ("axis0", x, {"axis": 0}),
                             ("descending", x, {"descending": True}),
                             ("ties_in_index_order", ties, {}),
                             ("ties_descending", ties, {"descending": True}),
                             ("3d_axis1_stable", x3, {"axis": 1, "stable": True}),
                             ("3d_negative_axis", x3, {"axis": -3, "descending": True})]:
        full = {"axis": -1, "descending": False, **attrs}
        values, order = np_sort(xi, full["axis"], full["descending"])
        case("argsort", label, attrs, [xi], [values, T(order, "int64")])
    # Infinities sort as numbers (goldens hold no NaN; NaN's place is in docs/OPS.md).
    inf = np.array([1.5, np.inf, -2.0, -np.inf, 0.25, np.inf])
    case("argsort", "infinities", {}, [inf], [np.sort(inf), T(np.array([3, 2, 4, 0, 1, 5]), "int64")])
    case("argsort", "infinities_descending", {"descending": True}, [inf],
         [np.sort(inf)[::-1], T(np.array([1, 5, 0, 4, 2, 3]), "int64")])
    case("argsort", "0d", {}, [np.array(2.5)], [np.array(2.5), T(np.array(0), "int64")])
    case("argsort", "empty_axis", {"axis": 0}, [np.zeros((0, 3))],
         [np.zeros((0, 3)), T(np.zeros((0, 3)), "int64")])
    error("argsort", "axis_out_of_range", {"axis": 2}, [x], "attrs.axis")
    error("argsort", "two_inputs", {}, [x, x], "inputs")

    for label, xi, attrs in [("k2_last_axis", x, {"k": 2}), ("k1_default", x, {}),
                             ("smallest_axis0", x, {"k": 2, "axis": 0, "largest": False}),
                             ("unsorted_same_order", x, {"k": 3, "sorted": False}),
                             ("ties_in_index_order", ties, {"k": 4}),
                             ("ties_smallest", ties, {"k": 3, "largest": False}),
                             ("3d_axis1_all", x3, {"k": 4, "axis": 1}),
                             ("k0", x, {"k": 0})]:
        full = {"k": 1, "axis": -1, "largest": True, **attrs}
        values, order = np_sort(xi, full["axis"], full["largest"])
        keep = np.arange(full["k"])
        case("topk", label, attrs, [xi], [np.take(values, keep, axis=full["axis"]),
                                          T(np.take(order, keep, axis=full["axis"]), "int64")])
    case("topk", "infinities_largest", {"k": 3}, [inf], [np.array([np.inf, np.inf, 1.5]),
                                                       T(np.array([1, 5, 0]), "int64")])
    case("topk", "0d", {}, [np.array(-1.5)], [np.array(-1.5), T(np.array(0), "int64")])
    error("topk", "k_above_axis", {"k": 6}, [x], "attrs.k")
    error("topk", "k_negative", {"k": -1}, [x], "attrs.k")
    error("topk", "0d_k2", {"k": 2}, [np.array(1.0)], "attrs.k")
    error("topk", "axis_out_of_range", {"axis": -3}, [x], "attrs.axis")


def np_scatter(x, index, updates, overwrite):
    out = x.copy()
    if overwrite:
        for i, row in enumerate(index):
            out[row] = updates[i]
    else:
        out[index] = 0.0
        np.add.at(out, index, updates)
    return out


def np_scatter_nd_add(x, index, updates):
    out = x.copy()
    np.add.at(out, tuple(np.moveaxis(index, -1, 0)), updates)
    return out


def gen_scatter_cases():
    x = vals(3, 4, 2)
    for label, idx in [("depth2", [[2, 1], [0, 3], [2, 1]]), ("depth1", [[1], [0]]),
                       ("depth3_batch2d", [[[0, 1, 1], [2, 3, 0]], [[1, 0, 0], [1, 1, 1]]]),
                       ("depth0_whole_x", [[], []])]:
        index = np.array(idx, dtype=np.int64).reshape(np.array(idx).shape)
        expect = x[tuple(np.moveaxis(index, -1, 0))] if index.shape[-1] else np.stack([x, x])
        case("gather_nd", label, {}, [x, T(index, "int64")], [expect])
    case("gather_nd", "empty_batch", {}, [x, T(np.zeros((0, 2)), "int64")], [np.zeros((0, 2))])
    error("gather_nd", "depth_above_rank", {}, [x, T(np.zeros((1, 4)), "int64")], "inputs[1].shape")
    error("gather_nd", "0d_index", {}, [x, T(np.array(0), "int64")], "inputs[1].shape")
    error("gather_nd", "id_out_of_range", {}, [x, T(np.array([[0, 4]]), "int64")], "inputs[1].data")
    error("gather_nd", "negative_id", {}, [x, T(np.array([[-1]]), "int64")], "inputs[1].data")

    xs = vals(4, 3)
    idx = np.array([2, 0, 2, 3])
    upd = vals(4, 3)
    for overwrite in [True, False]:
        name = "overwrite" if overwrite else "accumulate"
        case("scatter", name + "_repeated_id", {"overwrite": overwrite},
             [xs, T(idx, "int64"), upd], [np_scatter(xs, idx, upd, overwrite)])
    case("scatter", "empty_index", {}, [xs, T(np.zeros(0), "int64"), np.zeros((0, 3))], [xs])
    x1 = vals(5)
    u1 = vals(2)
    case("scatter", "1d_accumulate", {"overwrite": False}, [x1, T(np.array([4, 4]), "int64"), u1],
         [np_scatter(x1, np.array([4, 4]), u1, False)])
    # A shard holding rows [2, 4): the updates of rows 0 and 3 on the one it holds.
    full = np_scatter(xs, idx, upd, False)
    case("scatter", "localized_row_shard", {"overwrite": False, "local": {"vocab_start": 2}},
         [xs[2:4], T(idx, "int64"), upd], [full[2:4]])
    error("scatter", "id_out_of_range", {}, [xs, T(np.array([4]), "int64"), vals(1, 3)], "inputs[1].data")
    error("scatter", "index_2d", {}, [xs, T(np.zeros((1, 1)), "int64"), vals(1, 3)], "inputs[1].shape")
    error("scatter", "updates_rows", {}, [xs, T(np.array([0, 1]), "int64"), vals(3, 3)], "inputs[2].shape")
    error("scatter", "x_0d", {}, [np.array(1.0), T(np.array([0]), "int64"), vals(1)], "inputs[0].shape")

    xn = vals(3, 4, 2)
    for label, idx in [("depth2_repeated", [[2, 1], [0, 3], [2, 1]]), ("depth1", [[1], [1], [0]]),
                       ("depth3", [[0, 1, 1], [0, 1, 1]])]:
        index = np.array(idx, dtype=np.int64)
        updates = vals(*(index.shape[:-1] + xn.shape[index.shape[-1]:]))
        case("scatter_nd_add", label, {}, [xn, T(index, "int64"), updates],
             [np_scatter_nd_add(xn, index, updates)])
    index = np.array([[[0], [2]], [[2], [2]]], dtype=np.int64)
    updates = vals(2, 2, 4, 2)
    case("scatter_nd_add", "batch_2d", {}, [xn, T(index, "int64"), updates],
         [np_scatter_nd_add(xn, index, updates)])
    error("scatter_nd_add", "updates_shape", {}, [xn, T(np.array([[0, 1]]), "int64"), vals(1, 3)],
          "inputs[2].shape")
    error("scatter_nd_add", "id_out_of_range", {}, [xn, T(np.array([[3]]), "int64"), vals(1, 4, 2)],
          "inputs[1].data")
    error("scatter_nd_add", "depth_above_rank", {}, [xn, T(np.zeros((1, 4)), "int64"), vals(1)],
          "inputs[1].shape")


def np_rope(x, sin, cos, neox, time_major):
    """docs/OPS.md: neox (Paddle's "every two") rotates pairs (2i, 2i + 1); otherwise the
    halves (rotate_half). sin / cos [s, d] or 4-D, broadcast over batch and heads."""
    shape = (-1, 1, 1, x.shape[3]) if time_major else (1, -1, 1, x.shape[3])
    s, c = sin.reshape(shape), cos.reshape(shape)
    if neox:
        rot = np.empty_like(x)
        rot[..., 0::2] = -x[..., 1::2]
        rot[..., 1::2] = x[..., 0::2]
    else:
        h = x.shape[3] // 2
        rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return c * x + s * rot


def gen_fused_cases():
    q, k, v = vals(2, 3, 2, 4), vals(2, 3, 2, 4), vals(2, 3, 2, 4)
    angles = vals(3, 4)
    sin, cos = np.sin(angles), np.cos(angles)
    for neox in [True, False]:
        style = "neox" if neox else "rotate_half"
        attrs = {"use_neox_rotary_style": neox}
        case("fused_rotary_position_embedding", style + "_q_only", attrs, [q, sin, cos],
             [np_rope(q, sin, cos, neox, False)])
        case("fused_rotary_position_embedding", style + "_qkv_4d_tables", attrs,
             [q, k, v, sin.reshape(1, 3, 1, 4), cos.reshape(1, 3, 1, 4)],
             [np_rope(t, sin, cos, neox, False) for t in (q, k, v)])
    tq, tk = vals(3, 2, 2, 4), vals(3, 2, 2, 4)
    table = vals(3, 4), vals(3, 4)  # any values: the op does not require sin^2 + cos^2 = 1
    case("fused_rotary_position_embedding", "time_major_qk", {"time_major": True},
         [tq, tk, table[0].reshape(1, 3, 1, 4), table[1].reshape(1, 3, 1, 4)],
         [np_rope(t, table[0], table[1], True, True) for t in (tq, tk)])
    case("fused_rotary_position_embedding", "empty_seq", {}, [np.zeros((2, 0, 2, 4)), np.zeros((0, 4)),
                                                             np.zeros((0, 4))], [np.zeros((2, 0, 2, 4))])
    error("fused_rotary_position_embedding", "odd_head_dim", {}, [vals(1, 3, 1, 3), vals(3, 3), vals(3, 3)],
          "inputs[0].shape")
    error("fused_rotary_position_embedding", "table_seq", {}, [q, vals(2, 4), vals(2, 4)], "inputs[1].shape")
    error("fused_rotary_position_embedding", "table_batch_not_1", {},
          [q, vals(2, 3, 1, 4), vals(2, 3, 1, 4)], "inputs[1].shape")
    error("fused_rotary_position_embedding", "k_batch", {}, [q, vals(1, 3, 2, 4), sin, cos], "inputs[1].shape")
    error("fused_rotary_position_embedding", "v_heads_differ", {}, [q, k, vals(2, 3, 1, 4), sin, cos],
          "inputs[2].shape")
    error("fused_rotary_position_embedding", "q_3d", {}, [vals(3, 2, 4), sin, cos], "inputs[0].shape")
    error("fused_rotary_position_embedding", "two_inputs", {}, [q, sin], "inputs")

    x, y = vals(4, 6), vals(4, 6)
    for label, attrs in [("p_half_seed_3", {"p": 0.5, "seed": 3}),
                         ("downscale", {"p": 0.25, "seed": 8, "mode": "downscale_in_infer"}),
                         ("is_test", {"p": 0.4, "is_test": True}),
                         ("p_1_gives_y", {"p": 1.0, "seed": 1})]:
        full = {"p": 0.5, "seed": 0, "mode": "upscale_in_train", "is_test": False, **attrs}
        out, mask = np_dropout(x, full["p"], full["seed"], upscale=full["mode"] == "upscale_in_train",
                               is_test=full["is_test"])
        # Paddle's seed_offset: [seed, 0] (the draw is keyed by the global index).
        seed_offset = T(np.array([full["seed"], 0]), "int64")
        case("fused_dropout_add", label, attrs, [x, y], [as_t(out).array + y, seed_offset])
    out, mask = np_dropout(x, 0.5, 5)
    case("fused_dropout_add", "localized_offset", {"p": 0.5, "seed": 5, "local": {"offset": [1, 2],
                                                   "global_shape": [4, 6]}},
         [x[1:3, 2:5], y[1:3, 2:5]], [(as_t(out).array + y)[1:3, 2:5], T(np.array([5, 0]), "int64")])
    error("fused_dropout_add", "shape_mismatch", {}, [x, vals(6)], "inputs[1].shape")
    error("fused_dropout_add", "p_above_1", {"p": 1.5}, [x, y], "attrs.p")

    a, b = vals(2, 3, 4), vals(2, 4, 5)
    g = vals(2, 3, 5)
    case("bmm_grad", "basic", {}, [a, b, g], [g @ np.swapaxes(b, 1, 2), np.swapaxes(a, 1, 2) @ g])
    a1, b1, g1 = vals(1, 2, 3), vals(1, 3, 1), vals(1, 2, 1)
    case("bmm_grad", "batch1_n1", {}, [a1, b1, g1], [g1 @ np.swapaxes(b1, 1, 2), np.swapaxes(a1, 1, 2) @ g1])
    case("bmm_grad", "empty_k", {}, [np.zeros((2, 3, 0)), np.zeros((2, 0, 5)), g],
         [np.zeros((2, 3, 0)), np.zeros((2, 0, 5))])
    error("bmm_grad", "rank2_x", {}, [vals(3, 4), b, g], "inputs[0].shape")
    error("bmm_grad", "batch_mismatch", {}, [a, vals(3, 4, 5), g], "inputs[1].shape")
    error("bmm_grad", "out_grad_shape", {}, [a, b, vals(2, 3, 4)], "inputs[2].shape")


# ---------------------------------------------------------------- backward ops
# Generated last, so that the cases above keep their random values.

family("elementwise", ["gelu_grad"])
family("norm", ["embedding_grad", "cross_entropy_with_softmax_grad"])


def gelu_slope_exact(x):
    cdf = np.vectorize(lambda v: 0.5 * (1.0 + math.erf(v / math.sqrt(2.0))), otypes=[np.float64])(x)
    return cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def gelu_slope_tanh(x):
    c = math.sqrt(2.0 / math.pi)
    t = np.tanh(c * (x + 0.044715 * x ** 3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x)


def np_embedding_grad(ids, weight_shape, out_grad, padding_idx=-1, start=0):
    grad = np.zeros(weight_shape)
    for t, v in np.ndenumerate(ids):
        if v == padding_idx or not start <= v < start + weight_shape[0]:
            continue
        grad[v - start] += out_grad[t]
    return grad


def np_ce_grad(label, softmax, loss_grad, axis, soft=False, use_softmax=True,
               ignore_index=-100):
    if soft:
        return (softmax - label) * loss_grad if use_softmax else -label * loss_grad / softmax
    classes = np.arange(softmax.shape[axis]).reshape(
        [-1 if d == axis % softmax.ndim else 1 for d in range(softmax.ndim)])
    onehot = (classes == label).astype(np.float64)
    if use_softmax:
        grad = (softmax - onehot) * loss_grad
    else:
        grad = np.where(onehot == 1.0, -loss_grad / softmax, 0.0)
    return np.where(label == ignore_index, 0.0, grad)


def gen_grads():
    for label, shape in [("2x3", (2, 3)), ("0d", ()), ("empty_0x3", (0, 3))]:
        x, g = vals(*shape), vals(*shape)
        case("gelu_grad", label, {}, [x, g], [gelu_slope_exact(x) * g])
    x, g = vals(2, 3), vals(2, 3)
    case("gelu_grad", "approximate_2x3", {"approximate": True}, [x, g], [gelu_slope_tanh(x) * g])
    error("gelu_grad", "shape_mismatch", {}, [vals(2, 3), vals(3, 2)], "inputs[1].shape")

    ids = np.array([[0, 3, 4], [3, 1, 3]])
    weight = vals(5, 4)
    og = vals(2, 3, 4)
    case("embedding_grad", "repeated_ids", {}, [T(ids, "int64"), weight, og],
         [np_embedding_grad(ids, (5, 4), og)])
    case("embedding_grad", "padding_idx", {"padding_idx": 3, "sparse": True},
         [T(ids, "int64"), weight, og], [np_embedding_grad(ids, (5, 4), og, padding_idx=3)])
    case("embedding_grad", "empty_ids", {}, [T(np.zeros((0,)), "int64"), weight, np.zeros((0, 4))],
         [np.zeros((5, 4))])
    # Localized: the weight shard holds global rows [2, 5); other ids add nothing here.
    ids = np.array([[0, 3, 4], [2, 6, 3]])
    og = vals(2, 3, 4)
    case("embedding_grad", "localized_vocab_start", {"local": {"vocab_start": 2}},
         [T(ids, "int64"), vals(3, 4), og], [np_embedding_grad(ids, (3, 4), og, start=2)])
    error("embedding_grad", "id_too_large", {},
          [T(np.array([1, 5]), "int64"), weight, vals(2, 4)], "inputs[0].data")
    error("embedding_grad", "out_grad_shape", {},
          [T(np.array([1, 2]), "int64"), weight, vals(2, 3)], "inputs[2].shape")
    error("embedding_grad", "weight_1d", {},
          [T(np.array([0]), "int64"), vals(5), vals(1, 5)], "inputs[1].shape")

    op = "cross_entropy_with_softmax_grad"
    softmax = np_softmax(vals(4, 5), -1)
    label = np.array([[0], [4], [2], [2]])
    lg = vals(4, 1)
    case(op, "hard_label", {}, [T(label, "int64"), softmax, lg],
         [np_ce_grad(label, softmax, lg, -1)])
    label = np.array([[3], [1], [3], [0]])
    case(op, "ignore_index_3", {"ignore_index": 3}, [T(label, "int64"), softmax, lg],
         [np_ce_grad(label, softmax, lg, -1, ignore_index=3)])
    softmax0 = np_softmax(vals(3, 2), 0)
    label0 = np.array([[2, 0]])
    lg0 = vals(1, 2)
    case(op, "axis0", {"axis": 0}, [T(label0, "int64"), softmax0, lg0],
         [np_ce_grad(label0, softmax0, lg0, 0)])
    softmax3 = np_softmax(vals(2, 3, 2), 1)
    label3 = np.array([[[1, 0]], [[2, 2]]])
    lg3 = vals(2, 1, 2)
    case(op, "3d_axis1", {"axis": 1}, [T(label3, "int64"), softmax3, lg3],
         [np_ce_grad(label3, softmax3, lg3, 1)])
    probs = np_softmax(vals(3, 4), -1)
    labelp = np.array([[1], [0], [3]])
    lgp = vals(3, 1)
    case(op, "no_softmax", {"use_softmax": False}, [T(labelp, "int64"), probs, lgp],
         [np_ce_grad(labelp, probs, lgp, -1, use_softmax=False)])
    soft = np_softmax(vals(3, 4), -1)
    case(op, "soft_label", {"soft_label": True}, [soft, probs, lgp],
         [np_ce_grad(soft, probs, lgp, -1, soft=True)])
    case(op, "soft_label_no_softmax", {"soft_label": True, "use_softmax": False},
         [soft, probs, lgp], [np_ce_grad(soft, probs, lgp, -1, soft=True, use_softmax=False)])
    error(op, "label_out_of_range", {}, [T(np.array([[0], [5], [1], [1]]), "int64"), softmax, lg],
          "inputs[0].data")
    error(op, "label_shape", {}, [T(np.array([0, 1, 2, 3]), "int64"), softmax, lg],
          "inputs[0].shape")
    error(op, "loss_grad_shape", {}, [T(np.array([[0], [1], [2], [3]]), "int64"), softmax,
                                      vals(4)], "inputs[2].shape")
    error(op, "axis_out_of_range", {"axis": 2},
          [T(np.zeros((4, 1)), "int64"), softmax, lg], "attrs.axis")


# ---------------------------------------------------------------- random

family("random", ["dropout"])
MASK64 = (1 << 64) - 1


def splitmix_mix(z):
    """splitmix64's output function on a 64-bit word."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def counter_uniform(seed, index):
    """docs/OPS.md, dropout: draw `index` of splitmix64 started at mix(seed), top 53 bits."""
    z = (splitmix_mix(seed & MASK64) + (index + 1) * 0x9E3779B97F4A7C15) & MASK64
    return (splitmix_mix(z) >> 11) * 2.0 ** -53


def global_indices(shape, offset=None, global_shape=None):
    """(local index, global linear index) of each element of a block of `shape` at `offset`
    in a tensor of `global_shape` (the whole tensor when not given)."""
    offset = offset or [0] * len(shape)
    global_shape = global_shape or list(shape)
    for local in np.ndindex(*shape):
        yield local, (int(np.ravel_multi_index(tuple(o + i for o, i in zip(offset, local)), global_shape))
                      if len(shape) else 0)


def np_dropout(x, p, seed, upscale=True, is_test=False, offset=None, global_shape=None):
    """out and mask of dropout on x, a block at `offset` of a tensor of `global_shape`."""
    x = np.asarray(x, dtype=np.float64)
    if is_test:
        return [x if upscale else x * (1.0 - p), T(np.ones(x.shape), "bool")]
    mask = np.zeros(x.shape)
    for local, g in global_indices(x.shape, offset, global_shape):
        mask[local] = 1.0 if counter_uniform(seed, g) >= p else 0.0
    out = np.where(mask == 1.0, x / (1.0 - p) if upscale and p < 1 else x, 0.0)
    return [out, T(mask, "bool")]


def gen_random():
    x = vals(4, 6)
    case("dropout", "p_half_seed_0", {}, [x], np_dropout(x, 0.5, 0))
    case("dropout", "p_0.1_seed_12345", {"p": 0.1, "seed": 12345}, [x], np_dropout(x, 0.1, 12345))
    case("dropout", "negative_seed", {"p": 0.3, "seed": -7}, [x], np_dropout(x, 0.3, -7))
    case("dropout", "downscale_in_infer", {"p": 0.4, "seed": 3, "mode": "downscale_in_infer"},
         [x], np_dropout(x, 0.4, 3, upscale=False))
    case("dropout", "p_0_keeps_all", {"p": 0.0, "seed": 9}, [x], np_dropout(x, 0.0, 9))
    case("dropout", "p_1_drops_all", {"p": 1.0, "seed": 9}, [x], np_dropout(x, 1.0, 9))
    case("dropout", "is_test_upscale", {"p": 0.4, "is_test": True}, [x],
         np_dropout(x, 0.4, 0, is_test=True))
    case("dropout", "is_test_downscale", {"p": 0.4, "is_test": True, "mode": "downscale_in_infer"},
         [x], np_dropout(x, 0.4, 0, upscale=False, is_test=True))
    x3 = vals(2, 3, 5)
    case("dropout", "3d", {"p": 0.5, "seed": 11}, [x3], np_dropout(x3, 0.5, 11))
    case("dropout", "0d", {"p": 0.5, "seed": 2}, [np.array(1.25)], np_dropout(np.array(1.25), 0.5, 2))
    case("dropout", "empty_0x3", {"seed": 2}, [np.zeros((0, 3))], np_dropout(np.zeros((0, 3)), 0.5, 2))
    # Localized: the block [1:3, 2:5] of a [4, 6] tensor draws the global tensor's numbers.
    full = np_dropout(x, 0.5, 5)
    case("dropout", "localized_offset", {"p": 0.5, "seed": 5, "local": {"offset": [1, 2],
                                         "global_shape": [4, 6]}},
         [x[1:3, 2:5]], [full[0][1:3, 2:5], T(full[1].array[1:3, 2:5], "bool")])
    error("dropout", "p_above_1", {"p": 1.5}, [x], "attrs.p")
    error("dropout", "p_negative", {"p": -0.25}, [x], "attrs.p")
    error("dropout", "unknown_mode", {"mode": "scale"}, [x], "attrs.mode")
    error("dropout", "offset_rank", {"local": {"offset": [1], "global_shape": [4, 6]}}, [x[1:3, 2:5]],
          "local.offset")
    error("dropout", "block_outside", {"local": {"offset": [3, 2], "global_shape": [4, 6]}},
          [x[1:3, 2:5]], "local.offset")
    error("dropout", "offset_without_shape", {"local": {"offset": [0, 0]}}, [x], "local.global_shape")
    error("dropout", "two_inputs", {}, [x, x], "inputs")


# ---------------------------------------------------------------- conv2d, einsum broadcasting,
# attention, vocabulary-parallel ops (their own random stream: the cases above keep theirs)

RNG3 = np.random.default_rng(20261201)
family("conv", ["conv2d", "conv2d_grad", "depthwise_conv2d"])


def vals3(*shape):
    return np.round(RNG3.uniform(-2.0, 2.0, size=shape), 2)


def conv_padded(x, w, strides, paddings, algorithm, dilations, data_format):
    """conv2d's geometry from Paddle's attrs: x as NCHW zero-padded, the pads (top, bottom,
    left, right), the dilations in effect (SAME takes them as 1) and the output size."""
    if data_format == "NHWC":
        x = np.transpose(x, (0, 3, 1, 2))
    h, wd = x.shape[2:]
    kh, kw = w.shape[2:]
    sh, sw = strides
    dh, dw = dilations
    if len(paddings) == 2:
        pads = [paddings[0], paddings[0], paddings[1], paddings[1]]
    else:
        pads = list(paddings)
    if algorithm == "VALID":
        pads = [0, 0, 0, 0]
    elif algorithm == "SAME":
        dh = dw = 1
        pads = []
        for size, stride, k in ((h, sh, kh), (wd, sw, kw)):
            out = -(-size // stride)
            total = max((out - 1) * stride + k - size, 0)
            pads += [total // 2, total - total // 2]
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])))
    oh = (xp.shape[2] - ((kh - 1) * dh + 1)) // sh + 1
    ow = (xp.shape[3] - ((kw - 1) * dw + 1)) // sw + 1
    return xp, pads, (dh, dw), (oh, ow)


def conv_taps(w, strides, dilations, out_size, groups):
    """Each (out channel, tap i, j) with the index of the padded x's patch it reads: the
    channels of its group, the rows i * dh + r * sh and columns j * dw + s * sw."""
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (oh, ow) = strides, dilations, out_size
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(kh):
            for j in range(kw):
                yield oc, i, j, (slice(None), slice(g * cg, (g + 1) * cg),
                                 slice(i * dh, i * dh + (oh - 1) * sh + 1, sh),
                                 slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))


def np_conv2d(x, w, strides=(1, 1), paddings=(0, 0), algorithm="EXPLICIT",
              dilations=(1, 1), groups=1, data_format="NCHW"):
    """From the definition: zero-pad x, then each output position is the sum over its
    group's channels and the filter taps of x at (r * stride + i * dilation) times w."""
    xp, _, dil, (oh, ow) = conv_padded(x, w, strides, paddings, algorithm, dilations,
                                       data_format)
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for oc, i, j, patch in conv_taps(w, strides, dil, (oh, ow), groups):
        out[:, oc] += np.einsum("nchw,c->nhw", xp[patch], w[oc, :, i, j])
    if data_format == "NHWC":
        out = np.transpose(out, (0, 2, 3, 1))
    return out


def gen_conv():
    x, w = vals3(2, 3, 5, 4), vals3(4, 3, 2, 2)
    case("conv2d", "basic", {}, [x, w], [np_conv2d(x, w)])
    attrs = {"strides": [2, 1], "paddings": [1, 0, 2, 1], "dilations": [2, 1]}
    case("conv2d", "strided_padded_dilated", attrs, [x, w],
         [np_conv2d(x, w, (2, 1), (1, 0, 2, 1), "EXPLICIT", (2, 1))])
    case("conv2d", "padding_2", {"paddings": [1, 2]}, [x, w], [np_conv2d(x, w, paddings=(1, 2))])
    case("conv2d", "same", {"padding_algorithm": "SAME", "strides": [2, 3], "dilations": [3, 3]},
         [x, w], [np_conv2d(x, w, (2, 3), algorithm="SAME")])
    case("conv2d", "valid", {"padding_algorithm": "VALID", "paddings": [5, 5]}, [x, w],
         [np_conv2d(x, w)])
    xg, wg = vals3(2, 4, 4, 3), vals3(6, 2, 3, 2)
    case("conv2d", "groups", {"groups": 2, "paddings": [1, 1]}, [xg, wg],
         [np_conv2d(xg, wg, paddings=(1, 1), groups=2)])
    xd, wd = vals3(1, 3, 4, 4), vals3(3, 1, 3, 3)
    case("conv2d", "depthwise", {"groups": 3, "paddings": [1, 1]}, [xd, wd],
         [np_conv2d(xd, wd, paddings=(1, 1), groups=3)])
    xn = vals3(2, 5, 4, 4)
    case("conv2d", "nhwc_groups", {"data_format": "NHWC", "groups": 2, "strides": [1, 2]},
         [xn, wg], [np_conv2d(xn, wg, (1, 2), groups=2, data_format="NHWC")])
    case("conv2d", "empty_batch", {}, [np.zeros((0, 3, 5, 4)), w], [np.zeros((0, 4, 4, 3))])
    error("conv2d", "rank_3", {}, [vals3(3, 5, 4), w], "inputs[0].shape")
    error("conv2d", "filter_rank", {}, [x, vals3(4, 3, 2)], "inputs[1].shape")
    error("conv2d", "channels", {}, [x, vals3(4, 2, 2, 2)], "inputs[1].shape")
    error("conv2d", "groups_out_channels", {"groups": 2}, [xg, vals3(5, 2, 3, 2)], "inputs[1].shape")
    error("conv2d", "filter_too_large", {}, [x, vals3(4, 3, 6, 2)], "inputs[1].shape")
    error("conv2d", "stride_zero", {"strides": [0, 1]}, [x, w], "attrs.strides")
    error("conv2d", "dilation_count", {"dilations": [1]}, [x, w], "attrs.dilations")
    error("conv2d", "paddings_count", {"paddings": [1, 1, 1]}, [x, w], "attrs.paddings")
    error("conv2d", "negative_padding", {"paddings": [-1, 0]}, [x, w], "attrs.paddings")
    error("conv2d", "groups_zero", {"groups": 0}, [x, w], "attrs.groups")
    error("conv2d", "algorithm", {"padding_algorithm": "FULL"}, [x, w], "attrs.padding_algorithm")
    error("conv2d", "format", {"data_format": "NCDHW"}, [x, w], "attrs.data_format")


def gen_einsum_broadcast():
    """Paddle's equation forms beyond letters: `...` (broadcast, right-aligned), size-1
    dims of any letter broadcasting, implicit outputs after the ellipsis dims. numpy agrees
    with Paddle on each of these."""
    forms = [
        ("ellipsis_batch_broadcast", "...ij,...jk->...ik", [(2, 1, 2, 3), (5, 3, 4)]),
        ("ellipsis_implicit", "...ij,...jk", [(2, 2, 3), (1, 3, 4)]),
        ("ellipsis_sum_letters", "...ij->...", [(2, 3, 4)]),
        ("ellipsis_middle", "i...j,j->...i", [(2, 3, 1, 4), (4,)]),
        ("ellipsis_empty", "...ij,jk->...ik", [(2, 3), (3, 4)]),
        ("ellipsis_output_only", "ij->j...", [(2, 3)]),
        ("ellipsis_trailing", "ij...,jk...->ik...", [(2, 3, 5), (3, 4, 1)]),
        ("ellipsis_all", "...,...->...", [(2, 3), (3,)]),
        ("letter_broadcast", "ij,ij->ij", [(1, 3), (2, 3)]),
        ("letter_broadcast_contracted", "ij,jk->ik", [(2, 1), (3, 4)]),
        ("letter_broadcast_both_one", "ij,jk->ik", [(2, 1), (1, 4)]),
        ("letter_broadcast_summed", "ij,j", [(2, 3), (1,)]),
        ("letter_broadcast_batch", "bij,bjk->bik", [(1, 2, 3), (4, 3, 5)]),
        ("three_operands_broadcast", "...i,...i,i->...", [(2, 1, 3), (4, 3), (1,)]),
        ("empty_ellipsis_dim", "...i,...j->...ij", [(0, 2), (3,)]),
    ]
    for label, eq, shapes in forms:
        ops = [vals3(*s) for s in shapes]
        case("einsum", label, {"equation": eq}, ops, [np.asarray(np.einsum(eq, *ops))])
    x = vals3(2, 3)
    error("einsum", "ellipsis_missing_in_output", {"equation": "...ij->ij"}, [vals3(2, 2, 3)],
          "attrs.equation")
    error("einsum", "ellipsis_twice", {"equation": "...i...->i"}, [x], "attrs.equation")
    error("einsum", "two_dots", {"equation": "..ij->ij"}, [x], "attrs.equation")
    error("einsum", "ellipsis_rank_short", {"equation": "...ijk->...k"}, [x], "inputs[0].shape")
    error("einsum", "ellipsis_no_broadcast", {"equation": "...i,...i->...i"},
          [vals3(2, 3), vals3(4, 3)], "inputs[1].shape")
    error("einsum", "letter_sizes_differ", {"equation": "ij,jk->ik"}, [x, vals3(2, 4)],
          "inputs[1].shape")


family("attention", ["flash_attention"])


def np_attention(q, k, v, mask=None, causal=False, return_softmax=False, row_offset=0,
                 global_sq=None):
    """Softmax attention from the definition: per head, scores q k^T / sqrt(head_dim) plus
    the mask, keys after row + sk - global_sq masked when causal (bottom-right aligned),
    softmax over the keys, then the weighted sum of v. Grouped heads share a k/v head."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    global_sq = sq if global_sq is None else global_sq
    kk = np.repeat(k, h // hk, axis=2)
    vv = np.repeat(v, h // hk, axis=2)
    scores = np.einsum("bihd,bjhd->bhij", q, kk) / math.sqrt(d)
    if mask is not None:
        scores = scores + mask
    if causal:
        rows = np.arange(sq)[:, None] + row_offset
        keep = np.arange(sk)[None, :] <= rows + sk - global_sq
        scores = np.where(keep, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    e = np.exp(scores - top)
    total = e.sum(axis=-1, keepdims=True)
    probs = e / total
    out = np.einsum("bhij,bjhe->bihe", probs, vv)
    lse = (top + np.log(total))[..., 0]
    softmax = probs if return_softmax else np.zeros(())  # unset: 0-d
    return [out, softmax, lse]


def np_flash_attention(q, k, v, seed_offset=None, **kw):
    """flash_attention's four outputs: np_attention's and seed_offset, the given
    fixed_seed_offset pair or [0, 0] (no attention dropout is drawn to advance it)."""
    pair = [0, 0] if seed_offset is None else list(seed_offset.array)
    return np_attention(q, k, v, **kw) + [T(np.array(pair), "int64")]


def gen_attention():
    q, k, v = vals3(2, 3, 2, 4), vals3(2, 5, 2, 4), vals3(2, 5, 2, 3)
    case("flash_attention", "basic", {}, [q, k, v], np_flash_attention(q, k, v))
    case("flash_attention", "causal_softmax", {"causal": True, "return_softmax": True},
         [q, k, v], np_flash_attention(q, k, v, causal=True, return_softmax=True))
    mask = vals3(2, 1, 3, 5)
    seed = T(np.array([3, 7]), "int64")
    case("flash_attention", "mask_heads_broadcast", {"return_softmax": True},
         [q, k, v, seed, mask], np_flash_attention(q, k, v, seed, mask=mask, return_softmax=True))
    case("flash_attention", "seed_offset_passed_through", {}, [q, k, v, seed],
         np_flash_attention(q, k, v, seed))
    case("flash_attention", "absent_optionals", {"causal": True},
         [q, k, v, T(np.array(0), "int64"), np.array(0.0)], np_flash_attention(q, k, v, causal=True))
    qg, kg, vg = vals3(1, 4, 4, 2), vals3(1, 4, 2, 2), vals3(1, 4, 2, 2)
    case("flash_attention", "grouped_heads_causal", {"causal": True}, [qg, kg, vg],
         np_flash_attention(qg, kg, vg, causal=True))
    case("flash_attention", "is_test_dropout", {"dropout": 0.5, "is_test": True}, [q, k, v],
         np_flash_attention(q, k, v))
    # Localized: rows [1, 3) of a 4-row q, causal against 5 keys.
    q4 = vals3(2, 4, 2, 4)
    full = np_flash_attention(q4, k, v, causal=True)
    case("flash_attention", "localized_rows", {"causal": True, "local": {"offset": [0, 1, 0, 0],
                                               "global_shape": [2, 4, 2, 4]}},
         [q4[:, 1:3], k, v], [full[0][:, 1:3], full[1], full[2][:, :, 1:3], full[3]])
    error("flash_attention", "seed_not_an_integer", {}, [q, k, v, T(np.array([1.5, 2.0]))], "inputs[3]")
    error("flash_attention", "two_inputs", {}, [q, k], "inputs")
    error("flash_attention", "q_rank", {}, [vals3(2, 3, 8), k, v], "inputs[0].shape")
    error("flash_attention", "head_dim_mismatch", {}, [q, vals3(2, 5, 2, 3), v], "inputs[1].shape")
    error("flash_attention", "heads_not_dividing", {}, [vals3(2, 3, 3, 4), k, v], "inputs[1].shape")
    error("flash_attention", "v_seq", {}, [q, k, vals3(2, 4, 2, 3)], "inputs[2].shape")
    error("flash_attention", "no_keys", {}, [q, np.zeros((2, 0, 2, 4)), np.zeros((2, 0, 2, 3))],
          "inputs[1].shape")
    error("flash_attention", "causal_more_rows", {"causal": True}, [vals3(2, 6, 2, 4), k, v],
          "attrs.causal")
    error("flash_attention", "mask_shape", {}, [q, k, v, seed, vals3(2, 2, 3, 4)], "inputs[4].shape")
    error("flash_attention", "seed_shape", {}, [q, k, v, T(np.array([1, 2, 3]), "int64")],
          "inputs[3].shape")
    error("flash_attention", "dropout_range", {"dropout": 1.5}, [q, k, v], "attrs.dropout")
    error("flash_attention", "dropout_training", {"dropout": 0.1}, [q, k, v], "attrs.dropout",
          "Unsupported")


family("embedding_parallel", ["c_embedding", "c_embedding_grad"])


def np_c_embedding(weight, ids, start):
    rows = ids.astype(np.int64) - start
    inside = (rows >= 0) & (rows < weight.shape[0])
    out = weight[np.where(inside, rows, 0)]
    return np.where(inside[..., None], out, 0.0)


def gen_c_embedding():
    w = vals3(4, 3)
    ids = np.array([[0, 5, 2], [3, 6, 1]])
    for start in (0, 2, 7):
        case("c_embedding", f"start_{start}", {"start_index": start},
             [w, T(ids, "int64")], [np_c_embedding(w, ids, start)])
    case("c_embedding", "vocab_size", {"start_index": 4, "vocab_size": 8},
         [w, T(np.array([7, 4, 0]), "int64")], [np_c_embedding(w, np.array([7, 4, 0]), 4)])
    case("c_embedding", "0d_ids", {"start_index": 1}, [w, T(np.array(2), "int64")],
         [np_c_embedding(w, np.array(2), 1)])
    error("c_embedding", "id_negative", {}, [w, T(np.array([-1]), "int64")], "inputs[1].data")
    error("c_embedding", "id_past_vocab", {"vocab_size": 6}, [w, T(np.array([6]), "int64")],
          "inputs[1].data")
    error("c_embedding", "weight_rank", {}, [vals3(4), T(np.array([1]), "int64")], "inputs[0].shape")
    error("c_embedding", "start_negative", {"start_index": -1}, [w, T(np.array([1]), "int64")],
          "attrs.start_index")


family("softmax_parallel", ["c_softmax_with_cross_entropy", "c_softmax_with_cross_entropy_grad",
                             "c_softmax_with_multi_label_cross_entropy",
                             "c_softmax_with_multi_label_cross_entropy_grad"])


def np_c_softmax_ce(logits, label, ignore_index=-100):
    """Softmax over the last dim and -log p[label], 0 where the label is ignore_index."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    ignored = label == ignore_index
    safe = np.where(ignored, 0, label).astype(np.int64)
    loss = -np.take_along_axis(logp, safe, axis=-1)
    return np.exp(logp), np.where(ignored, 0.0, loss)


def gen_c_softmax():
    op = "c_softmax_with_cross_entropy"
    logits = vals3(4, 5)
    label = np.array([[0], [4], [2], [3]])
    case(op, "hard_label", {}, [logits, T(label, "int64")], list(np_c_softmax_ce(logits, label)))
    label = np.array([[1], [4], [1], [0]])
    case(op, "ignore_index_1", {"ignore_index": 1}, [logits, T(label, "int64")],
         list(np_c_softmax_ce(logits, label, 1)))
    logits3 = vals3(2, 3, 4)
    label3 = np.array([[[3], [0], [-100]], [[1], [2], [2]]])
    case(op, "3d", {"ring_id": 2, "rank": 1, "nranks": 4}, [logits3, T(label3, "int64")],
         list(np_c_softmax_ce(logits3, label3)))
    big = np.array([[1000.0, 999.0, -1000.0]])
    case(op, "large_logits", {}, [big, T(np.array([[1]]), "int64")],
         list(np_c_softmax_ce(big, np.array([[1]]))))
    lab = T(label, "int64")
    error(op, "label_past_classes", {}, [logits, T(np.array([[0], [5], [1], [1]]), "int64")],
          "inputs[1].data")
    error(op, "label_negative", {}, [logits, T(np.array([[0], [-1], [1], [1]]), "int64")],
          "inputs[1].data")
    error(op, "label_shape", {}, [logits, T(np.array([0, 1, 2, 3]), "int64")], "inputs[1].shape")
    error(op, "logits_0d", {}, [np.array(1.0), T(np.array(0), "int64")], "inputs[0].shape")
    error(op, "ring_id_negative", {"ring_id": -1}, [logits, lab], "attrs.ring_id")
    error(op, "nranks_negative", {"nranks": -2}, [logits, lab], "attrs.nranks")
    error(op, "rank_past_nranks", {"rank": 2, "nranks": 2}, [logits, lab], "attrs.rank")

    op = "c_softmax_with_cross_entropy_grad"

    def grad(p, label, g, ignore_index=-100, start=0):
        ids = label[..., 0]
        onehot = (np.arange(p.shape[-1]) + start == ids[..., None]).astype(np.float64)
        out = (p - onehot) * g
        return np.where((ids == ignore_index)[..., None], 0.0, out)

    p = np_softmax(vals3(4, 5), -1)
    g = vals3(4, 1)
    label = np.array([[0], [4], [2], [3]])
    case(op, "hard_label", {}, [p, T(label, "int64"), g], [grad(p, label, g)])
    label = np.array([[1], [4], [1], [0]])
    case(op, "ignore_index_1", {"ignore_index": 1}, [p, T(label, "int64"), g],
         [grad(p, label, g, 1)])
    piece = p[:, 1:4]
    label = np.array([[0], [3], [6], [2]])
    case(op, "localized_piece", {"local": {"vocab_start": 2, "global_shape": [4, 7]}},
         [piece, T(label, "int64"), g], [grad(piece, label, g, start=2)])
    error(op, "localized_label_past_global", {"local": {"vocab_start": 2, "global_shape": [4, 7]}},
          [piece, T(np.array([[0], [7], [1], [1]]), "int64"), g], "inputs[1].data")
    error(op, "label_past_classes", {}, [p, T(np.array([[0], [5], [1], [1]]), "int64"), g],
          "inputs[1].data")
    error(op, "loss_grad_shape", {}, [p, lab, vals3(4)], "inputs[2].shape")
    error(op, "label_shape", {}, [p, T(np.array([[0, 1]] * 4), "int64"), g], "inputs[1].shape")
    error(op, "softmax_0d", {}, [np.array(0.5), T(np.array(0), "int64"), np.array(1.0)],
          "inputs[0].shape")
    error(op, "rank_negative", {"rank": -1}, [p, lab, g], "attrs.rank")


def np_c_embedding_grad(rows, ids, g, start):
    """weight_grad [rows, H]: g's row t added at ids[t] - start where that is a row."""
    out = np.zeros((rows, g.shape[-1]))
    for t, i in enumerate(ids.reshape(-1)):
        if start <= i < start + rows:
            out[i - start] += g.reshape(-1, g.shape[-1])[t]
    return out


def gen_c_embedding_grad():
    op = "c_embedding_grad"
    w = vals3(4, 3)
    ids = np.array([[0, 5, 2], [3, 2, 1]])
    g = vals3(2, 3, 3)
    for start in (0, 2, 7):
        case(op, f"start_{start}", {"start_index": start}, [w, T(ids, "int64"), g],
             [np_c_embedding_grad(4, ids, g, start)])
    g1 = vals3(3)
    case(op, "0d_ids", {"start_index": 1}, [w, T(np.array(2), "int64"), g1],
         [np_c_embedding_grad(4, np.array(2), g1, 1)])
    error(op, "id_negative", {}, [w, T(np.array([-1]), "int64"), vals3(1, 3)], "inputs[1].data")
    error(op, "out_grad_shape", {}, [w, T(ids, "int64"), vals3(2, 3, 2)], "inputs[2].shape")
    error(op, "weight_rank", {}, [vals3(4), T(np.array([1]), "int64"), vals3(1, 3)],
          "inputs[0].shape")
    error(op, "start_negative", {"start_index": -1}, [w, T(np.array([1]), "int64"), vals3(1, 3)],
          "attrs.start_index")


family("norm_grad", ["layer_norm_grad", "rms_norm_grad"])


def rows_of(x, begin):
    """x as [rows, n], n = prod(x.shape[begin:]) (begin may be negative)."""
    begin = begin % x.ndim if x.ndim else 0
    n = int(np.prod(x.shape[begin:]))
    return x.reshape(-1, n), begin


def np_layer_norm_grad(x, scale, mean, var, g, eps, begin):
    """Row by row: std = sqrt(var + eps), xhat = (x - mean) / std, dxhat = g scale;
    dx = (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) / std; dscale = sum over the rows
    of g xhat, dbias = sum of g."""
    x2, _ = rows_of(x, begin)
    g2 = g.reshape(x2.shape)
    std = np.sqrt(np.reshape(var, (-1, 1)) + eps)
    xhat = (x2 - np.reshape(mean, (-1, 1))) / std
    dxhat = g2 * scale.reshape(1, -1)
    dx = (dxhat - dxhat.mean(axis=1, keepdims=True)
          - xhat * (dxhat * xhat).mean(axis=1, keepdims=True)) / std
    return [dx.reshape(x.shape), (g2 * xhat).sum(axis=0), g2.sum(axis=0)]


def np_rms_norm_grad(x, scale, invvar, g, begin):
    """Row by row: xhat = x invvar, dxhat = g scale; dx = invvar (dxhat - xhat
    mean(dxhat xhat)); dscale = sum over the rows of g xhat."""
    x2, _ = rows_of(x, begin)
    g2 = g.reshape(x2.shape)
    inv = np.reshape(invvar, (-1, 1))
    xhat = x2 * inv
    dxhat = g2 * scale.reshape(1, -1)
    dx = inv * (dxhat - xhat * (dxhat * xhat).mean(axis=1, keepdims=True))
    return [dx.reshape(x.shape), (g2 * xhat).sum(axis=0)]


def norm_forward(x, scale, bias, eps, begin, rms):
    """layer_norm's (out, mean, variance) or rms_norm's (out, invvar), stats x.shape[:begin]."""
    x2, b = rows_of(x, begin)
    if rms:
        inv = 1.0 / np.sqrt((x2 * x2).mean(axis=1) + eps)
        return (x2 * inv[:, None] * scale).reshape(x.shape), inv.reshape(x.shape[:b])
    mean, var = x2.mean(axis=1), x2.var(axis=1)
    out = (x2 - mean[:, None]) / np.sqrt(var[:, None] + eps) * scale + bias
    return out.reshape(x.shape), mean.reshape(x.shape[:b]), var.reshape(x.shape[:b])


def check_against_differences(x, scale, bias, g, eps, begin, rms, grads):
    """The grads of sum(g out) from central differences of the forward above: the goldens'
    formulas are the gradient through out when the statistics are the forward's."""
    def loss(xv, sv, bv):
        return float(np.sum(g * norm_forward(xv, sv, bv, eps, begin, rms)[0]))
    h = 1e-6
    for k, arg in enumerate([x, scale] if rms else [x, scale, bias]):
        numeric = np.zeros(arg.shape)
        for i in np.ndindex(arg.shape):
            args = [x.copy(), scale.copy(), bias.copy()]
            args[k][i] += h
            up = loss(*args)
            args[k][i] -= 2 * h
            numeric[i] = (up - loss(*args)) / (2 * h)
        assert np.allclose(numeric, grads[k], atol=1e-6), (k, numeric, grads[k])


def gen_norm_grad():
    def pos3(*shape):
        return np.round(RNG3.uniform(0.1, 2.0, size=shape), 2)

    for label, shape, begin, attrs, forward_stats in [
            ("default_begin1", (2, 3, 4), 1, {}, True),
            ("begin2", (2, 3, 4), 2, {"begin_norm_axis": 2}, True),
            ("begin2_given_stats", (2, 3, 4), 2, {"begin_norm_axis": 2}, False),
            ("begin_minus1_eps", (3, 4), -1, {"begin_norm_axis": -1, "epsilon": 1e-3}, True),
            ("begin0", (2, 3), 0, {"begin_norm_axis": 0}, False),
            ("empty_rows", (0, 4), 1, {}, False),
            ("size1", (2, 1), 1, {}, True)]:
        x, g = vals3(*shape), vals3(*shape)
        _, b = rows_of(x, begin)
        n = int(np.prod(shape[b:]))
        scale, bias = vals3(n), vals3(n)
        stats_shape = shape[:b]
        eps = attrs.get("epsilon", 1e-5)
        if forward_stats:
            _, mean, var = norm_forward(x, scale, bias, eps, begin, rms=False)
        else:
            mean, var = vals3(*stats_shape), pos3(*stats_shape)
        grads = np_layer_norm_grad(x, scale, mean, var, g, eps, begin)
        if forward_stats and n > 1:
            check_against_differences(x, scale, bias, g, eps, begin, False, grads)
        case("layer_norm_grad", label, attrs, [x, scale, bias, mean, var, g], grads)
        eps = attrs.get("epsilon", 1e-6)
        if forward_stats:
            _, inv = norm_forward(x, scale, None, eps, begin, rms=True)
        else:
            inv = pos3(*stats_shape)
        grads = np_rms_norm_grad(x, scale, inv, g, begin)
        if forward_stats:
            check_against_differences(x, scale, bias, g, eps, begin, True, grads)
        case("rms_norm_grad", label, attrs, [x, scale, inv, g], grads)

    x, g = vals3(2, 3), vals3(2, 3)
    s3, st = vals3(3), pos3(2)
    op = "layer_norm_grad"
    error(op, "scale_shape", {}, [x, vals3(2), s3, st, st, g], "inputs[1].shape")
    error(op, "bias_shape", {}, [x, s3, vals3(1, 3), st, st, g], "inputs[2].shape")
    error(op, "mean_shape", {}, [x, s3, s3, pos3(3), st, g], "inputs[3].shape")
    error(op, "variance_flattened", {"begin_norm_axis": 2},
          [vals3(2, 3, 2), vals3(2), vals3(2), pos3(2, 3), pos3(6), vals3(2, 3, 2)],
          "inputs[4].shape")
    error(op, "out_grad_shape", {}, [x, s3, s3, st, st, vals3(3, 2)], "inputs[5].shape")
    error(op, "begin_out_of_range", {"begin_norm_axis": 2}, [x, vals3(1), vals3(1), st, st, g],
          "attrs.begin_norm_axis")
    error(op, "empty_norm_set", {}, [vals3(2, 0), vals3(0), vals3(0), st, st, vals3(2, 0)],
          "inputs[0].shape")
    error(op, "five_inputs", {}, [x, s3, s3, st, st], "inputs")
    op = "rms_norm_grad"
    error(op, "scale_shape", {}, [x, vals3(6), st, g], "inputs[1].shape")
    error(op, "invvar_shape", {}, [x, s3, pos3(2, 1), g], "inputs[2].shape")
    error(op, "out_grad_shape", {}, [x, s3, st, vals3(2, 3, 1)], "inputs[3].shape")
    error(op, "begin_out_of_range", {"begin_norm_axis": -3}, [x, vals3(6), pos3(), g],
          "attrs.begin_norm_axis")
    error(op, "three_inputs", {}, [x, s3, st], "inputs")


# conv2d_grad: a generator of its own (RNG4), so that every case above keeps its values.

RNG4 = np.random.default_rng(20261203)


def vals4(*shape):
    return np.round(RNG4.uniform(-2.0, 2.0, size=shape), 2)


def np_conv2d_grad(x, w, g, strides=(1, 1), paddings=(0, 0), algorithm="EXPLICIT",
                   dilations=(1, 1), groups=1, data_format="NCHW"):
    """From conv2d's definition: out[:, oc] has the terms patch * w[oc, :, i, j] for each
    tap, so that tap's filter_grad is the sum of g[:, oc] * patch over the batch and the
    positions, and the padded x's patch gets g[:, oc] * w[oc, :, i, j]; input_grad is the
    padded x's gradient with the padding cut off."""
    xp, pads, dil, out_size = conv_padded(x, w, strides, paddings, algorithm, dilations,
                                          data_format)
    if data_format == "NHWC":
        g = np.transpose(g, (0, 3, 1, 2))
    xp_grad = np.zeros_like(xp)
    w_grad = np.zeros_like(w)
    for oc, i, j, patch in conv_taps(w, strides, dil, out_size, groups):
        w_grad[oc, :, i, j] = np.einsum("nchw,nhw->c", xp[patch], g[:, oc])
        xp_grad[patch] += np.einsum("nhw,c->nchw", g[:, oc], w[oc, :, i, j])
    h, wd = xp.shape[2] - pads[0] - pads[1], xp.shape[3] - pads[2] - pads[3]
    x_grad = xp_grad[:, :, pads[0]:pads[0] + h, pads[2]:pads[2] + wd]
    if data_format == "NHWC":
        x_grad = np.transpose(x_grad, (0, 2, 3, 1))
    return [x_grad, w_grad]


def gen_conv_grad():
    op = "conv2d_grad"
    forms = [
        ("nchw", {}, (2, 3, 5, 4), (4, 3, 2, 2), {}),
        ("padded_strided", {"strides": [2, 1], "paddings": [1, 0, 2, 1]}, (2, 3, 5, 4),
         (4, 3, 2, 2), {"strides": (2, 1), "paddings": (1, 0, 2, 1)}),
        ("dilated", {"dilations": [2, 2], "paddings": [1, 1]}, (1, 2, 6, 5), (3, 2, 2, 3),
         {"dilations": (2, 2), "paddings": (1, 1)}),
        ("nhwc", {"data_format": "NHWC", "strides": [1, 2], "paddings": [1, 1]},
         (2, 5, 4, 3), (4, 3, 3, 2),
         {"data_format": "NHWC", "strides": (1, 2), "paddings": (1, 1)}),
        ("groups_2", {"groups": 2, "paddings": [1, 1]}, (2, 4, 4, 3), (6, 2, 3, 2),
         {"groups": 2, "paddings": (1, 1)}),
        ("nhwc_groups_strided_dilated", {"data_format": "NHWC", "groups": 2, "strides": [2, 1],
                                         "dilations": [1, 2], "paddings": [0, 1, 1, 0]},
         (2, 5, 4, 4), (4, 2, 2, 2),
         {"data_format": "NHWC", "groups": 2, "strides": (2, 1), "dilations": (1, 2),
          "paddings": (0, 1, 1, 0)}),
        ("same", {"padding_algorithm": "SAME", "strides": [2, 3], "dilations": [3, 3]},
         (2, 3, 5, 4), (4, 3, 2, 2),
         {"algorithm": "SAME", "strides": (2, 3), "dilations": (3, 3)}),
        ("valid", {"padding_algorithm": "VALID", "paddings": [2, 2]}, (1, 3, 4, 4),
         (2, 3, 3, 3), {"algorithm": "VALID", "paddings": (2, 2)}),
    ]
    for name, attrs, xs, ws, kw in forms:
        x, w = vals4(*xs), vals4(*ws)
        g = vals4(*np_conv2d(x, w, **kw).shape)
        case(op, name, attrs, [x, w, g], np_conv2d_grad(x, w, g, **kw))
    x, w = vals4(2, 3, 5, 4), vals4(4, 3, 2, 2)
    g = vals4(2, 4, 4, 3)
    case(op, "empty_batch", {}, [np.zeros((0, 3, 5, 4)), w, np.zeros((0, 4, 4, 3))],
         [np.zeros((0, 3, 5, 4)), np.zeros((4, 3, 2, 2))])
    error(op, "out_grad_shape", {}, [x, w, vals4(2, 4, 4, 2)], "inputs[2].shape")
    error(op, "out_grad_nhwc_order", {}, [x, w, vals4(2, 4, 3, 4)], "inputs[2].shape")
    error(op, "out_grad_rank", {}, [x, w, vals4(2, 4, 12)], "inputs[2].shape")
    error(op, "filter_too_large", {}, [x, vals4(4, 3, 6, 2), g], "inputs[1].shape")
    error(op, "channels", {}, [x, vals4(4, 2, 2, 2), g], "inputs[1].shape")
    error(op, "input_rank", {}, [vals4(3, 5, 4), w, g], "inputs[0].shape")
    error(op, "stride_zero", {"strides": [0, 1]}, [x, w, g], "attrs.strides")
    error(op, "groups_zero", {"groups": 0}, [x, w, g], "attrs.groups")
    error(op, "two_inputs", {}, [x, w], "inputs")


# flash_attn_grad: a generator of its own (RNG5), so that every case above keeps its values.

RNG5 = np.random.default_rng(20261204)
family("attention", ["flash_attn_grad"])


def vals5(*shape):
    return np.round(RNG5.uniform(-2.0, 2.0, size=shape), 2)


def np_flash_attn_grad(q, k, v, out, lse, out_grad, mask=None, causal=False, row_offset=0,
                       global_sq=None):
    """The gradients of sum(out_grad * out) for out = P v, with P = exp(scores - lse) taken
    from the given lse (0 for the keys a causal row does not see), dP = out_grad v^T,
    D = rowsum(out_grad * out), dS = P (dP - D) / sqrt(d): q_grad = dS k, k_grad = dS^T q,
    v_grad = P^T out_grad. k and v are repeated over each group's q heads, and their
    gradients summed back over the group."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    r = h // hk
    global_sq = sq if global_sq is None else global_sq
    kk = np.repeat(k, r, axis=2)
    vv = np.repeat(v, r, axis=2)
    scores = np.einsum("bihd,bjhd->bhij", q, kk) / math.sqrt(d)
    if mask is not None:
        scores = scores + mask
    keep = np.ones((sq, sk), dtype=bool)
    if causal:
        rows = np.arange(sq)[:, None] + row_offset
        keep = np.arange(sk)[None, :] <= rows + sk - global_sq
    p = np.where(keep, np.exp(np.where(keep, scores, 0.0) - lse[..., None]), 0.0)
    dp = np.einsum("bihe,bjhe->bhij", out_grad, vv)
    dd = np.einsum("bihe,bihe->bhi", out_grad, out)
    ds = p * (dp - dd[..., None]) / math.sqrt(d)
    q_grad = np.einsum("bhij,bjhd->bihd", ds, kk)
    k_grad = np.einsum("bhij,bihd->bjhd", ds, q).reshape(b, sk, hk, r, d).sum(axis=3)
    v_grad = np.einsum("bhij,bihe->bjhe", p, out_grad).reshape(b, sk, hk, r, -1).sum(axis=3)
    return [q_grad, k_grad, v_grad]


def gen_attention_grad():
    op = "flash_attn_grad"
    none_seed, none_mask = T(np.array(0), "int64"), np.array(0.0)
    seed = T(np.array([3, 7]), "int64")
    q, k, v = vals5(2, 3, 2, 4), vals5(2, 5, 2, 4), vals5(2, 5, 2, 3)
    mask = vals5(2, 1, 3, 5)
    forms = [
        ("basic", {}, None, {}),
        ("causal", {"causal": True}, None, {"causal": True}),
        ("mask_heads_broadcast_seed", {}, mask, {}),
        ("causal_mask", {"causal": True}, mask, {"causal": True}),
    ]
    for name, attrs, m, kw in forms:
        out, _, lse = np_attention(q, k, v, m, **kw)
        g = vals5(*out.shape)
        inputs = [q, k, v, out, lse, seed if m is not None else none_seed,
                  m if m is not None else none_mask, g]
        case(op, name, attrs, inputs, np_flash_attn_grad(q, k, v, out, lse, g, m, **kw))
    qg, kg, vg = vals5(1, 4, 4, 2), vals5(1, 4, 2, 2), vals5(1, 4, 2, 3)
    out, _, lse = np_attention(qg, kg, vg, causal=True)
    g = vals5(*out.shape)
    case(op, "grouped_heads_causal", {"causal": True},
         [qg, kg, vg, out, lse, none_seed, none_mask, g],
         np_flash_attn_grad(qg, kg, vg, out, lse, g, causal=True))
    # out and softmax_lse are taken as given, not recomputed.
    out, lse, g = vals5(2, 3, 2, 3), vals5(2, 2, 3), vals5(2, 3, 2, 3)
    case(op, "given_out_and_lse", {}, [q, k, v, out, lse, none_seed, none_mask, g],
         np_flash_attn_grad(q, k, v, out, lse, g))
    # Localized: rows [1, 3) of a 4-row q, causal against 5 keys; q_grad is those rows of
    # the whole call's, k_grad and v_grad those rows' terms.
    q4 = vals5(2, 4, 2, 4)
    out4, _, lse4 = np_attention(q4, k, v, causal=True)
    g4 = vals5(*out4.shape)
    full = np_flash_attn_grad(q4, k, v, out4, lse4, g4, causal=True)
    local = np_flash_attn_grad(q4[:, 1:3], k, v, out4[:, 1:3], lse4[:, :, 1:3], g4[:, 1:3],
                               causal=True, row_offset=1, global_sq=4)
    assert np.allclose(local[0], full[0][:, 1:3])
    case(op, "localized_rows", {"causal": True, "local": {"offset": [0, 1, 0, 0],
                                "global_shape": [2, 4, 2, 4]}},
         [q4[:, 1:3], k, v, out4[:, 1:3], lse4[:, :, 1:3], none_seed, none_mask, g4[:, 1:3]],
         local)
    out, _, lse = np_attention(q, k, v)
    g = vals5(*out.shape)
    args = [q, k, v, out, lse, none_seed, none_mask, g]

    def with_input(i, x):
        return args[:i] + [x] + args[i + 1:]

    error(op, "seven_inputs", {}, args[:7], "inputs")
    error(op, "q_rank", {}, with_input(0, vals5(2, 3, 8)), "inputs[0].shape")
    error(op, "head_dim_mismatch", {}, with_input(1, vals5(2, 5, 2, 3)), "inputs[1].shape")
    error(op, "out_shape", {}, with_input(3, vals5(2, 3, 2, 4)), "inputs[3].shape")
    error(op, "lse_shape", {}, with_input(4, vals5(2, 3, 2)), "inputs[4].shape")
    error(op, "seed_shape", {}, with_input(5, T(np.array([1, 2, 3]), "int64")), "inputs[5].shape")
    error(op, "mask_shape", {}, with_input(6, vals5(2, 2, 3, 4)), "inputs[6].shape")
    error(op, "out_grad_shape", {}, with_input(7, vals5(2, 3, 2, 2)), "inputs[7].shape")
    error(op, "causal_more_rows", {"causal": True},
          [vals5(2, 6, 2, 4), k, v, vals5(2, 6, 2, 3), vals5(2, 2, 6), none_seed, none_mask,
           vals5(2, 6, 2, 3)], "attrs.causal")
    error(op, "dropout_range", {"dropout": 1.5}, args, "attrs.dropout")
    error(op, "dropout_training", {"dropout": 0.1}, args, "attrs.dropout", "Unsupported")


family("block_attention", ["block_attention", "block_attention_grad"])
RNG6 = np.random.default_rng(20261205)


def vals6(*shape):
    return np.round(RNG6.uniform(-2, 2, size=shape), 2)


def block_positions(rows, starts):
    """The global position of each row: len(starts) equal segments, segment s at starts[s]."""
    starts = starts or [0]
    seg = rows // len(starts)
    return np.array([starts[i // seg] + i % seg for i in range(rows)])


def block_scores(q, k, scale, causal, q_starts, k_starts):
    """scale q k^T per [b, h, i, j], -inf where key j is after query i (causal)."""
    scale = scale or 1.0 / math.sqrt(q.shape[3])
    scores = np.einsum("bihd,bjhd->bhij", q, k) * scale
    if causal:
        qp = block_positions(q.shape[1], q_starts)
        kp = block_positions(k.shape[1], k_starts)
        scores = np.where(kp[None, :] <= qp[:, None], scores, -np.inf)
    return scores, scale


def np_block_attention(q, k, v, out, lse, scale=0.0, causal=False, q_starts=(), k_starts=()):
    """The state (out, lse) with the block folded in: lse' = logaddexp(lse, logsumexp of
    the visible scores), out' = exp(lse - lse') out + sum_j exp(s_j - lse') v_j."""
    scores, _ = block_scores(q, k, scale, causal, list(q_starts), list(k_starts))
    with np.errstate(divide="ignore", invalid="ignore"):
        top = np.max(scores, axis=-1)
        safe = np.where(np.isfinite(top), top, 0.0)
        block_lse = np.where(np.isfinite(top),
                             safe + np.log(np.exp(scores - safe[..., None]).sum(axis=-1)), -np.inf)
        new_lse = np.logaddexp(lse, block_lse)
        ref = np.where(np.isfinite(new_lse), new_lse, 0.0)
        keep = np.where(np.isfinite(new_lse), np.exp(lse - ref), 1.0)  # [b, h, i]
        weights = np.where(np.isfinite(new_lse)[..., None], np.exp(scores - ref[..., None]), 0.0)
    new_out = out * np.transpose(keep, (0, 2, 1))[..., None] + np.einsum("bhij,bjhe->bihe", weights, v)
    return [new_out, new_lse]


def np_block_attention_grad(q, k, v, out, lse, g, scale=0.0, causal=False, q_starts=(), k_starts=()):
    """One block pair's gradients from the final out and lse: P = exp(s - lse),
    dS = P (g v^T - rowsum(g out)), q_grad = scale dS k, k_grad = scale dS^T q, v_grad = P^T g."""
    scores, scale = block_scores(q, k, scale, causal, list(q_starts), list(k_starts))
    finite = np.isfinite(lse)[..., None]
    p = np.where(finite, np.exp(scores - np.where(finite, lse[..., None], 0.0)), 0.0)
    dp = np.einsum("bihe,bjhe->bhij", g, v)
    delta = np.einsum("bihe,bihe->bhi", g, out)[..., None]
    ds = p * (dp - delta)
    return [scale * np.einsum("bhij,bjhd->bihd", ds, k),
            scale * np.einsum("bhij,bihd->bjhd", ds, q),
            np.einsum("bhij,bihe->bjhe", p, g)]


def gen_block_attention():
    op = "block_attention"
    q, k, v = vals6(2, 3, 2, 4), vals6(2, 5, 2, 4), vals6(2, 5, 2, 3)
    out, lse = vals6(2, 3, 2, 3), vals6(2, 2, 3)
    case(op, "basic", {}, [q, k, v, out, lse], np_block_attention(q, k, v, out, lse))
    case(op, "scale", {"scale": 0.25}, [q, k, v, out, lse],
         np_block_attention(q, k, v, out, lse, scale=0.25))
    case(op, "causal_offset", {"causal": True, "q_starts": [2]}, [q, k, v, out, lse],
         np_block_attention(q, k, v, out, lse, causal=True, q_starts=[2]))
    # Zigzag-like segments: q rows at 0, 1 and 8, 9; k rows at 1 and 9 (row 0 sees nothing).
    q4, k2, v2 = vals6(1, 4, 2, 4), vals6(1, 2, 2, 4), vals6(1, 2, 2, 3)
    o4, l4 = vals6(1, 4, 2, 3), vals6(1, 2, 4)
    segments = {"causal": True, "q_starts": [0, 8], "k_starts": [1, 9]}
    case(op, "segments_causal", segments, [q4, k2, v2, o4, l4],
         np_block_attention(q4, k2, v2, o4, l4, 0.0, True, [0, 8], [1, 9]))
    # The empty state (lse -inf) folded with a block is plain attention over it.
    empty_out, empty_lse = np.zeros((2, 3, 2, 3)), np.full((2, 2, 3), -np.inf)
    full = np_attention(q, k, v)
    case(op, "empty_state_is_attention", {}, [q, k, v, empty_out, empty_lse], [full[0], full[2]])
    # Two blocks folded in turn give the attention over both (checked here, once).
    first = np_block_attention(q, k[:, :2], v[:, :2], empty_out, empty_lse)
    second = np_block_attention(q, k[:, 2:], v[:, 2:], *first)
    assert np.allclose(second[0], full[0]) and np.allclose(second[1], full[2])
    case(op, "second_block", {}, [q, k[:, 2:], v[:, 2:], *first], [full[0], full[2]])
    # A causal row before every key keeps its state, -inf included.
    case(op, "row_sees_nothing", {"causal": True, "k_starts": [3]},
         [q, k, v, empty_out, empty_lse],
         np_block_attention(q, k, v, empty_out, empty_lse, causal=True, k_starts=[3]))
    error(op, "four_inputs", {}, [q, k, v, out], "inputs")
    error(op, "q_rank", {}, [vals6(2, 3, 8), k, v, out, lse], "inputs[0].shape")
    error(op, "k_heads", {}, [q, vals6(2, 5, 3, 4), v, out, lse], "inputs[1].shape")
    error(op, "v_rows", {}, [q, k, vals6(2, 4, 2, 3), out, lse], "inputs[2].shape")
    error(op, "out_shape", {}, [q, k, v, vals6(2, 3, 2, 4), lse], "inputs[3].shape")
    error(op, "lse_shape", {}, [q, k, v, out, vals6(2, 3, 2)], "inputs[4].shape")
    error(op, "scale_negative", {"scale": -1.0}, [q, k, v, out, lse], "attrs.scale")
    error(op, "q_starts_not_dividing", {"q_starts": [0, 4]}, [q, k, v, out, lse], "attrs.q_starts")
    error(op, "k_starts_negative", {"k_starts": [-1]}, [q, k, v, out, lse], "attrs.k_starts")

    op = "block_attention_grad"
    g = vals6(2, 3, 2, 3)
    for name, attrs in [("basic", {}), ("causal_offset", {"causal": True, "q_starts": [2]}),
                        ("scale", {"scale": 0.25})]:
        kw = {"scale": attrs.get("scale", 0.0), "causal": attrs.get("causal", False),
              "q_starts": attrs.get("q_starts", [])}
        o, l = np_block_attention(q, k, v, empty_out, empty_lse, **kw)
        case(op, name, attrs, [q, k, v, o, l, g], np_block_attention_grad(q, k, v, o, l, g, **kw))
    # The pairs' gradients sum to flash_attn_grad's over the whole sequence.
    out_full, _, lse_full = np_attention(q, k, v)
    parts = [np_block_attention_grad(q, k[:, a:b], v[:, a:b], out_full, lse_full, g)
             for a, b in [(0, 2), (2, 5)]]
    whole = np_block_attention_grad(q, k, v, out_full, lse_full, g)
    assert np.allclose(parts[0][0] + parts[1][0], whole[0])
    case(op, "second_block_of_two", {}, [q, k[:, 2:], v[:, 2:], out_full, lse_full, g], parts[1])
    o4, l4 = np_block_attention(q4, k2, v2, np.zeros((1, 4, 2, 3)), np.full((1, 2, 4), -np.inf),
                                0.0, True, [0, 8], [1, 9])
    g4 = vals6(1, 4, 2, 3)
    case(op, "segments_row_unseen", segments, [q4, k2, v2, o4, l4, g4],
         np_block_attention_grad(q4, k2, v2, o4, l4, g4, 0.0, True, [0, 8], [1, 9]))
    error(op, "five_inputs", {}, [q, k, v, out, lse], "inputs")
    error(op, "out_grad_shape", {}, [q, k, v, out, lse, vals6(2, 3, 2, 4)], "inputs[5].shape")
    error(op, "lse_shape", {}, [q, k, v, out, vals6(2, 3, 2), g], "inputs[4].shape")


family("optimizer", ["adamw"])
RNG7 = np.random.default_rng(20261206)


def vals7(*shape):
    return np.round(RNG7.uniform(-2, 2, size=shape), 2)


def np_adamw(p, g, m, v, lr=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.01, step=1):
    """PyTorch's AdamW step (train::AdamW): decoupled decay, bias correction by the step."""
    m2 = beta1 * m + (1 - beta1) * g
    v2 = beta2 * v + (1 - beta2) * g * g
    m_hat = m2 / (1 - beta1 ** step)
    v_hat = v2 / (1 - beta2 ** step)
    return [p * (1 - lr * weight_decay) - lr * m_hat / (np.sqrt(v_hat) + epsilon), m2, v2]


def gen_adamw():
    op = "adamw"
    p, g, m = vals7(2, 3), vals7(2, 3), vals7(2, 3)
    v = np.round(RNG7.uniform(0.0, 2, size=(2, 3)), 2)
    args = [p, g, m, v]
    case(op, "defaults", {}, args, np_adamw(*args))
    kw = {"lr": 0.1, "beta1": 0.5, "beta2": 0.75, "epsilon": 1e-3, "weight_decay": 0.2, "step": 4}
    case(op, "attrs", kw, args, np_adamw(*args, **kw))
    zero = np.zeros((2, 3))
    case(op, "first_step_from_zero", {"lr": 0.01}, [p, g, zero, zero],
         np_adamw(p, g, zero, zero, lr=0.01))
    case(op, "no_decay_late_step", {"weight_decay": 0.0, "step": 1000}, args,
         np_adamw(*args, weight_decay=0.0, step=1000))
    x0 = [np.array(0.5), np.array(-1.25), np.array(0.25), np.array(1.5)]
    case(op, "0d", {"lr": 0.05, "step": 2}, x0, np_adamw(*x0, lr=0.05, step=2))
    error(op, "beta1_one", {"beta1": 1.0}, args, "attrs.beta1")
    error(op, "beta2_negative", {"beta2": -0.1}, args, "attrs.beta2")
    error(op, "epsilon_zero", {"epsilon": 0.0}, args, "attrs.epsilon")
    error(op, "lr_negative", {"lr": -0.1}, args, "attrs.lr")
    error(op, "weight_decay_negative", {"weight_decay": -1.0}, args, "attrs.weight_decay")
    error(op, "step_zero", {"step": 0}, args, "attrs.step")
    error(op, "moment2_shape", {}, [p, g, m, vals7(3, 2)], "inputs[3].shape")


# ---- the unary math family (rules/engine/unary_math_list.h) ----------------------------------------

family("unary_math", list(UNARY_MATH_DEFAULTS))
RNG8 = np.random.default_rng(20261207)
_erf = np.vectorize(math.erf, otypes=[float])


def _softplus(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.log1p(np.exp(beta * x)) / beta)


def _np_unary_math(op, x, a):
    """Each op from its definition (numpy), attrs `a` with the defaults filled."""
    sig = 1 / (1 + np.exp(-x))
    return {
        "sin": np.sin(x), "cos": np.cos(x), "tan": np.tan(x), "asin": np.arcsin(x),
        "acos": np.arccos(x), "atan": np.arctan(x), "sinh": np.sinh(x), "cosh": np.cosh(x),
        "asinh": np.arcsinh(x), "atanh": np.arctanh(x), "expm1": np.expm1(x),
        "log1p": np.log1p(x), "log2": np.log2(x), "log10": np.log10(x), "erf": _erf(x),
        "ceil": np.ceil(x), "floor": np.floor(x),
        "round": np.sign(x) * np.floor(np.abs(x) + 0.5),  # halves away from zero (std::round)
        "trunc": np.trunc(x), "sign": np.sign(x), "reciprocal": 1 / x, "square": x * x,
        "logsigmoid": np.log(sig), "softsign": x / (1 + np.abs(x)),
        "softplus": _softplus(x, a.get("beta", 1.0), a.get("threshold", 20.0)),
        "mish": x * np.tanh(_softplus(x, 1.0, a.get("threshold", 20.0))),
        "swish": x * sig, "relu6": np.minimum(np.maximum(x, 0), 6),
        "hardswish": x * np.minimum(np.maximum(x + 3, 0), 6) / 6,
        "hardsigmoid": np.clip(a.get("slope", 0) * x + a.get("offset", 0), 0, 1),
        "leaky_relu": np.where(x > 0, x, a.get("negative_slope", 0) * x),
        "elu": np.where(x > 0, x, a.get("alpha", 1) * np.expm1(x)),
        "celu": np.where(x > 0, x, a.get("alpha", 1) * np.expm1(x / a.get("alpha", 1))),
        "selu": a.get("scale", 1) * np.where(x > 0, x, a.get("alpha", 1) * np.expm1(x)),
        "hardshrink": np.where(np.abs(x) > a.get("threshold", 0), x, 0.0),
        "softshrink": np.where(x > a.get("threshold", 0), x - a.get("threshold", 0),
                               np.where(x < -a.get("threshold", 0), x + a.get("threshold", 0), 0.0)),
        "hardtanh": np.clip(x, a.get("t_min", 0), a.get("t_max", 0)),
        "thresholded_relu": np.where(x > a.get("threshold", 0), x, a.get("value", 0)),
        "stanh": a.get("scale_b", 0) * np.tanh(a.get("scale_a", 0) * x),
        "tanh_shrink": x - np.tanh(x), "assign": x,
        "logit": np.log(np.clip(x, a.get("eps", 0), 1 - a.get("eps", 0)) /
                        (1 - np.clip(x, a.get("eps", 0), 1 - a.get("eps", 0)))),
    }[op]


def gen_unary_math():
    def um_vals(*shape, lo=-3.0, hi=3.0):
        return np.round(RNG8.uniform(lo, hi, size=shape), 2)

    def um_case(op, name, x, attrs=None):
        attrs = attrs or {}
        with np.errstate(all="ignore"):
            out = _np_unary_math(op, x, {**UNARY_MATH_DEFAULTS[op], **attrs})
        case(op, name, attrs, [x], [out])

    domain = {"asin": (-0.95, 0.95), "acos": (-0.95, 0.95), "atanh": (-0.95, 0.95),
              "log1p": (-0.95, 3.0), "log2": (0.05, 4.0), "log10": (0.05, 40.0),
              "logit": (-0.5, 1.5)}
    for op in UNARY_MATH_DEFAULTS:
        if op in _UNARY_MATH_LATER or op in _UNARY_MATH_DTYPES:
            continue  # gen_unary_math_later: the cases before keep their random values
        lo, hi = domain.get(op, (-3.0, 3.0))
        x = um_vals(2, 3, lo=lo, hi=hi)
        if op == "reciprocal":
            x = np.where(np.abs(x) < 0.1, 0.5, x)
        um_case(op, "basic", x)
        x3 = um_vals(2, 1, 3, lo=lo, hi=hi)
        x0 = um_vals(lo=lo, hi=hi)
        if op == "reciprocal":
            x3, x0 = np.where(np.abs(x3) < 0.1, -0.5, x3), np.float64(1.25)
        um_case(op, "3d", x3)
        um_case(op, "0d", np.array(x0))
    # Branches the basic values may miss.
    um_case("round", "halves_away_from_zero", np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]))
    um_case("relu6", "above_six", np.array([-1.0, 3.0, 6.0, 7.5]))
    um_case("hardswish", "both_clips", np.array([-4.0, -3.0, -1.0, 0.5, 3.0, 4.5]))
    um_case("softplus", "linear_branch", np.array([-1.0, 0.5, 3.0]), {"beta": 8.0, "threshold": 2.0})
    um_case("mish", "linear_branch", np.array([-1.0, 0.5, 3.0]), {"threshold": 1.0})
    um_case("hardtanh", "minus_one_one", um_vals(5), {"t_min": -1.0, "t_max": 1.0})
    um_case("thresholded_relu", "value", np.array([-1.0, 0.5, 1.5]), {"threshold": 0.25, "value": -2.0})
    um_case("celu", "alpha_half", um_vals(4), {"alpha": 0.5})
    um_case("leaky_relu", "slope", um_vals(4), {"negative_slope": 0.3})
    um_case("logit", "eps_clamps", np.array([-0.5, 0.0, 0.2, 0.99, 1.0, 1.5]), {"eps": 0.05})
    um_case("sign", "zero", np.array([-2.0, 0.0, 3.0]))
    um_case("sin", "empty", np.zeros((2, 0)))
    um_case("cos", "0d", np.array(0.5))
    error("celu", "alpha_zero", {"alpha": 0.0}, [um_vals(3)], "attrs.alpha")
    error("softshrink", "negative_threshold", {"threshold": -0.5}, [um_vals(3)], "attrs.threshold")
    error("hardtanh", "min_above_max", {"t_min": 1.0, "t_max": -1.0}, [um_vals(3)], "attrs.t_min")
    error("logit", "eps_half", {"eps": 0.5}, [um_vals(3)], "attrs.eps")
    error("round", "decimals", {"decimals": 2}, [um_vals(3)], "attrs.decimals", "Unsupported")
    error("sin", "two_inputs", {}, [um_vals(3), um_vals(3)], "inputs")


# ---- the binary math family (rules/engine/binary_math_list.h) ---------------------------------------

family("binary_math", list(BINARY_MATH_DEFAULTS))
RNG9 = np.random.default_rng(20261203)

# Each op from its definition (numpy): (function, output dtype).
_BINARY_MATH = {
    "elementwise_pow": (np.power, "float64"),
    "floor_divide": (lambda x, y: np.floor(x / y), "float64"),
    "remainder": (np.mod, "float64"),  # the divisor's sign, as Python's %
    "fmax": (np.fmax, "float64"), "fmin": (np.fmin, "float64"),
    "heaviside": (np.heaviside, "float64"),
    "equal": (np.equal, "bool"), "not_equal": (np.not_equal, "bool"),
    "greater_equal": (np.greater_equal, "bool"), "less_equal": (np.less_equal, "bool"),
    "logical_and": (np.logical_and, "bool"), "logical_or": (np.logical_or, "bool"),
    "logical_xor": (np.logical_xor, "bool"),
    "bitwise_and": (np.bitwise_and, "int64"), "bitwise_or": (np.bitwise_or, "int64"),
    "bitwise_xor": (np.bitwise_xor, "int64"),
    "trunc_divide": (lambda x, y: np.trunc(x / y), "float64"),  # toward zero
}


def gen_binary_math():
    def bm_vals(*shape, lo=-3.0, hi=3.0):
        return np.round(RNG9.uniform(lo, hi, size=shape), 1)  # one decimal: ties for the comparisons

    def bm_case(op, name, x, y, dtype=None):
        fn, out_dtype = _BINARY_MATH[op]
        in_dtype = dtype or ("int64" if out_dtype == "int64" else "float64")
        xa, ya = np.asarray(x), np.asarray(y)
        if in_dtype in ("int64", "bool"):
            xa, ya = xa.astype(np.int64), ya.astype(np.int64)
            if in_dtype == "bool":
                xa, ya = xa.astype(bool), ya.astype(bool)
        with np.errstate(all="ignore"):
            out = fn(xa, ya)
        if op.startswith("bitwise_") and in_dtype == "bool":
            out_dtype = "bool"
        case(op, name, {}, [T(xa, in_dtype), T(ya, in_dtype)], [T(out, out_dtype)])

    for op, (_, out_dtype) in _BINARY_MATH.items():
        if op in _BINARY_MATH_LATER:
            continue  # gen_math_dtypes: the cases before keep their random values
        if out_dtype == "int64":  # the bitwise ops: int64 values, negatives included
            mk = lambda *s: RNG9.integers(-8, 16, size=s)
        elif op == "elementwise_pow":
            mk = lambda *s: bm_vals(*s, lo=0.1, hi=3.0)
        else:
            mk = bm_vals
        x, y = mk(2, 3), mk(2, 3)
        if op in ("floor_divide", "remainder"):
            y = np.where(np.abs(y) < 0.25, 0.5, y)
        if op.startswith("logical_"):
            x, y = np.where(RNG9.uniform(size=(2, 3)) < 0.5, 0.0, x), np.where(RNG9.uniform(size=(2, 3)) < 0.5, 0.0, y)
        bm_case(op, "basic", x, y)
        xb, yb = mk(2, 1, 3), mk(4, 1)  # broadcast both ways
        if op in ("floor_divide", "remainder"):
            yb = np.where(np.abs(yb) < 0.25, -0.5, yb)
        bm_case(op, "broadcast", xb, yb)
        x0 = mk(3)
        y0 = np.asarray(mk(1)[0] if op not in ("floor_divide", "remainder") else 1.5)
        bm_case(op, "0d_y", x0, y0)
    # Branches and dtypes the random values may miss.
    bm_case("remainder", "signs", np.array([-7.0, 7.0, -7.0, 7.0, 6.0]), np.array([3.0, -3.0, -3.0, 3.0, -3.0]))
    bm_case("floor_divide", "signs", np.array([-7.0, 7.0, -7.0, 7.0]), np.array([2.0, -2.0, -2.0, 2.0]))
    bm_case("fmax", "nan_ignored", np.array([np.nan, 1.0, 3.0]), np.array([2.0, np.nan, -1.0]))
    bm_case("fmin", "nan_ignored", np.array([np.nan, 1.0, 3.0]), np.array([2.0, np.nan, -1.0]))
    bm_case("heaviside", "zero_takes_y", np.array([-1.5, 0.0, 0.0, 2.0]), np.array([0.5, 0.25, -3.0, 0.5]))
    bm_case("equal", "ties", np.array([1.0, 2.0, -0.0]), np.array([1.0, 2.5, 0.0]))
    bm_case("greater_equal", "ties", np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.5, 2.0]))
    bm_case("less_equal", "int64", np.array([1, 2, 3]), np.array([[1], [2]]), "int64")
    bm_case("logical_xor", "bool", np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]), "bool")
    bm_case("bitwise_and", "bool", np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]), "bool")
    bm_case("bitwise_xor", "bool", np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]), "bool")
    bm_case("bitwise_or", "negative", np.array([-1, -8, 5]), np.array([0, 3, -6]), "int64")
    bm_case("logical_and", "empty", np.zeros((2, 0)), np.zeros((1, 0)))
    error("bitwise_and", "float_x", {}, [bm_vals(3), T([1, 2, 3], "int64")], "inputs[0].dtype")
    error("bitwise_or", "float_y", {}, [T([1, 2, 3], "int64"), bm_vals(3)], "inputs[1].dtype")
    error("fmax", "shapes", {}, [bm_vals(2, 3), bm_vals(4)], "inputs[1].shape")
    error("equal", "one_input", {}, [bm_vals(3)], "inputs")


# Ops added to the family later, with their own RNG. digamma from mpmath (arbitrary
# precision; only this generator needs it), lgamma from Python's math.lgamma.
_UNARY_MATH_LATER = ("acosh", "lgamma", "digamma")
RNG10 = np.random.default_rng(20261204)


def gen_unary_math_later():
    import mpmath

    fns = {"acosh": np.arccosh,
           "lgamma": np.vectorize(math.lgamma, otypes=[float]),
           "digamma": np.vectorize(lambda v: float(mpmath.digamma(v)), otypes=[float])}

    def later_case(op, name, x):
        case(op, name, {}, [x], [fns[op](np.asarray(x, dtype=np.float64))])

    for op in _UNARY_MATH_LATER:
        lo, hi = (1.05, 4.0) if op == "acosh" else (0.05, 4.0)
        later_case(op, "basic", np.round(RNG10.uniform(lo, hi, size=(2, 3)), 2))
        later_case(op, "3d", np.round(RNG10.uniform(lo, hi, size=(2, 1, 3)), 2))
        later_case(op, "0d", np.array(np.round(RNG10.uniform(lo, hi), 2)))
    later_case("acosh", "one", np.array([1.0, 10.0, 1e6]))
    later_case("lgamma", "negative_and_large", np.array([-0.5, -1.5, -2.25, 30.5, 171.5]))
    later_case("digamma", "negative_and_large", np.array([-0.5, -1.5, -2.25, 1.4616321449683622, 30.5, 1e5]))


# The family ops added with bool and integer dtypes (and erfinv, conj, fill; trunc_divide
# in the binary family), with their own RNG. erfinv from mpmath.
_UNARY_MATH_DTYPES = ("erfinv", "conj", "fill", "logical_not", "bitwise_not")
_BINARY_MATH_LATER = ("trunc_divide",)
RNG11 = np.random.default_rng(20261205)


def gen_math_dtypes():
    import mpmath

    def dt_case(op, name, x, out, attrs=None, in_dtype="float64", out_dtype="float64"):
        case(op, name, attrs or {}, [T(np.asarray(x), in_dtype)], [T(np.asarray(out), out_dtype)])

    erfinv = np.vectorize(lambda v: float(mpmath.erfinv(v)), otypes=[float])
    for name, x in (("basic", RNG11.uniform(-0.99, 0.99, size=(2, 3))),
                    ("3d", RNG11.uniform(-0.99, 0.99, size=(2, 1, 3))),
                    ("0d", np.array(RNG11.uniform(-0.99, 0.99)))):
        x = np.round(x, 3)
        dt_case("erfinv", name, x, erfinv(x))
        dt_case("conj", name, x, x)
        dt_case("fill", name, x, np.full_like(x, 0.0))
    dt_case("erfinv", "tails", np.array([-1.0, -0.999999, 0.0, 1e-10, 0.999999, 1.0]),
            np.array([-np.inf, float(mpmath.erfinv(-0.999999)), 0.0, float(mpmath.erfinv(1e-10)),
                      float(mpmath.erfinv(0.999999)), np.inf]))
    dt_case("fill", "value", np.array([[1.5, -2.0], [np.nan, 4.0]]), np.full((2, 2), -2.5), {"value": -2.5})
    dt_case("fill", "empty", np.zeros((2, 0)), np.zeros((2, 0)), {"value": 3.0})
    dt_case("conj", "int64", np.array([3, -4, 0]), np.array([3.0, -4.0, 0.0]), in_dtype="int64")
    # logical_not: x == 0, any input dtype, bool out.
    xl = np.where(RNG11.uniform(size=(2, 3)) < 0.5, 0.0, np.round(RNG11.uniform(-3, 3, size=(2, 3)), 1))
    dt_case("logical_not", "basic", xl, xl == 0, out_dtype="bool")
    dt_case("logical_not", "bool", np.array([True, False, True]), np.array([False, True, False]),
            in_dtype="bool", out_dtype="bool")
    dt_case("logical_not", "int64", np.array([[0, 5], [-1, 0]]), np.array([[True, False], [False, True]]),
            in_dtype="int64", out_dtype="bool")
    dt_case("logical_not", "0d", np.array(0.0), np.array(True), out_dtype="bool")
    # bitwise_not: ~x on int64 (negatives included), not on bool.
    xi = RNG11.integers(-8, 16, size=(2, 3))
    dt_case("bitwise_not", "basic", xi, np.invert(xi), in_dtype="int64", out_dtype="int64")
    dt_case("bitwise_not", "extremes", np.array([0, -1, 2**40, -2**40]),
            np.invert(np.array([0, -1, 2**40, -2**40], dtype=np.int64)), in_dtype="int64", out_dtype="int64")
    dt_case("bitwise_not", "bool", np.array([True, False]), np.array([False, True]), in_dtype="bool", out_dtype="bool")
    dt_case("bitwise_not", "0d", np.array(5), np.array(-6), in_dtype="int64", out_dtype="int64")
    error("bitwise_not", "float_x", {}, [np.array([1.0, 2.0])], "inputs[0].dtype")
    error("fill", "no_input", {}, [], "inputs")
    error("logical_not", "two_inputs", {}, [np.array([1.0]), np.array([1.0])], "inputs")
    # trunc_divide: toward zero (floor_divide rounds down).
    x, y = np.round(RNG11.uniform(-3, 3, size=(2, 3)), 1), np.round(RNG11.uniform(0.25, 3, size=(2, 3)), 1)
    y = y * np.where(RNG11.uniform(size=(2, 3)) < 0.5, -1, 1)
    case("trunc_divide", "basic", {}, [x, y], [np.trunc(x / y)])
    xb, yb = np.round(RNG11.uniform(-3, 3, size=(2, 1, 3)), 1), np.array([[1.5], [-0.5], [2.0], [-2.5]])
    case("trunc_divide", "broadcast", {}, [xb, yb], [np.trunc(xb / yb)])
    case("trunc_divide", "signs", {}, [np.array([-7.0, 7.0, -7.0, 7.0]), np.array([2.0, -2.0, -2.0, 2.0])],
         [np.array([-3.0, -3.0, 3.0, 3.0])])
    error("trunc_divide", "shapes", {}, [np.zeros((2, 3)), np.zeros((4,))], "inputs[1].shape")


# ---- the extrema family (rules/ops/extrema.cc) -------------------------------------------------------

family("extrema", ["amax", "amin", "argmin", "cummax", "cummin"])
RNG12 = np.random.default_rng(20261206)


def gen_extrema():
    def ex_vals(*shape):
        return np.round(RNG12.uniform(-3, 3, size=shape), 1)  # one decimal: some ties

    for op, fn in (("amax", np.max), ("amin", np.min)):
        x = ex_vals(2, 3, 4)
        case(op, "axis1", {"axis": [1]}, [x], [fn(x, axis=1)])
        case(op, "axes_keep", {"axis": [0, -1], "keep_dim": True}, [x], [fn(x, axis=(0, 2), keepdims=True)])
        case(op, "all", {"reduce_all": True}, [x[0]], [fn(x[0])])
        case(op, "ties", {"axis": [1]}, [np.array([[1.0, 3.0, 3.0], [-2.0, -2.0, 0.5]])],
             [fn(np.array([[1.0, 3.0, 3.0], [-2.0, -2.0, 0.5]]), axis=1)])
        error(op, "axis_twice", {"axis": [1, -2]}, [ex_vals(2, 3, 4)], "attrs.axis")
    x = ex_vals(3, 4)
    case("argmin", "last_axis", {}, [x], [T(np.argmin(x, axis=-1), "int64")])
    x3 = ex_vals(2, 3, 4)
    case("argmin", "axis1_keepdims", {"axis": 1, "keepdims": True}, [x3], [T(np.argmin(x3, axis=1)[:, None, :], "int64")])
    case("argmin", "flatten", {"flatten": True}, [x], [T(np.array([np.argmin(x)]), "int64")])
    case("argmin", "first_of_ties", {"axis": 0}, [np.array([[2.0, -1.0], [0.5, -1.0], [0.5, 4.0]])],
         [T(np.array([1, 0]), "int64")])
    case("argmin", "int64", {}, [T(np.array([[3, -7, -7, 2]]), "int64")], [T(np.array([1]), "int64")])
    case("argmin", "0d", {}, [np.array(1.5)], [T(np.array(0), "int64")])
    error("argmin", "empty_axis", {"axis": 1}, [np.zeros((2, 0))], "inputs[0].shape")
    error("argmin", "dtype", {"dtype": "int32"}, [x], "attrs.dtype")
    gen_cum_extremes()


RNG14 = np.random.default_rng(20261208)


def cum_extreme(x, axis, later_or_equal):
    """The running extreme along axis and its index, from the definition: an element at
    least as far out as the extreme so far replaces it (ties take the later index); the
    first NaN stays, with its index."""
    x = np.asarray(x, dtype=np.float64)
    moved = np.moveaxis(x, axis, -1)
    out, idx = np.empty_like(moved), np.zeros(moved.shape, dtype=np.int64)
    for pos in np.ndindex(moved.shape[:-1]):
        best, at = None, 0
        for a, v in enumerate(moved[pos]):
            if best is None or (not math.isnan(best) and (math.isnan(v) or later_or_equal(v, best))):
                best, at = v, a
            out[pos + (a,)], idx[pos + (a,)] = best, at
    return np.moveaxis(out, -1, axis), np.moveaxis(idx, -1, axis)


def gen_cum_extremes():
    def cx(*shape):
        return np.round(RNG14.uniform(-3, 3, size=shape), 0)  # whole numbers: ties
    for op, beyond in (("cummax", lambda v, b: v >= b), ("cummin", lambda v, b: v <= b)):
        x = cx(3, 5)
        o, i = cum_extreme(x, -1, beyond)
        case(op, "last_axis", {}, [x], [o, T(i, "int64")])
        x3 = cx(2, 4, 3)
        o, i = cum_extreme(x3, 1, beyond)
        case(op, "axis1", {"axis": 1}, [x3], [o, T(i, "int64")])
        xt = np.array([[1.0, 5.0, 5.0, -2.0], [2.0, 2.0, -1.0, -1.0]])  # (goldens hold no NaN)
        o, i = cum_extreme(xt, 1, beyond)
        case(op, "ties", {"axis": 1}, [xt], [o, T(i, "int64")])
        xi = np.array([[4, -1, 4, 7], [0, 0, -3, 0]])
        o, i = cum_extreme(xi, 1, beyond)
        case(op, "int64", {}, [T(xi, "int64")], [T(o.astype(np.int64), "int64"), T(i, "int64")])
        case(op, "0d", {}, [np.array(2.5)], [np.array(2.5), T(np.array(0), "int64")])
        case(op, "empty_axis", {"axis": 0}, [np.zeros((0, 3))], [np.zeros((0, 3)), T(np.zeros((0, 3)), "int64")])
        error(op, "axis_out_of_range", {"axis": 2}, [cx(2, 3)], "attrs.axis")
        error(op, "dtype", {"dtype": "int32"}, [cx(2, 3)], "attrs.dtype")


family("norm", ["label_smooth"])
RNG15 = np.random.default_rng(20261209)


def gen_label_smooth():
    """Paddle's label_smooth: (1 - epsilon) label + epsilon prior_dist (per class,
    broadcast over the rows), or + epsilon / C without prior_dist."""
    def probs(*shape):
        return np.round(RNG15.uniform(0, 1, size=shape), 2)
    label = probs(2, 3, 4)
    case("label_smooth", "uniform", {"epsilon": 0.1}, [label], [0.9 * label + 0.1 / 4])
    prior = probs(1, 4)
    case("label_smooth", "prior_dist", {"epsilon": 0.25}, [label, prior], [0.75 * label + 0.25 * prior])
    label2, prior1 = probs(3, 5), probs(5)
    case("label_smooth", "prior_rank1", {"epsilon": 0.5}, [label2, prior1], [0.5 * label2 + 0.5 * prior1])
    case("label_smooth", "default_epsilon", {}, [label2], [label2])
    case("label_smooth", "no_rows", {"epsilon": 0.1}, [np.zeros((0, 4))], [np.zeros((0, 4))])
    error("label_smooth", "prior_classes", {"epsilon": 0.1}, [label, probs(1, 3)], "inputs[1].shape")
    error("label_smooth", "prior_rows", {"epsilon": 0.1}, [label2, probs(3, 5)], "inputs[1].shape")
    error("label_smooth", "scalar_label", {"epsilon": 0.1}, [np.array(0.5)], "inputs[0].shape")


family("reduction", ["frobenius_norm"])
RNG16 = np.random.default_rng(20261210)


def gen_frobenius_norm():
    """Paddle's frobenius_norm: sqrt(sum(x^2)) over `axis` (every dim with reduce_all or an
    empty list)."""
    def v(*shape):
        return np.round(RNG16.uniform(-3, 3, size=shape), 2)

    def fn(x, axes, keep):
        return np.sqrt(np.sum(x * x, axis=axes, keepdims=keep))
    x = v(2, 3, 4)
    case("frobenius_norm", "all_dims_default", {}, [x], [fn(x, (0, 1, 2), False)])
    case("frobenius_norm", "axes_last_two", {"axis": [1, 2]}, [x], [fn(x, (1, 2), False)])
    case("frobenius_norm", "neg_axes_keep", {"axis": [-1, 0], "keep_dim": True}, [x],
         [fn(x, (0, 2), True)])
    case("frobenius_norm", "reduce_all_overrides_axis", {"axis": [1], "reduce_all": True}, [x],
         [fn(x, (0, 1, 2), False)])
    x0 = v()
    case("frobenius_norm", "0d", {}, [x0], [np.array(abs(float(x0)))])
    case("frobenius_norm", "zeros", {"axis": [1]}, [np.zeros((2, 3))], [np.zeros(2)])
    xe = v(0, 3)
    case("frobenius_norm", "empty_set", {"axis": [0]}, [xe], [np.zeros(3)])
    case("frobenius_norm", "empty_keep_rows", {"axis": [1]}, [xe], [np.zeros(0)])
    error("frobenius_norm", "axis_out_of_range", {"axis": [3]}, [x], "attrs.axis")
    error("frobenius_norm", "duplicate_axis", {"axis": [1, -2]}, [x], "attrs.axis")


family("indexing", ["take_along_axis"])
RNG17 = np.random.default_rng(20261211)


def gen_take_along_axis():
    """Paddle's take_along_axis: out (index's shape) = x at index's ids along axis, at the
    same place elsewhere (index no larger than x off the axis)."""
    def v(*shape):
        return np.round(RNG17.uniform(-3, 3, size=shape), 2)

    def ids(bound, *shape):
        return T(RNG17.integers(0, bound, size=shape), "int64")

    def take(x, index, axis):
        # x's leading part off the axis, then numpy's take_along_axis
        sl = tuple(slice(0, n) if d != axis % x.ndim else slice(None) for d, n in enumerate(index.shape))
        return np.take_along_axis(x[sl], np.asarray(index).astype(np.int64), axis=axis)
    x = v(3, 4, 5)
    i = ids(4, 3, 6, 5)
    case("take_along_axis", "axis1_more_ids", {"axis": 1}, [x, i], [take(x, i.array, 1)])
    i = ids(3, 2, 4, 5)
    case("take_along_axis", "axis0_fewer_ids", {}, [x, i], [take(x, i.array, 0)])
    i = ids(5, 2, 3, 1)
    case("take_along_axis", "neg_axis_leading_part", {"axis": -1}, [x, i], [take(x, i.array, 2)])
    xi = T(RNG17.integers(-9, 9, size=(2, 3)), "int64")
    i = ids(3, 2, 2)
    case("take_along_axis", "int64_x", {"axis": 1}, [xi, i], [T(take(xi.array, i.array, 1), "int64")])
    case("take_along_axis", "float_ids", {"axis": 1}, [x[:, :, 0], T(np.array([[1.0, 3.0]] * 3), "float64")],
         [take(x[:, :, 0], np.array([[1, 3]] * 3), 1)])
    case("take_along_axis", "empty_index", {"axis": 0}, [x, T(np.zeros((0, 4, 5), dtype=np.int64), "int64")],
         [np.zeros((0, 4, 5))])
    error("take_along_axis", "id_out_of_range", {"axis": 1}, [x, T(np.full((3, 1, 5), 4), "int64")],
          "inputs[1].data")
    error("take_along_axis", "negative_id", {"axis": 1}, [x, T(np.full((3, 1, 5), -1), "int64")],
          "inputs[1].data")
    error("take_along_axis", "rank_mismatch", {"axis": 0}, [x, ids(3, 2, 4)], "inputs[1].shape")
    error("take_along_axis", "larger_off_axis", {"axis": 0}, [x, ids(3, 2, 5, 5)], "inputs[1].shape")
    error("take_along_axis", "axis_out_of_range", {"axis": 3}, [x, ids(3, 3, 4, 5)], "attrs.axis")
    error("take_along_axis", "scalar_x", {}, [np.array(1.5), T(np.array(0), "int64")], "inputs[0].shape")


def np_put_along_axis(x, index, value, axis, reduce="assign", include_self=True):
    """put_along_axis from its definition: each position some value lands on gathers, in
    index's row-major order, the values landing there (after x's element with include_self)
    and takes the last (assign) or their sum, product, mean, least or greatest."""
    out = np.array(x, dtype=np.float64)
    index = np.asarray(index).astype(np.int64)
    axis %= out.ndim
    operands = {}
    for p in np.ndindex(*index.shape):
        t = list(p)
        t[axis] = index[p]
        t = tuple(t)
        if t not in operands:
            operands[t] = [out[t]] if include_self and reduce != "assign" else []
        operands[t].append(float(value[p]))
    fold = {"assign": lambda ops: ops[-1], "add": sum, "mul": np.prod, "multiply": np.prod, "mean": np.mean,
            "amin": min, "amax": max}[reduce]
    for t, ops in operands.items():
        out[t] = fold(ops)
    return out


family("indexing", ["put_along_axis"])
RNG18 = np.random.default_rng(20261212)


def gen_put_along_axis():
    """Paddle's put_along_axis: out = x with value (index's shape) written along axis at
    index's ids, at the same place elsewhere (x's leading part where index is smaller):
    assign in index's row-major order (a repeated id: the last wins) or add, into x
    (include_self) or into 0 where a value lands."""
    def v(*shape):
        return np.round(RNG18.uniform(-3, 3, size=shape), 2)

    def ids(bound, *shape):
        return T(RNG18.integers(0, bound, size=shape), "int64")

    put = np_put_along_axis
    x = v(3, 4, 5)
    i, u = ids(4, 3, 6, 5), v(3, 6, 5)
    case("put_along_axis", "assign_repeated_ids", {"axis": 1}, [x, i, u], [put(x, i.array, u, 1)])
    i, u = ids(5, 2, 3, 2), v(2, 3, 2)
    case("put_along_axis", "assign_leading_part", {"axis": -1}, [x, i, u], [put(x, i.array, u, 2)])
    y = v(3, 4)
    i, u = ids(3, 5, 4), v(5, 4)
    case("put_along_axis", "add_into_x", {"axis": 0, "reduce": "add"}, [y, i, u],
         [put(y, i.array, u, 0, "add")])
    i, u = ids(4, 2, 6), v(2, 6)
    case("put_along_axis", "add_without_self", {"axis": 1, "reduce": "add", "include_self": False}, [y, i, u],
         [put(y, i.array, u, 1, "add", False)])
    w = v(3, 2)
    case("put_along_axis", "float_ids", {"axis": 1}, [y, T(np.array([[3.0, 0.0]] * 3), "float64"), w],
         [put(y, np.array([[3, 0]] * 3), w, 1)])
    case("put_along_axis", "empty_index", {"axis": 0},
         [y, T(np.zeros((0, 4), dtype=np.int64), "int64"), np.zeros((0, 4))], [y])
    i3 = T(np.full((3, 1), 4), "int64")
    error("put_along_axis", "id_out_of_range", {"axis": 1}, [y, i3, v(3, 1)], "inputs[1].data")
    error("put_along_axis", "negative_id", {"axis": 1}, [y, T(np.full((3, 1), -1), "int64"), v(3, 1)],
          "inputs[1].data")
    error("put_along_axis", "value_shape", {"axis": 1}, [y, ids(4, 3, 2), v(3, 1)], "inputs[2].shape")
    error("put_along_axis", "rank_mismatch", {"axis": 0}, [y, ids(3, 2), v(2)], "inputs[1].shape")
    error("put_along_axis", "larger_off_axis", {"axis": 0}, [y, ids(3, 2, 5), v(2, 5)], "inputs[1].shape")
    error("put_along_axis", "axis_out_of_range", {"axis": 2}, [y, ids(3, 3, 4), v(3, 4)], "attrs.axis")
    error("put_along_axis", "reduce_unknown", {"axis": 0, "reduce": "max"}, [y, ids(3, 3, 4), v(3, 4)],
          "attrs.reduce")
    error("put_along_axis", "scalar_x", {}, [np.array(1.5), T(np.array(0), "int64"), np.array(2.0)],
          "inputs[0].shape")


RNG33 = np.random.default_rng(20261227)


def gen_put_along_axis_reduce():
    """put_along_axis's reducing modes mul (and its spelling multiply), mean, amin and amax,
    with and without x's element, on repeated ids and a leading-part index."""
    def v(*shape):
        return np.round(RNG33.uniform(-3, 3, size=shape), 2)

    def ids(bound, *shape):
        return T(RNG33.integers(0, bound, size=shape), "int64")
    x = v(3, 4, 5)
    for reduce in ["mul", "multiply", "mean", "amin", "amax"]:
        for include_self in [True, False]:
            name = reduce + ("_with_self" if include_self else "_without_self")
            attrs = {"axis": 1, "reduce": reduce, "include_self": include_self}
            i, u = ids(4, 3, 6, 5), v(3, 6, 5)
            case("put_along_axis", name, attrs, [x, i, u],
                 [np_put_along_axis(x, i.array, u, 1, reduce, include_self)])
    y = v(3, 4)
    i, u = ids(3, 2, 3), v(2, 3)
    case("put_along_axis", "amax_leading_part", {"axis": 0, "reduce": "amax"}, [y, i, u],
         [np_put_along_axis(y, i.array, u, 0, "amax")])
    z = np.array([[0.0, 2.0, -1.5], [4.0, 0.0, 3.0]])
    zi, zv = T(np.array([[0, 0, 2, 0]] * 2), "int64"), np.array([[0.0, 2.5, 0.0, -2.0], [1.5, 1.5, 0.0, 0.0]])
    case("put_along_axis", "mul_zeros", {"axis": 1, "reduce": "mul"}, [z, zi, zv],
         [np_put_along_axis(z, zi.array, zv, 1, "mul")])
    case("put_along_axis", "amin_ties", {"axis": 1, "reduce": "amin", "include_self": False}, [z, zi, zv],
         [np_put_along_axis(z, zi.array, zv, 1, "amin", False)])
    error("put_along_axis", "reduce_unknown_name", {"axis": 0, "reduce": "sum"}, [y, ids(3, 3, 4), v(3, 4)],
          "attrs.reduce")


family("random", ["bernoulli"])
RNG22 = np.random.default_rng(20261216)


def np_bernoulli(x, seed, offset=None, global_shape=None):
    """bernoulli on x, a block at `offset` of a tensor of `global_shape`: 1 where the
    element's counter draw is below x."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros(x.shape)
    for local, g in global_indices(x.shape, offset, global_shape):
        out[local] = 1.0 if counter_uniform(seed, g) < x[local] else 0.0
    return out


def gen_bernoulli():
    """Paddle's bernoulli: 1 with probability x, drawn with dropout's counter generator."""
    x = np.round(RNG22.uniform(0, 1, size=(4, 6)), 3)
    case("bernoulli", "seed_0", {}, [x], [np_bernoulli(x, 0)])
    case("bernoulli", "negative_seed", {"seed": -7}, [x], [np_bernoulli(x, -7)])
    edges = np.array([[0.0, 1.0, 0.0], [1.0, 0.5, 0.25]])
    case("bernoulli", "zero_and_one_are_certain", {"seed": 3}, [edges], [np_bernoulli(edges, 3)])
    f32 = T(np.round(RNG22.uniform(0, 1, size=(2, 3)), 2), "float32")
    case("bernoulli", "float32_keeps_dtype", {"seed": 5}, [f32], [T(np_bernoulli(f32.array, 5), "float32")])
    case("bernoulli", "0d", {"seed": 2}, [np.array(0.5)], [np_bernoulli(np.array(0.5), 2)])
    case("bernoulli", "empty", {}, [np.zeros((0, 3))], [np.zeros((0, 3))])
    full = np_bernoulli(x, 5)
    case("bernoulli", "localized_offset", {"seed": 5, "local": {"offset": [1, 2], "global_shape": [4, 6]}},
         [x[1:3, 2:5]], [full[1:3, 2:5]])
    error("bernoulli", "above_one", {}, [np.array([0.5, 1.5])], "inputs[0].data")
    error("bernoulli", "negative", {}, [np.array([-0.25, 0.5])], "inputs[0].data")
    error("bernoulli", "nan", {}, [np.array([np.nan])], "inputs[0].data")
    error("bernoulli", "block_outside", {"local": {"offset": [3, 2], "global_shape": [4, 6]}},
          [x[1:3, 2:5]], "local.offset")


family("random", ["poisson"])
RNG30 = np.random.default_rng(20261224)


def np_poisson(x, seed, offset=None, global_shape=None):
    """poisson on x (the rates), a block at `offset` of a tensor of `global_shape`: the
    count whose Poisson cumulative probability first exceeds the element's counter draw,
    summed from 0 upward in float64 (docs/OPS.md; stops where a term no longer moves the sum)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros(x.shape)
    for local, g in global_indices(x.shape, offset, global_shape):
        u, rate = counter_uniform(seed, g), float(x[local])
        term = math.exp(-rate)
        total, count = term, 0
        while u >= total:
            count += 1
            term *= rate / count
            if total + term == total:
                break
            total += term
        out[local] = float(count)
    return out


def gen_poisson():
    """Paddle's poisson: a Poisson(x) count per element, drawn by inverting dropout's counter
    generator's uniform."""
    x = np.round(RNG30.uniform(0, 6, size=(4, 5)), 2)
    case("poisson", "seed_0", {}, [x], [np_poisson(x, 0)])
    case("poisson", "negative_seed", {"seed": -11}, [x], [np_poisson(x, -11)])
    big = np.array([[0.0, 30.5, 250.0], [699.0, 700.0, 0.001]])
    case("poisson", "zero_and_large_rates", {"seed": 4}, [big], [np_poisson(big, 4)])
    f32 = T(np.round(RNG30.uniform(0, 3, size=(2, 3)), 2), "float32")
    case("poisson", "float32_keeps_dtype", {"seed": 6}, [f32], [T(np_poisson(f32.array, 6), "float32")])
    case("poisson", "0d", {"seed": 1}, [np.array(2.5)], [np_poisson(np.array(2.5), 1)])
    case("poisson", "empty", {}, [np.zeros((3, 0))], [np.zeros((3, 0))])
    full = np_poisson(x, 9)
    case("poisson", "localized_offset", {"seed": 9, "local": {"offset": [2, 1], "global_shape": [4, 5]}},
         [x[2:4, 1:4]], [full[2:4, 1:4]])
    error("poisson", "negative", {}, [np.array([1.0, -0.5])], "inputs[0].data")
    error("poisson", "nan", {}, [np.array([np.nan])], "inputs[0].data")
    error("poisson", "infinity", {}, [np.array([np.inf, 1.0])], "inputs[0].data")
    error("poisson", "above_the_limit", {}, [np.array([700.5])], "inputs[0].data", "Unsupported")
    error("poisson", "block_outside", {"local": {"offset": [3, 1], "global_shape": [4, 5]}},
          [x[2:4, 1:4]], "local.offset")


family("shape", ["strided_slice"])
RNG19 = np.random.default_rng(20261213)


def gen_strided_slice():
    """Paddle's strided_slice: x[start:end:stride] on each listed axis, Python's slice
    (numpy basic indexing), a negative stride walking back."""
    def v(*shape):
        return np.round(RNG19.uniform(-3, 3, size=shape), 2)

    def ss(x, axes, starts, ends, strides):
        index = [slice(None)] * x.ndim
        for a, s, e, st in zip(axes, starts, ends, strides):
            index[a] = slice(s, e, st)
        return x[tuple(index)]

    x = v(3, 7, 4)
    for label, axes, starts, ends, strides in [
            ("axis1_step2", [1], [1], [-1], [2]),
            ("reverse_whole", [0], [-1], [-100], [-1]),
            ("two_axes_mixed", [2, 0], [0, 2], [100, -100], [3, -2]),
            ("start_past_end_backwards", [1], [100], [0], [-3]),
            ("negative_axis", [-1], [-3], [-1], [1]),
            ("stride_past_the_dim", [1], [0], [7], [100]),
            ("most_negative_stride", [1], [6], [-100], [-2**63]),
            ("end_minus_one_backwards", [1], [5], [-1], [-1]),
            ("start_below_range_backwards", [1], [-100], [-200], [-1]),
            ("empty_equal", [1], [2], [2], [1]),
            ("empty_wrong_way", [1], [5], [1], [2]),
            ("no_axes", [], [], [], [])]:
        attrs = {"axes": axes, "starts": starts, "ends": ends, "strides": strides}
        case("strided_slice", label, attrs, [x], [ss(x, axes, starts, ends, strides)])
    xi = T(RNG19.integers(-9, 9, size=(5, 2)), "int64")
    case("strided_slice", "int64_x", {"axes": [0], "starts": [4], "ends": [0], "strides": [-2]}, [xi],
         [T(xi.array[4:0:-2], "int64")])
    x0 = v(0, 3)
    case("strided_slice", "empty_dim_backwards", {"axes": [0], "starts": [-1], "ends": [-100], "strides": [-1]},
         [x0], [x0[::-1]])
    s0 = np.array(1.25)
    case("strided_slice", "0d_no_axes", {"axes": [], "starts": [], "ends": [], "strides": []}, [s0], [s0])
    error("strided_slice", "stride_zero", {"axes": [0, 1], "starts": [0, 0], "ends": [2, 2], "strides": [1, 0]},
          [x], "attrs.strides")
    error("strided_slice", "strides_length", {"axes": [0, 1], "starts": [0, 0], "ends": [1, 1], "strides": [1]},
          [x], "attrs.strides")
    error("strided_slice", "starts_length", {"axes": [0], "starts": [0, 1], "ends": [1], "strides": [1]},
          [x], "attrs.starts")
    error("strided_slice", "ends_length", {"axes": [0], "starts": [0], "ends": [], "strides": [1]},
          [x], "attrs.ends")
    error("strided_slice", "axis_repeated", {"axes": [1, -2], "starts": [0, 0], "ends": [1, 1], "strides": [1, 1]},
          [x], "attrs.axes")
    error("strided_slice", "axis_out_of_range", {"axes": [3], "starts": [0], "ends": [1], "strides": [1]},
          [x], "attrs.axes")


family("contraction", ["fused_gemm_epilogue"])
RNG20 = np.random.default_rng(20261214)


def gen_fused_gemm_epilogue():
    """Paddle's fused_gemm_epilogue: out = act(x @ y + bias), act none, relu or gelu (the
    tanh form, as Paddle's fused kernel); reserve_space the pre-activation (relu, gelu) or
    0-d (none)."""
    def v(*shape):
        return np.round(RNG20.uniform(-2, 2, size=shape), 2)

    def fge(x, y, bias, trans_x=False, trans_y=False, act="none"):
        xm = np.swapaxes(x, -1, -2) if trans_x else x
        ym = y.T if trans_y else y
        h = np.matmul(xm, ym) + bias
        if act == "none":
            return [h, np.zeros(())]
        return [np.maximum(h, 0.0) if act == "relu" else gelu_tanh(h), h]
    x, y, b = v(3, 4), v(4, 5), v(5)
    case("fused_gemm_epilogue", "plain_2d", {}, [x, y, b], fge(x, y, b))
    x3 = v(2, 3, 4)
    case("fused_gemm_epilogue", "relu_batched", {"activation": "relu"}, [x3, y, b], fge(x3, y, b, act="relu"))
    xt, yt = v(2, 4, 3), v(5, 4)
    case("fused_gemm_epilogue", "gelu_both_transposed", {"trans_x": True, "trans_y": True, "activation": "gelu"},
         [xt, yt, b], fge(xt, yt, b, True, True, "gelu"))
    case("fused_gemm_epilogue", "trans_y_only", {"trans_y": True}, [x, yt, b], fge(x, yt, b, trans_y=True))
    case("fused_gemm_epilogue", "empty_k", {"activation": "relu"}, [np.zeros((3, 0)), np.zeros((0, 5)), b],
         fge(np.zeros((3, 0)), np.zeros((0, 5)), b, act="relu"))
    error("fused_gemm_epilogue", "unknown_activation", {"activation": "silu"}, [x, y, b], "attrs.activation")
    error("fused_gemm_epilogue", "x_rank_1", {}, [v(4), y, b], "inputs[0].shape")
    error("fused_gemm_epilogue", "y_rank_3", {}, [x3, v(2, 4, 5), b], "inputs[1].shape")
    error("fused_gemm_epilogue", "k_mismatch", {}, [x, v(3, 5), b], "inputs[1].shape")
    error("fused_gemm_epilogue", "bias_not_n", {}, [x, y, v(4)], "inputs[2].shape")
    error("fused_gemm_epilogue", "bias_2d", {}, [x, y, v(1, 5)], "inputs[2].shape")


family("contraction", ["linear_v2"])
RNG27 = np.random.default_rng(20261221)


def gen_linear_v2():
    """Paddle's linear_v2: out = x @ weight + bias (weight [n, k] with transpose_weight);
    x of any rank >= 1 (a vector gives [n])."""
    def v(*shape):
        return np.round(RNG27.uniform(-2, 2, size=shape), 2)

    def lin(x, w, b, transpose_weight=False):
        return [np.matmul(x, w.T if transpose_weight else w) + b]
    x, w, b = v(3, 4), v(4, 5), v(5)
    case("linear_v2", "plain_2d", {}, [x, w, b], lin(x, w, b))
    x3 = v(2, 3, 4)
    case("linear_v2", "batched", {}, [x3, w, b], lin(x3, w, b))
    wt = v(5, 4)
    case("linear_v2", "transpose_weight", {"transpose_weight": True}, [x3, wt, b], lin(x3, wt, b, True))
    x1 = v(4)
    case("linear_v2", "vector_x", {}, [x1, w, b], lin(x1, w, b))
    case("linear_v2", "empty_k", {}, [np.zeros((3, 0)), np.zeros((0, 5)), b],
         lin(np.zeros((3, 0)), np.zeros((0, 5)), b))
    error("linear_v2", "x_rank_0", {}, [np.array(1.0), w, b], "inputs[0].shape")
    error("linear_v2", "weight_rank_3", {}, [x3, v(2, 4, 5), b], "inputs[1].shape")
    error("linear_v2", "k_mismatch", {}, [x, v(3, 5), b], "inputs[1].shape")
    error("linear_v2", "transposed_k_mismatch", {"transpose_weight": True}, [x, w, b], "inputs[1].shape")
    error("linear_v2", "bias_not_n", {}, [x, w, v(4)], "inputs[2].shape")
    error("linear_v2", "bias_0d", {}, [x, w, np.array(1.0)], "inputs[2].shape")


family("contraction", ["fused_linear_param_grad_add"])
RNG21 = np.random.default_rng(20261215)


def gen_fused_linear_param_grad_add():
    """Paddle's fused_linear_param_grad_add: dweight_out = dweight + x^T dout and dbias_out =
    dbias + dout summed, x and dout flattened over their leading dims; a 0-d dweight or dbias
    is absent (0); dbias_out 0-d without has_bias."""
    def v(*shape):
        return np.round(RNG21.uniform(-2, 2, size=shape), 2)

    absent = np.zeros(())

    def flpga(x, dout, dweight, dbias, has_bias=True):
        xf, gf = x.reshape(-1, x.shape[-1]), dout.reshape(-1, dout.shape[-1])
        dw = xf.T @ gf + (dweight if dweight.ndim else 0.0)
        if not has_bias:
            return [dw, np.zeros(())]
        return [dw, gf.sum(axis=0) + (dbias if dbias.ndim else 0.0)]
    x, g, w, b = v(2, 3, 4), v(2, 3, 5), v(4, 5), v(5)
    case("fused_linear_param_grad_add", "accumulate_both", {}, [x, g, w, b], flpga(x, g, w, b))
    case("fused_linear_param_grad_add", "absent_accumulators", {"multi_precision": False}, [x, g, absent, absent],
         flpga(x, g, absent, absent))
    case("fused_linear_param_grad_add", "no_bias", {"has_bias": False}, [x, g, w, absent],
         flpga(x, g, w, absent, has_bias=False))
    x1, g1 = v(4), v(5)
    case("fused_linear_param_grad_add", "rank1_outer_product", {}, [x1, g1, absent, b], flpga(x1, g1, absent, b))
    case("fused_linear_param_grad_add", "no_rows", {}, [np.zeros((0, 4)), np.zeros((0, 5)), w, b],
         flpga(np.zeros((0, 4)), np.zeros((0, 5)), w, b))
    error("fused_linear_param_grad_add", "scalar_x", {}, [absent, g1, absent, absent], "inputs[0].shape")
    error("fused_linear_param_grad_add", "leading_dims_differ", {}, [x, v(3, 2, 5), absent, absent],
          "inputs[1].shape")
    error("fused_linear_param_grad_add", "rank_differs", {}, [x, v(6, 5), absent, absent], "inputs[1].shape")
    error("fused_linear_param_grad_add", "dweight_transposed", {}, [x, g, v(5, 4), absent], "inputs[2].shape")
    error("fused_linear_param_grad_add", "dbias_wrong_size", {}, [x, g, absent, v(4)], "inputs[3].shape")
    error("fused_linear_param_grad_add", "dbias_without_has_bias", {"has_bias": False}, [x, g, absent, b],
          "inputs[3].shape")


family("norm", ["group_norm", "instance_norm"])
RNG25 = np.random.default_rng(20261219)
RNG26 = np.random.default_rng(20261220)


def group_norm_np(x, scale, bias, eps, groups, channels_last=False):
    """Group normalisation from docs/OPS.md: x moved to channels first and viewed as [N,
    groups, rest]; mean and variance (population) per (n, group); y the normalised x times
    scale plus bias per channel, an absent (0-d) scale or bias 1 or 0."""
    xc = np.moveaxis(x, -1, 1) if channels_last else x
    n, c = xc.shape[0], xc.shape[1]
    grouped = xc.reshape(n, groups, (c // groups if groups else 1) * math.prod(xc.shape[2:]))
    mean = grouped.mean(axis=2) if grouped.size else np.zeros((n, groups))
    var = grouped.var(axis=2) if grouped.size else np.zeros((n, groups))
    y = ((grouped - mean[:, :, None]) / np.sqrt(var[:, :, None] + eps)).reshape(xc.shape)
    along = (1, c) + (1,) * (xc.ndim - 2)
    if scale.ndim:
        y = y * scale.reshape(along)
    if bias.ndim:
        y = y + bias.reshape(along)
    return [np.moveaxis(y, 1, -1) if channels_last else y, mean, var]


def gen_group_norm():
    """Paddle's group_norm: per (n, group of C / groups channels), over the group's channels
    and every spatial position; data_format NCHW (channels first) or NHWC (channels last),
    x of rank 2 to 5; scale, bias [C] or 0-d (absent)."""
    def v(*shape):
        return np.round(RNG25.uniform(-2, 2, size=shape), 2)

    absent = np.zeros(())
    x, s6, b6 = v(2, 6, 3, 2), v(6), v(6)
    case("group_norm", "nchw_rank4", {"groups": 3}, [x, s6, b6], group_norm_np(x, s6, b6, 1e-5, 3))
    xl, s4, b4 = v(2, 3, 2, 4), v(4), v(4)
    case("group_norm", "nhwc_rank4", {"groups": 2, "data_format": "NHWC"}, [xl, s4, b4],
         group_norm_np(xl, s4, b4, 1e-5, 2, channels_last=True))
    x3 = v(3, 4, 5)
    case("group_norm", "rank3_absent_parameters", {"groups": 2, "epsilon": 1e-3}, [x3, absent, absent],
         group_norm_np(x3, absent, absent, 1e-3, 2))
    x5 = v(1, 4, 2, 2, 3)
    case("group_norm", "rank5_scale_only", {"groups": 2}, [x5, s4, absent], group_norm_np(x5, s4, absent, 1e-5, 2))
    x2 = v(3, 6)
    case("group_norm", "rank2_no_spatial", {"groups": 3}, [x2, s6, b6], group_norm_np(x2, s6, b6, 1e-5, 3))
    xg, b3 = v(2, 5, 3), v(3)
    case("group_norm", "nhwc_one_channel_per_group", {"groups": 3, "data_format": "NHWC"}, [xg, absent, b3],
         group_norm_np(xg, absent, b3, 1e-5, 3, channels_last=True))
    xk = v(2, 4, 3)
    xk[1, 2:, :] = 1.5
    sk = v(4)
    case("group_norm", "constant_group", {"groups": 2}, [xk, sk, b4], group_norm_np(xk, sk, b4, 1e-5, 2))
    xe = np.zeros((0, 4, 3))
    case("group_norm", "empty_batch", {"groups": 2}, [xe, s4, b4], group_norm_np(xe, s4, b4, 1e-5, 2))
    x63 = v(2, 6, 3)
    error("group_norm", "groups_not_dividing_c", {"groups": 4}, [x63, s6, b6], "attrs.groups")
    error("group_norm", "groups_zero", {"groups": 0}, [x63, s6, b6], "attrs.groups")
    error("group_norm", "groups_above_c", {"groups": 12}, [x63, s6, b6], "attrs.groups")
    error("group_norm", "unknown_data_format", {"groups": 2, "data_format": "NCL"}, [x63, s6, b6],
          "attrs.data_format")
    error("group_norm", "rank1_x", {"groups": 2}, [v(6), s6, b6], "inputs[0].shape")
    error("group_norm", "rank6_x", {"groups": 2}, [v(1, 6, 1, 1, 1, 2), s6, b6], "inputs[0].shape")
    error("group_norm", "scale_wrong_size", {"groups": 2}, [x63, v(5), b6], "inputs[1].shape")
    error("group_norm", "bias_2d", {"groups": 2}, [x63, s6, v(1, 6)], "inputs[2].shape")
    error("group_norm", "nhwc_scale_of_dim1", {"groups": 3, "data_format": "NHWC"}, [x63, s6, absent],
          "inputs[1].shape")
    error("group_norm", "negative_epsilon", {"groups": 2, "epsilon": -1e-5}, [x63, s6, b6], "attrs.epsilon")
    error("group_norm", "empty_spatial", {"groups": 2}, [np.zeros((2, 4, 0)), s4, b4], "inputs[0].shape")


def gen_instance_norm():
    """Paddle's instance_norm: group_norm with one channel per group, channels first:
    per (n, c) over the spatial positions; saved_mean and saved_variance [N, C]."""
    def v(*shape):
        return np.round(RNG26.uniform(-2, 2, size=shape), 2)

    absent = np.zeros(())

    def inorm(x, scale, bias, eps=1e-5):
        return group_norm_np(x, scale, bias, eps, x.shape[1])
    x, s3, b3 = v(2, 3, 2, 3), v(3), v(3)
    case("instance_norm", "nchw_rank4", {}, [x, s3, b3], inorm(x, s3, b3))
    x3, b4 = v(2, 4, 5), v(4)
    case("instance_norm", "rank3_absent_scale", {"epsilon": 1e-3}, [x3, absent, b4], inorm(x3, absent, b4, 1e-3))
    x5, s2 = v(1, 2, 2, 2, 2), v(2)
    case("instance_norm", "rank5_absent_bias", {}, [x5, s2, absent], inorm(x5, s2, absent))
    x2 = v(3, 4)
    case("instance_norm", "rank2_single_elements", {}, [x2, absent, b4], inorm(x2, absent, b4))
    xk = v(2, 3, 4)
    xk[0, 1, :] = -0.5
    case("instance_norm", "constant_channel", {}, [xk, s3, b3], inorm(xk, s3, b3))
    xn = np.zeros((2, 0, 3))
    case("instance_norm", "no_channels", {}, [xn, np.zeros(0), absent], inorm(xn, np.zeros(0), absent))
    error("instance_norm", "rank1_x", {}, [v(3), s3, b3], "inputs[0].shape")
    error("instance_norm", "rank6_x", {}, [v(1, 3, 1, 1, 1, 2), s3, b3], "inputs[0].shape")
    error("instance_norm", "scale_wrong_size", {}, [x, v(2), b3], "inputs[1].shape")
    error("instance_norm", "bias_wrong_size", {}, [x, s3, v(4)], "inputs[2].shape")
    error("instance_norm", "negative_epsilon", {"epsilon": -1.0}, [x, s3, b3], "attrs.epsilon")
    error("instance_norm", "empty_spatial", {}, [np.zeros((2, 3, 0)), s3, b3], "inputs[0].shape")


family("indexing", ["moe_combine"])
RNG34 = np.random.default_rng(20261228)


def gen_moe_combine():
    """Paddle's moe_combine: y[t] = sum_j combine_weights[t, j] * x[scatter_index[t, j]]
    (x [rows, hidden] the experts' outputs, ids in [0, rows); repeated ids add up)."""
    def v(*shape):
        return np.round(RNG34.uniform(-3, 3, size=shape), 2)

    def combine(x, w, ids):
        y = np.zeros((w.shape[0], x.shape[1]))
        for t in range(w.shape[0]):
            for j in range(w.shape[1]):
                y[t] += w[t, j] * x[int(ids[t, j])]
        return y
    x, w = v(8, 5), v(4, 2)
    ids = RNG34.permutation(8)[:8].reshape(4, 2)
    case("moe_combine", "top2_distinct_rows", {}, [x, w, T(ids, "int64")], [combine(x, w, ids)])
    ids = RNG34.integers(0, 8, size=(4, 2))
    ids[0] = [3, 3]
    case("moe_combine", "repeated_ids", {}, [x, w, T(ids, "int64")], [combine(x, w, ids)])
    w1 = v(6, 1)
    ids1 = RNG34.integers(0, 8, size=(6, 1))
    case("moe_combine", "top1", {}, [x, w1, T(ids1, "int64")], [combine(x, w1, ids1)])
    case("moe_combine", "no_tokens", {}, [x, np.zeros((0, 2)), T(np.zeros((0, 2)), "int64")], [np.zeros((0, 5))])
    bad = np.array([[0, 8], [1, 2], [3, 4], [5, 6]])
    error("moe_combine", "id_out_of_range", {}, [x, w, T(bad, "int64")], "inputs[2].data")
    error("moe_combine", "negative_id", {}, [x, w, T(-bad, "int64")], "inputs[2].data")
    error("moe_combine", "x_rank", {}, [v(8), w, T(ids, "int64")], "inputs[0].shape")
    error("moe_combine", "weights_rank", {}, [x, v(8), T(np.zeros(8), "int64")], "inputs[1].shape")
    error("moe_combine", "index_shape", {}, [x, w, T(np.zeros((4, 3)), "int64")], "inputs[2].shape")


family("indexing", ["moe_gate_dispatch"])
RNG35 = np.random.default_rng(20261229)


def moe_gate_dispatch_np(x, gate, bias, k, capacity):
    """Paddle's moe_gate_dispatch from its definition: each token's k experts by
    gate + bias (NaN above every number, equal scores to the lower expert), the routes
    queued first choices (in token order) before second choices, the first `capacity` of
    each expert's queue copied into y; a dropped route has scatter_index 0 and weight 0;
    expert_offset counts every route cumulatively."""
    s, h = x.shape
    e = gate.shape[1]
    score = gate + (bias if bias is not None else 0.0)
    ids = np.zeros((s, k), dtype=np.int64)
    for t in range(s):
        left = list(range(e))
        for j in range(k):
            best = left[0]
            for c in left[1:]:
                a, b = score[t, c], score[t, best]
                if (np.isnan(a) and not np.isnan(b)) or (not np.isnan(a) and not np.isnan(b) and a > b):
                    best = c
            ids[t, j] = best
            left.remove(best)
    y = np.zeros((e, capacity, h))
    weights = np.zeros((s, k))
    slots = np.zeros((k, s), dtype=np.int64)
    queued = np.zeros(e, dtype=np.int64)
    for j in range(k):
        for t in range(s):
            ex = ids[t, j]
            place = queued[ex]
            queued[ex] += 1
            if place < capacity:
                y[ex, place] = x[t]
                slots[j, t] = ex * capacity + place
                weights[t, j] = gate[t, ex]
    return [y, weights, T(slots, "int64"), T(np.cumsum(queued), "int64"), T(ids, "int64")]


def gen_moe_gate_dispatch():
    """Paddle's moe_gate_dispatch(x, gate_logits, corr_bias; k, capacity, use_pad) (its
    kernel is GPU-only: the values come from moe_gate_dispatch_np, never from Paddle).
    corr_bias absent is a 0-d tensor."""
    def v(*shape):
        return np.round(RNG35.uniform(-3, 3, size=shape), 2)

    def probs(*shape):
        return np.round(RNG35.uniform(0.01, 0.99, size=shape), 3)

    none = np.zeros(())

    def run(name, x, gate, bias, k, capacity):
        attrs = {"k": k, "capacity": capacity}
        case("moe_gate_dispatch", name, attrs, [x, gate, none if bias is None else bias],
             moe_gate_dispatch_np(x, gate, bias, k, capacity))

    x, gate, bias = v(6, 3), probs(6, 4), np.round(RNG35.uniform(-0.3, 0.3, size=4), 2)
    # 12 routes into 4 experts of 2 slots: some are dropped (checked below).
    assert (np.cumsum(moe_gate_dispatch_np(x, gate, bias, 2, 2)[3].array) > np.arange(1, 5) * 2).any()
    run("top2_drops", x, gate, bias, 2, 2)
    run("top2_no_drops", x, gate, bias, 2, 6)
    run("top1_no_bias_drops", x, gate, None, 1, 1)
    run("top1_no_bias_no_drops", x, gate, None, 1, 6)
    # The bias moves token 0's first choice from expert 0 to expert 2.
    g2 = np.array([[0.5, 0.1, 0.4], [0.2, 0.7, 0.1], [0.3, 0.3, 0.4]])
    b2 = np.array([0.0, 0.0, 0.2])
    assert moe_gate_dispatch_np(v(3, 2), g2, None, 1, 3)[4].array[0, 0] == 0
    assert moe_gate_dispatch_np(v(3, 2), g2, b2, 1, 3)[4].array[0, 0] == 2
    run("bias_changes_selection", v(3, 2), g2, b2, 2, 2)
    # Equal scores go to the lower expert: token 0 ties 0.3 on experts 0, 1 and 3.
    g3 = np.array([[0.3, 0.3, 0.1, 0.3], [0.25, 0.25, 0.25, 0.25]])
    run("ties_lowest_expert", v(2, 3), g3, None, 3, 2)
    # A NaN score comes first: token 1 picks experts 1 (NaN) and 2, not 2 and 0. Both its
    # routes are dropped (token 0 fills the one slot of experts 1 and 2), so no NaN weight
    # reaches the golden (goldens hold no NaN).
    gn = np.array([[0.1, 0.8, 0.2], [0.2, np.nan, 0.9]])
    assert moe_gate_dispatch_np(v(2, 2), gn, None, 2, 1)[4].array[1].tolist() == [1, 2]
    run("nan_score_first", v(2, 2), gn, None, 2, 1)
    run("capacity_zero", x, gate, bias, 2, 0)
    run("no_tokens", np.zeros((0, 3)), np.zeros((0, 4)), bias, 2, 3)
    run("no_hidden", np.zeros((6, 0)), gate, bias, 2, 2)
    attrs = {"k": 2, "capacity": 2}
    error("moe_gate_dispatch", "x_rank", attrs, [v(6), gate, bias], "inputs[0].shape")
    error("moe_gate_dispatch", "gate_rank", attrs, [x, v(6), bias], "inputs[1].shape")
    error("moe_gate_dispatch", "gate_tokens", attrs, [x, probs(5, 4), bias], "inputs[1].shape")
    error("moe_gate_dispatch", "bias_size", attrs, [x, gate, v(3)], "inputs[2].shape")
    error("moe_gate_dispatch", "bias_rank", attrs, [x, gate, v(1, 4)], "inputs[2].shape")
    error("moe_gate_dispatch", "k_zero", {"k": 0, "capacity": 2}, [x, gate, bias], "attrs.k")
    error("moe_gate_dispatch", "k_above_experts", {"k": 5, "capacity": 2}, [x, gate, bias], "attrs.k")
    error("moe_gate_dispatch", "capacity_negative", {"k": 2, "capacity": -1}, [x, gate, bias], "attrs.capacity")
    error("moe_gate_dispatch", "capacity_overflow", {"k": 2, "capacity": 2 ** 51}, [x, gate, bias],
          "attrs.capacity")
    error("moe_gate_dispatch", "use_pad_false", {"k": 2, "capacity": 2, "use_pad": False}, [x, gate, bias],
          "attrs.use_pad", "Unsupported")


family("norm", ["batch_norm"])
RNG32 = np.random.default_rng(20261226)


def batch_norm_np(x, mean, variance, scale, bias, momentum=0.9, eps=1e-5, channels_last=False, global_stats=False):
    """Batch normalisation from docs/OPS.md: x moved to channels first and viewed as [N, C,
    rest]; training: the batch mean and population variance per channel over N and rest, the
    running statistics blended with momentum; global statistics: the given mean and variance,
    passed through. out the normalised x times scale plus bias per channel (an absent (0-d)
    one 1 or 0); saved_mean, saved_variance the mean and 1/sqrt(variance + eps) used."""
    xc = np.moveaxis(x, -1, 1) if channels_last else x
    n, c = xc.shape[0], xc.shape[1]
    flat = np.moveaxis(xc, 1, 0).reshape(c, n * math.prod(xc.shape[2:]))
    if global_stats:
        mu, var, mean_out, variance_out = mean, variance, mean, variance
    else:
        mu, var = flat.mean(axis=1), flat.var(axis=1)
        mean_out = momentum * mean + (1 - momentum) * mu
        variance_out = momentum * variance + (1 - momentum) * var
    inv = 1 / np.sqrt(var + eps)
    along = (1, c) + (1,) * (xc.ndim - 2)
    out = (xc - mu.reshape(along)) * inv.reshape(along)
    if scale.ndim:
        out = out * scale.reshape(along)
    if bias.ndim:
        out = out + bias.reshape(along)
    return [np.moveaxis(out, 1, -1) if channels_last else out, mean_out, variance_out, mu, inv]


def gen_batch_norm():
    """Paddle's batch_norm: training (neither is_test without trainable_statistics nor
    use_global_stats) normalises per channel over N and every spatial position with the
    batch's statistics and blends them into the running ones; global statistics normalise
    with the given mean and variance. data_format NCHW or NHWC, x of rank 2 to 5; mean,
    variance [C]; scale, bias [C] or 0-d (absent)."""
    def v(*shape):
        return np.round(RNG32.uniform(-2, 2, size=shape), 2)

    def pos(*shape):
        return np.round(RNG32.uniform(0.1, 2, size=shape), 2)

    absent = np.zeros(())
    x, m3, v3, s3, b3 = v(2, 3, 2, 2), v(3), pos(3), v(3), v(3)
    case("batch_norm", "train_nchw_rank4", {}, [x, m3, v3, s3, b3], batch_norm_np(x, m3, v3, s3, b3))
    xl = v(2, 2, 3)
    case("batch_norm", "train_nhwc_rank3_momentum", {"data_format": "NHWC", "momentum": 0.5},
         [xl, m3, v3, absent, b3], batch_norm_np(xl, m3, v3, absent, b3, momentum=0.5, channels_last=True))
    x2 = v(4, 3)
    case("batch_norm", "train_rank2", {"epsilon": 1e-3}, [x2, m3, v3, s3, absent],
         batch_norm_np(x2, m3, v3, s3, absent, eps=1e-3))
    x5, m2, v2, s2 = v(2, 2, 1, 2, 2), v(2), pos(2), v(2)
    case("batch_norm", "train_rank5", {}, [x5, m2, v2, s2, absent], batch_norm_np(x5, m2, v2, s2, absent))
    case("batch_norm", "test_is_test_but_trainable_statistics", {"is_test": True, "trainable_statistics": True},
         [x, m3, v3, s3, b3], batch_norm_np(x, m3, v3, s3, b3))
    case("batch_norm", "infer_is_test_nchw", {"is_test": True}, [x, m3, v3, s3, b3],
         batch_norm_np(x, m3, v3, s3, b3, global_stats=True))
    case("batch_norm", "infer_use_global_stats_nhwc", {"use_global_stats": True, "data_format": "NHWC"},
         [xl, m3, v3, absent, absent], batch_norm_np(xl, m3, v3, absent, absent, channels_last=True,
                                                     global_stats=True))
    xk = v(3, 2, 2)
    xk[:, 1, :] = 0.75
    case("batch_norm", "train_constant_channel", {}, [xk, m2, v2, s2, absent], batch_norm_np(xk, m2, v2, s2, absent))
    xe = np.zeros((0, 3, 2))
    case("batch_norm", "infer_empty_batch", {"is_test": True}, [xe, m3, v3, s3, b3],
         batch_norm_np(xe, m3, v3, s3, b3, global_stats=True))
    xn = np.zeros((2, 0, 3))
    case("batch_norm", "train_no_channels", {}, [xn, np.zeros(0), np.zeros(0), absent, absent],
         batch_norm_np(xn, np.zeros(0), np.zeros(0), absent, absent))
    error("batch_norm", "train_empty_batch", {}, [xe, m3, v3, s3, b3], "inputs[0].shape")
    error("batch_norm", "rank1_x", {}, [v(3), m3, v3, s3, b3], "inputs[0].shape")
    error("batch_norm", "rank6_x", {}, [v(1, 3, 1, 1, 1, 2), m3, v3, s3, b3], "inputs[0].shape")
    error("batch_norm", "mean_wrong_size", {}, [x, v(2), v3, s3, b3], "inputs[1].shape")
    error("batch_norm", "variance_absent", {}, [x, m3, absent, s3, b3], "inputs[2].shape")
    error("batch_norm", "scale_wrong_size", {}, [x, m3, v3, v(4), b3], "inputs[3].shape")
    error("batch_norm", "nhwc_bias_of_dim1", {"data_format": "NHWC"}, [x, m2, v2, absent, b3], "inputs[4].shape")
    error("batch_norm", "unknown_data_format", {"data_format": "NCL"}, [x, m3, v3, s3, b3], "attrs.data_format")
    error("batch_norm", "negative_epsilon", {"epsilon": -1e-5}, [x, m3, v3, s3, b3], "attrs.epsilon")


family("indexing", ["index_put"])
RNG29 = np.random.default_rng(20261223)


def gen_index_put():
    """Paddle's index_put: the k index tensors broadcast to B; out = x with
    out[i0[b], ..., i{k-1}[b], ...] = value[b, ...] (value broadcast to B + x.shape[k:]),
    in B's row-major order (a repeated position: the last write wins) or added (accumulate).
    Negative ids count from the end."""
    def v(*shape):
        return np.round(RNG29.uniform(-3, 3, size=shape), 2)

    def ids(lo, hi, *shape):
        return T(RNG29.integers(lo, hi, size=shape), "int64")

    def put(x, indices, value, accumulate=False):
        out = np.array(x, dtype=np.float64)
        k = len(indices)
        idx = np.broadcast_arrays(*[np.asarray(i).astype(np.int64) for i in indices])
        b_shape = idx[0].shape
        value = np.broadcast_to(np.asarray(value, dtype=np.float64), b_shape + out.shape[k:])
        for b in np.ndindex(*b_shape):
            at = tuple(int(i[b]) % out.shape[j] for j, i in enumerate(idx))
            out[at] = out[at] + value[b] if accumulate else value[b]
        return out
    x = v(4, 3)
    i, u = ids(0, 4, 6), v(6, 3)
    case("index_put", "assign_repeated_ids", {}, [x, i, u], [put(x, [i.array], u)])
    y = v(3, 4)
    i0, i1, u = ids(0, 3, 2, 1), ids(0, 4, 3), v(3)
    case("index_put", "accumulate_broadcast_indices", {"accumulate": True}, [y, i0, i1, u],
         [put(y, [i0.array, i1.array], u, True)])
    z = v(3, 4, 2)
    i0, i1, u = T(np.array([-1, 0, -3, 2]), "int64"), T(np.array([2, -4, 1, -1]), "int64"), v(4, 2)
    case("index_put", "negative_ids_wrap", {}, [z, i0, i1, u], [put(z, [i0.array, i1.array], u)])
    i0, i1 = ids(0, 3, 5), ids(0, 4, 5)
    case("index_put", "accumulate_scalar_value_repeats_add", {"accumulate": True}, [y, i0, i1, np.array(1.5)],
         [put(y, [i0.array, i1.array], np.array(1.5), True)])
    u = v(1, 2)
    case("index_put", "assign_value_broadcast_over_b", {}, [z, i0, u], [put(z, [i0.array], u)])
    u = v(4)
    case("index_put", "zero_d_index", {}, [y, T(np.array(2), "int64"), u], [put(y, [np.array(2)], u)])
    u = v(2, 4)
    case("index_put", "float_ids", {}, [y, T(np.array([2.0, -3.0]), "float64"), u],
         [put(y, [np.array([2, -3])], u)])
    case("index_put", "empty_index", {"accumulate": True},
         [y, T(np.zeros((0,), dtype=np.int64), "int64"), np.zeros((0, 4))], [y])
    error("index_put", "id_out_of_range", {}, [y, T(np.array([1, 3]), "int64"), v(2, 4)], "inputs[1].data")
    error("index_put", "negative_id_out_of_range", {}, [y, ids(0, 3, 2), T(np.array([0, -5]), "int64"), v(2)],
          "inputs[2].data")
    error("index_put", "id_not_integer", {}, [y, T(np.array([0.5]), "float64"), v(1, 4)], "inputs[1].data")
    error("index_put", "indices_do_not_broadcast", {}, [y, ids(0, 3, 2), ids(0, 4, 3), v(1)], "inputs[2].shape")
    error("index_put", "value_does_not_broadcast", {}, [y, ids(0, 3, 2), v(3)], "inputs[2].shape")
    error("index_put", "value_larger_than_written", {}, [y, ids(0, 3, 2), v(2, 2, 4)], "inputs[2].shape")
    error("index_put", "more_indices_than_dims", {}, [v(3), ids(0, 3, 2), ids(0, 3, 2), v(2)], "inputs[0].shape")
    error("index_put", "no_index", {}, [y, v(3, 4)], "inputs")
    error("index_put", "bool_mask_not_provided", {}, [y, T(np.array([1, 0, 1]), "bool"), v(4)], "inputs[1].dtype",
          "Unsupported")


RNG13 = np.random.default_rng(20261207)


def gen_depthwise_conv2d():
    """Paddle's depthwise_conv2d: conv2d with groups equal to the input channels (one or
    more filters per channel), from the same definition (np_conv2d)."""
    def v(*shape):
        return np.round(RNG13.uniform(-2.0, 2.0, size=shape), 2)
    x, w = v(2, 3, 5, 4), v(6, 1, 3, 2)
    case("depthwise_conv2d", "multiplier_2", {"groups": 3, "paddings": [1, 0]}, [x, w],
         [np_conv2d(x, w, paddings=(1, 0), groups=3)])
    xn, wn = v(1, 4, 5, 2), v(2, 1, 2, 2)
    case("depthwise_conv2d", "nhwc_strided_dilated",
         {"groups": 2, "data_format": "NHWC", "strides": [2, 1], "dilations": [1, 2]}, [xn, wn],
         [np_conv2d(xn, wn, (2, 1), dilations=(1, 2), groups=2, data_format="NHWC")])
    xs, ws = v(1, 2, 5, 5), v(2, 1, 3, 3)
    case("depthwise_conv2d", "same_strided", {"groups": 2, "padding_algorithm": "SAME", "strides": [2, 2]},
         [xs, ws], [np_conv2d(xs, ws, (2, 2), algorithm="SAME", groups=2)])
    error("depthwise_conv2d", "groups_channels", {"groups": 2}, [x, w], "inputs[1].shape")



family("conv", ["conv3d", "conv3d_grad"])
RNG23 = np.random.default_rng(20261217)


def conv_nd_geometry(sizes, ksizes, strides, paddings, algorithm, dilations):
    """Per spatial dim (pad before, pad after) and the dilation in effect, from Paddle's
    attrs: one padding per dim (both sides) or two (before, after); SAME pads so that
    ceil(size / stride) positions fit (the odd pad after) with dilation 1; VALID none."""
    nd = len(sizes)
    if len(paddings) == nd:
        pads = [(p, p) for p in paddings]
    else:
        pads = [(paddings[2 * d], paddings[2 * d + 1]) for d in range(nd)]
    dil = list(dilations)
    if algorithm == "VALID":
        pads = [(0, 0)] * nd
    elif algorithm == "SAME":
        dil = [1] * nd
        pads = []
        for size, stride, k in zip(sizes, strides, ksizes):
            out = -(-size // stride)
            total = max((out - 1) * stride + k - size, 0)
            pads.append((total // 2, total - total // 2))
    return pads, dil


def np_conv_nd(x, w, strides, paddings, algorithm="EXPLICIT", dilations=None, groups=1,
               channels_last=False, g=None):
    """A convolution over any number of spatial dims from the definition: zero-pad x, then
    each filter tap (o, i, j, ...) adds w[o, :, tap] times the strided patch of its group's
    channels starting at tap * dilation. With g (out's cotangent) returns the gradients
    [x_grad, w_grad] instead: each tap's patch gets g[:, o] w[o, :, tap], each tap's filter
    entry the sum of g[:, o] * patch; the padding is cut off x_grad."""
    nd = x.ndim - 2
    dilations = dilations or [1] * nd
    if channels_last:
        x = np.moveaxis(x, -1, 1)
        if g is not None:
            g = np.moveaxis(g, -1, 1)
    pads, dil = conv_nd_geometry(x.shape[2:], w.shape[2:], strides, paddings, algorithm, dilations)
    xp = np.pad(x, [(0, 0), (0, 0)] + pads)
    sizes = [(xp.shape[2 + d] - ((w.shape[2 + d] - 1) * dil[d] + 1)) // strides[d] + 1 for d in range(nd)]
    o, cg = w.shape[:2]
    og = o // groups
    sp = "xyz"[:nd]
    out = np.zeros((x.shape[0], o) + tuple(sizes))
    xp_grad, w_grad = np.zeros_like(xp), np.zeros_like(w)
    for oc in range(o):
        grp = oc // og
        for tap in np.ndindex(*w.shape[2:]):
            at = (slice(None), slice(grp * cg, (grp + 1) * cg)) + tuple(
                slice(tap[d] * dil[d], tap[d] * dil[d] + (sizes[d] - 1) * strides[d] + 1, strides[d])
                for d in range(nd))
            if g is None:
                out[:, oc] += np.einsum(f"nc{sp},c->n{sp}", xp[at], w[(oc, slice(None)) + tap])
            else:
                w_grad[(oc, slice(None)) + tap] = np.einsum(f"nc{sp},n{sp}->c", xp[at], g[:, oc])
                xp_grad[at] += np.einsum(f"n{sp},c->nc{sp}", g[:, oc], w[(oc, slice(None)) + tap])
    if g is not None:
        x_grad = xp_grad[(slice(None), slice(None)) + tuple(
            slice(pads[d][0], pads[d][0] + x.shape[2 + d]) for d in range(nd))]
        return [np.moveaxis(x_grad, 1, -1) if channels_last else x_grad, w_grad]
    return np.moveaxis(out, 1, -1) if channels_last else out


def gen_conv3d():
    """Paddle's conv3d (x NCDHW or NDHWC, filter [O, C / groups, kd, kh, kw]) and
    conv3d_grad, from the N-d definition above."""
    def v(*shape):
        return np.round(RNG23.uniform(-2.0, 2.0, size=shape), 2)

    forms = [
        # name, attrs, x, w, np_conv_nd keywords
        ("basic", {}, (2, 3, 4, 5, 4), (4, 3, 2, 2, 2), {}),
        ("strided_padded_dilated", {"strides": [2, 1, 2], "paddings": [1, 0, 0, 2, 1, 1], "dilations": [1, 2, 1]},
         (1, 2, 5, 5, 4), (3, 2, 2, 2, 3), {}),
        ("padding_3", {"paddings": [1, 0, 2]}, (1, 2, 3, 4, 2), (2, 2, 3, 2, 2), {}),
        ("same", {"padding_algorithm": "SAME", "strides": [2, 1, 3], "dilations": [2, 2, 2]},
         (1, 2, 5, 4, 5), (2, 2, 2, 3, 2), {}),
        ("valid", {"padding_algorithm": "VALID", "paddings": [4, 4, 4]}, (1, 2, 4, 3, 3), (2, 2, 2, 2, 3), {}),
        ("groups", {"groups": 2, "paddings": [1, 1, 0]}, (2, 4, 3, 4, 3), (6, 2, 2, 3, 2), {}),
        ("depthwise", {"groups": 3, "paddings": [0, 1, 1]}, (1, 3, 3, 4, 4), (3, 1, 2, 3, 3), {}),
        ("ndhwc_groups_strided", {"data_format": "NDHWC", "groups": 2, "strides": [1, 2, 1],
                                  "dilations": [2, 1, 1], "paddings": [0, 1, 1, 0, 0, 1]},
         (2, 4, 4, 3, 4), (4, 2, 2, 2, 2), {"channels_last": True}),
    ]
    grads = []
    for name, attrs, xs, ws, kw in forms:
        x, w = v(*xs), v(*ws)
        geometry = dict(strides=attrs.get("strides", [1, 1, 1]), paddings=attrs.get("paddings", [0, 0, 0]),
                        algorithm=attrs.get("padding_algorithm", "EXPLICIT"),
                        dilations=attrs.get("dilations", [1, 1, 1]), groups=attrs.get("groups", 1), **kw)
        out = np_conv_nd(x, w, **geometry)
        case("conv3d", name, attrs, [x, w], [out])
        grads.append((name, attrs, x, w, v(*out.shape), geometry))
    x, w = v(2, 3, 4, 5, 4), v(4, 3, 2, 2, 2)
    case("conv3d", "empty_batch", {}, [np.zeros((0, 3, 4, 5, 4)), w], [np.zeros((0, 4, 3, 4, 3))])
    error("conv3d", "rank_4", {}, [v(2, 3, 5, 4), w], "inputs[0].shape")
    error("conv3d", "filter_rank", {}, [x, v(4, 3, 2, 2)], "inputs[1].shape")
    error("conv3d", "channels", {}, [x, v(4, 2, 2, 2, 2)], "inputs[1].shape")
    error("conv3d", "groups_out_channels", {"groups": 3}, [x, v(4, 1, 2, 2, 2)], "inputs[1].shape")
    error("conv3d", "filter_too_large", {}, [x, v(4, 3, 5, 2, 2)], "inputs[1].shape")
    error("conv3d", "stride_count", {"strides": [1, 1]}, [x, w], "attrs.strides")
    error("conv3d", "stride_zero", {"strides": [1, 0, 1]}, [x, w], "attrs.strides")
    error("conv3d", "dilation_count", {"dilations": [1, 1, 1, 1]}, [x, w], "attrs.dilations")
    error("conv3d", "paddings_count", {"paddings": [1, 1, 1, 1]}, [x, w], "attrs.paddings")
    error("conv3d", "negative_padding", {"paddings": [0, -1, 0]}, [x, w], "attrs.paddings")
    error("conv3d", "groups_zero", {"groups": 0}, [x, w], "attrs.groups")
    error("conv3d", "algorithm", {"padding_algorithm": "FULL"}, [x, w], "attrs.padding_algorithm")
    error("conv3d", "format_2d", {"data_format": "NCHW"}, [x, w], "attrs.data_format")
    error("conv3d", "format_nhwc", {"data_format": "NHWC"}, [x, w], "attrs.data_format")
    for name, attrs, gx, gw, gg, geometry in grads:
        case("conv3d_grad", name, attrs, [gx, gw, gg], np_conv_nd(gx, gw, g=gg, **geometry))
    g = v(2, 4, 3, 4, 3)
    case("conv3d_grad", "empty_batch", {}, [np.zeros((0, 3, 4, 5, 4)), w, np.zeros((0, 4, 3, 4, 3))],
         [np.zeros((0, 3, 4, 5, 4)), np.zeros((4, 3, 2, 2, 2))])
    error("conv3d_grad", "out_grad_shape", {}, [x, w, v(2, 4, 3, 4, 2)], "inputs[2].shape")
    error("conv3d_grad", "out_grad_ndhwc_order", {}, [x, w, v(2, 3, 4, 3, 4)], "inputs[2].shape")
    error("conv3d_grad", "out_grad_rank", {}, [x, w, v(2, 4, 12, 3)], "inputs[2].shape")
    error("conv3d_grad", "filter_too_large", {}, [x, v(4, 3, 5, 2, 2), g], "inputs[1].shape")
    error("conv3d_grad", "input_rank", {}, [v(3, 4, 5, 4), w, g], "inputs[0].shape")
    error("conv3d_grad", "stride_zero", {"strides": [0, 1, 1]}, [x, w, g], "attrs.strides")
    error("conv3d_grad", "two_inputs", {}, [x, w], "inputs")


family("conv", ["conv2d_transpose"])
RNG24 = np.random.default_rng(20261218)


def np_conv2d_transpose(x, w, strides=(1, 1), paddings=(0, 0), output_padding=(), output_size=(),
                        algorithm="EXPLICIT", dilations=(1, 1), groups=1, data_format="NCHW"):
    """From the definition, element by element: x[n, c, r, s] times w[c, m, i, j] lands on
    out[n, group(c) M/groups + m, r sh + i dh - pad_top, s sw + j dw - pad_left] when that
    lies inside out, whose size is (size - 1) stride - pads + (k - 1) dilation + 1 plus
    output_padding, or output_size. SAME and VALID pad as conv2d does, on x's sizes."""
    if data_format == "NHWC":
        x = np.transpose(x, (0, 3, 1, 2))
    n, c, h, wd = x.shape
    cin, mg, kh, kw = w.shape
    pads, dil = conv_nd_geometry((h, wd), (kh, kw), strides, paddings, algorithm, dilations)
    sizes = []
    for d, (size, k) in enumerate(((h, kh), (wd, kw))):
        base = (size - 1) * strides[d] - pads[d][0] - pads[d][1] + (k - 1) * dil[d] + 1
        sizes.append(output_size[d] if output_size else base + (output_padding[d] if output_padding else 0))
    out = np.zeros((n, mg * groups, sizes[0], sizes[1]))
    cg = c // groups
    for ci in range(c):
        grp = ci // cg
        for r in range(h):
            for s in range(wd):
                for i in range(kh):
                    p = r * strides[0] + i * dil[0] - pads[0][0]
                    if not 0 <= p < sizes[0]:
                        continue
                    for j in range(kw):
                        q = s * strides[1] + j * dil[1] - pads[1][0]
                        if 0 <= q < sizes[1]:
                            out[:, grp * mg:(grp + 1) * mg, p, q] += np.outer(x[:, ci, r, s], w[ci, :, i, j])
    return np.transpose(out, (0, 2, 3, 1)) if data_format == "NHWC" else out


def gen_conv2d_transpose():
    """Paddle's conv2d_transpose (x NCHW or NHWC, filter [C, M / groups, kh, kw])."""
    def v(*shape):
        return np.round(RNG24.uniform(-2.0, 2.0, size=shape), 2)

    forms = [
        # name, attrs, x, w
        ("basic", {}, (2, 3, 4, 3), (3, 2, 2, 2)),
        ("strided_padded", {"strides": [2, 3], "paddings": [1, 0, 0, 2]}, (1, 2, 3, 3), (2, 3, 3, 2)),
        ("padding_2", {"paddings": [1, 1]}, (1, 2, 3, 4), (2, 2, 3, 3)),
        ("dilated", {"dilations": [2, 1], "strides": [1, 2]}, (2, 2, 3, 3), (2, 2, 2, 3)),
        ("output_padding", {"strides": [2, 3], "output_padding": [1, 2]}, (1, 2, 3, 2), (2, 2, 2, 2)),
        ("output_padding_beyond_stride", {"dilations": [2, 3], "output_padding": [1, 2], "paddings": [1, 1]},
         (1, 2, 3, 3), (2, 1, 2, 2)),
        ("output_size", {"strides": [2, 3], "output_size": [8, 7], "paddings": [0, 1]}, (1, 2, 4, 3), (2, 2, 2, 2)),
        ("same", {"padding_algorithm": "SAME", "strides": [2, 1], "dilations": [2, 2]}, (1, 2, 4, 3), (2, 2, 3, 2)),
        ("valid", {"padding_algorithm": "VALID", "paddings": [3, 3]}, (1, 2, 3, 3), (2, 2, 2, 2)),
        ("groups", {"groups": 2, "paddings": [1, 0]}, (2, 4, 3, 3), (4, 3, 2, 2)),
        ("depthwise", {"groups": 3, "strides": [2, 2]}, (1, 3, 2, 3), (3, 1, 3, 3)),
        ("nhwc_groups_strided", {"data_format": "NHWC", "groups": 2, "strides": [2, 1],
                                 "output_padding": [1, 0], "paddings": [0, 1, 1, 0]},
         (2, 3, 4, 4), (4, 2, 2, 3)),
    ]
    for name, attrs, xs, ws in forms:
        x, w = v(*xs), v(*ws)
        kw = {key: attrs[key] for key in ("strides", "paddings", "output_padding", "output_size", "dilations",
                                          "groups", "data_format") if key in attrs}
        if "padding_algorithm" in attrs:
            kw["algorithm"] = attrs["padding_algorithm"]
        case("conv2d_transpose", name, attrs, [x, w], [np_conv2d_transpose(x, w, **kw)])
    x, w = v(2, 3, 4, 3), v(3, 2, 2, 2)
    case("conv2d_transpose", "empty_batch", {}, [np.zeros((0, 3, 4, 3)), w], [np.zeros((0, 2, 5, 4))])
    error("conv2d_transpose", "rank_3", {}, [v(3, 4, 3), w], "inputs[0].shape")
    error("conv2d_transpose", "filter_rank", {}, [x, v(3, 2, 2)], "inputs[1].shape")
    error("conv2d_transpose", "channels", {}, [x, v(2, 3, 2, 2)], "inputs[1].shape")
    error("conv2d_transpose", "groups_channels", {"groups": 2}, [x, w], "inputs[1].shape")
    error("conv2d_transpose", "empty_spatial", {}, [np.zeros((2, 3, 0, 3)), w], "inputs[0].shape")
    error("conv2d_transpose", "stride_zero", {"strides": [0, 1]}, [x, w], "attrs.strides")
    error("conv2d_transpose", "dilation_count", {"dilations": [1]}, [x, w], "attrs.dilations")
    error("conv2d_transpose", "paddings_count", {"paddings": [1, 1, 1]}, [x, w], "attrs.paddings")
    error("conv2d_transpose", "paddings_leave_nothing", {"paddings": [3, 0]}, [x, w], "attrs.paddings")
    error("conv2d_transpose", "output_padding_count", {"output_padding": [1]}, [x, w], "attrs.output_padding")
    error("conv2d_transpose", "output_padding_not_below_stride", {"strides": [2, 2], "output_padding": [2, 0]},
          [x, w], "attrs.output_padding")
    error("conv2d_transpose", "output_padding_negative", {"output_padding": [0, -1]}, [x, w],
          "attrs.output_padding")
    error("conv2d_transpose", "output_size_below", {"output_size": [4, 4]}, [x, w], "attrs.output_size")
    error("conv2d_transpose", "output_size_beyond_stride", {"strides": [2, 2], "output_size": [10, 7]}, [x, w],
          "attrs.output_size")
    error("conv2d_transpose", "output_size_count", {"output_size": [5]}, [x, w], "attrs.output_size")
    error("conv2d_transpose", "output_size_and_padding", {"output_size": [5, 4], "output_padding": [0, 0]},
          [x, w], "attrs.output_padding")
    error("conv2d_transpose", "groups_zero", {"groups": 0}, [x, w], "attrs.groups")
    error("conv2d_transpose", "algorithm", {"padding_algorithm": "FULL"}, [x, w], "attrs.padding_algorithm")
    error("conv2d_transpose", "format", {"data_format": "NCDHW"}, [x, w], "attrs.data_format")


# layer_norm and layer_norm_grad with absent parameters: a stream of their own (RNG28), so
# that every case above keeps its values.
RNG28 = np.random.default_rng(20261222)


def gen_layer_norm_optional():
    """Paddle's layer_norm(x, scale?, bias?): a 0-d scale or bias is absent (scale 1, bias 0,
    its value not read); layer_norm_grad takes them the same way and gives an absent
    parameter's gradient as a 0-d zero. The expected values are the ones of the whole-
    parameter formulas above with ones and zeros in place of the absent parameters."""
    def v(*shape):
        return np.round(RNG28.uniform(-2, 2, size=shape), 2)

    def absent(value=0.0):
        return np.array(value)

    def params(n, has_scale, has_bias):
        """The given parameters (absent ones 0-d, holding a value that must not be read) and
        the ones and zeros the formulas use for them."""
        scale, bias = v(n) if has_scale else absent(3.5), v(n) if has_bias else absent(-1.25)
        return scale, bias, scale if has_scale else np.ones(n), bias if has_bias else np.zeros(n)

    for label, shape, begin, attrs, has_scale, has_bias in [
            ("scale_absent", (3, 4), 1, {}, False, True),
            ("bias_absent_begin2_eps", (2, 3, 4), 2, {"begin_norm_axis": 2, "epsilon": 1e-3}, True, False),
            ("both_absent_begin_minus2", (2, 3, 4), 1, {"begin_norm_axis": -2}, False, False),
            ("both_absent_empty_rows", (0, 3), 1, {}, False, False)]:
        x = v(*shape)
        n = int(np.prod(shape[begin:]))
        scale, bias, s_used, b_used = params(n, has_scale, has_bias)
        eps = attrs.get("epsilon", 1e-5)
        case("layer_norm", label, attrs, [x, scale, bias], list(norm_forward(x, s_used, b_used, eps, begin, False)))

    for label, shape, begin, attrs, has_scale, has_bias in [
            ("scale_absent", (3, 4), 1, {}, False, True),
            ("bias_absent_begin2", (2, 3, 4), 2, {"begin_norm_axis": 2}, True, False),
            ("both_absent_eps", (2, 5), -1, {"begin_norm_axis": -1, "epsilon": 1e-3}, False, False)]:
        x, g = v(*shape), v(*shape)
        _, b = rows_of(x, begin)
        n = int(np.prod(shape[b:]))
        scale, bias, s_used, b_used = params(n, has_scale, has_bias)
        eps = attrs.get("epsilon", 1e-5)
        _, mean, var = norm_forward(x, s_used, b_used, eps, begin, rms=False)
        grads = np_layer_norm_grad(x, s_used, mean, var, g, eps, begin)
        check_against_differences(x, s_used, b_used, g, eps, begin, False, grads)
        if not has_scale:
            grads[1] = np.zeros(())
        if not has_bias:
            grads[2] = np.zeros(())
        case("layer_norm_grad", label, attrs, [x, scale, bias, mean, var, g], grads)

    x = v(2, 3)
    error("layer_norm", "absent_scale_bias_wrong", {}, [x, absent(), v(2)], "inputs[2].shape")
    error("layer_norm", "absent_bias_scale_2d", {}, [x, v(1, 3), absent()], "inputs[1].shape")
    g, st, vr = v(2, 3), v(2), np.round(RNG28.uniform(0.1, 2, size=2), 2)
    op = "layer_norm_grad"
    error(op, "absent_scale_bias_wrong", {}, [x, absent(), v(4), st, vr, g], "inputs[2].shape")
    error(op, "both_absent_mean_wrong", {}, [x, absent(), absent(), v(3), vr, g], "inputs[3].shape")
    error(op, "absent_bias_out_grad_wrong", {}, [x, v(3), absent(), st, vr, v(3, 2)], "inputs[5].shape")


family("conv", ["roi_align", "roi_align_grad"])
RNG31 = np.random.default_rng(20261225)


def np_roi_taps(boxes, boxes_num, n_images, h, w, pooled_h, pooled_w, spatial_scale, sampling_ratio, aligned):
    """roi_align's bilinear taps from the definition, one sample at a time: per roi its
    image, and (bin, y, x, weight) for each of each sample's four neighbours. A roi is its
    box times spatial_scale (minus 0.5 aligned; not aligned at least 1 x 1) cut into bins,
    sampled on a grid (sampling_ratio, or ceil(bin size) when <= 0) at the cells' centres;
    a sample outside [-1, H] x [-1, W] reads 0, one inside is clamped to [0, H - 1] x
    [0, W - 1] and mixes its neighbours; a bin is the mean of its samples (0 without)."""
    rois = boxes.shape[0]
    if boxes_num is None:
        image = [0] * rois
    else:
        image = [b for b in range(n_images) for _ in range(int(boxes_num[b]))]
    off = 0.5 if aligned else 0.0
    taps = []
    for r in range(rois):
        x1, y1, x2, y2 = (float(v) * spatial_scale - off for v in boxes[r])
        rw, rh = x2 - x1, y2 - y1
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / pooled_h, rw / pooled_w
        gh = sampling_ratio if sampling_ratio > 0 else math.ceil(bh)
        gw = sampling_ratio if sampling_ratio > 0 else math.ceil(bw)
        gh, gw = max(gh, 0), max(gw, 0)
        count = max(gh * gw, 1)
        roi = []
        for ph in range(pooled_h):
            for pw in range(pooled_w):
                for iy in range(gh):
                    y = y1 + bh * (ph + (iy + 0.5) / gh)
                    for ix in range(gw):
                        x = x1 + bw * (pw + (ix + 0.5) / gw)
                        if y < -1 or y > h or x < -1 or x > w:
                            continue
                        y, x = max(y, 0.0), max(x, 0.0)
                        yl, xl = int(math.floor(y)), int(math.floor(x))
                        yh, xh = yl + 1, xl + 1
                        if yl >= h - 1:
                            yl = yh = h - 1
                            y = float(yl)
                        if xl >= w - 1:
                            xl = xh = w - 1
                            x = float(xl)
                        ly, lx = y - yl, x - xl
                        for yy, xx, wt in ((yl, xl, (1 - ly) * (1 - lx)), (yl, xh, (1 - ly) * lx),
                                           (yh, xl, ly * (1 - lx)), (yh, xh, ly * lx)):
                            roi.append((ph, pw, yy, xx, wt / count))
        taps.append((image[r], roi))
    return taps


def np_roi_align(x, boxes, boxes_num, pooled_height=1, pooled_width=1, spatial_scale=1.0, sampling_ratio=-1,
                 aligned=False):
    n, c, h, w = x.shape
    out = np.zeros((boxes.shape[0], c, pooled_height, pooled_width))
    taps = np_roi_taps(boxes, boxes_num, n, h, w, pooled_height, pooled_width, spatial_scale, sampling_ratio,
                       aligned)
    for r, (img, roi) in enumerate(taps):
        for ph, pw, yy, xx, wt in roi:
            out[r, :, ph, pw] += wt * x[img, :, yy, xx]
    return out


def np_roi_align_grad(x_shape, boxes, boxes_num, g, pooled_height=1, pooled_width=1, spatial_scale=1.0,
                      sampling_ratio=-1, aligned=False):
    n, c, h, w = x_shape
    x_grad = np.zeros(x_shape)
    taps = np_roi_taps(boxes, boxes_num, n, h, w, pooled_height, pooled_width, spatial_scale, sampling_ratio,
                       aligned)
    for r, (img, roi) in enumerate(taps):
        for ph, pw, yy, xx, wt in roi:
            x_grad[img, :, yy, xx] += wt * g[r, :, ph, pw]
    return x_grad


def gen_roi_align():
    """Paddle's roi_align(x NCHW, boxes [R, 4] as (x1, y1, x2, y2), boxes_num [N] or 0-d
    (absent: every roi image 0's)) and roi_align_grad(x, boxes, boxes_num, out_grad)."""
    def v(*shape):
        return np.round(RNG31.uniform(-2.0, 2.0, size=shape), 2)

    def box(rows, lo, hi):
        b = np.round(RNG31.uniform(lo, hi, size=(rows, 4)), 2)
        return np.concatenate([np.minimum(b[:, :2], b[:, 2:]), np.maximum(b[:, :2], b[:, 2:])], axis=1)

    def num(*counts):
        return T(np.array(counts), "int64")

    forms = [
        # name, attrs, x shape, boxes, boxes_num counts (None: absent, 0-d)
        ("aligned_adaptive", {"pooled_height": 2, "pooled_width": 3, "spatial_scale": 0.5, "aligned": True},
         (2, 3, 6, 5), box(4, 0.0, 11.0), (2, 2)),
        ("not_aligned_ratio2", {"pooled_height": 2, "pooled_width": 2, "sampling_ratio": 2},
         (2, 2, 5, 6), box(3, -1.5, 6.5), (1, 2)),
        ("sampling0_aligned", {"pooled_height": 2, "pooled_width": 1, "sampling_ratio": 0, "aligned": True},
         (1, 2, 4, 4), np.array([[0.5, 0.2, 3.7, 3.9], [1.0, 1.0, 1.0, 2.5], [-2.0, 2.5, 5.5, 6.0]]), (3,)),
        ("sampling0_not_aligned_small_boxes", {"pooled_height": 1, "pooled_width": 2, "sampling_ratio": 0},
         (1, 1, 3, 5), np.array([[1.2, 0.3, 1.6, 0.5], [0.0, 0.0, 4.9, 2.9], [3.8, 1.0, 5.5, 2.0]]), (3,)),
        ("ratio2_aligned_scaled", {"pooled_height": 3, "pooled_width": 2, "spatial_scale": 0.25,
                                   "sampling_ratio": 2, "aligned": True},
         (2, 2, 4, 3), box(3, 0.0, 16.0), (0, 3)),
        ("absent_boxes_num", {"pooled_height": 2, "pooled_width": 2, "sampling_ratio": 1},
         (2, 2, 4, 4), box(2, 0.0, 4.0), None),
        ("one_pixel_image", {"pooled_height": 2, "pooled_width": 2, "sampling_ratio": 2, "aligned": True},
         (1, 2, 1, 1), np.array([[-0.5, -0.5, 1.5, 1.2]]), (1,)),
        ("defaults", {}, (1, 2, 3, 3), box(2, 0.0, 3.0), (2,)),
        ("no_rois", {"pooled_height": 2, "pooled_width": 2}, (2, 2, 3, 3), np.zeros((0, 4)), (0, 0)),
    ]
    full = {"pooled_height": 1, "pooled_width": 1, "spatial_scale": 1.0, "sampling_ratio": -1, "aligned": False}
    for name, attrs, xs, boxes, counts in forms:
        x = v(*xs)
        b = np.asarray(boxes, dtype=np.float64)
        bn = T(np.array(0), "int64") if counts is None else num(*counts)
        cnt = None if counts is None else np.array(counts)
        a = dict(full, **attrs)
        out = np_roi_align(x, b, cnt, **a)
        case("roi_align", name, attrs, [x, b, bn], [out])
        g = v(*out.shape)
        case("roi_align_grad", name, attrs, [x, b, bn, g], [np_roi_align_grad(x.shape, b, cnt, g, **a)])

    x = v(2, 2, 4, 4)
    b = box(3, 0.0, 4.0)
    ok = {"pooled_height": 2, "pooled_width": 2}
    error("roi_align", "boxes_num_sum", ok, [x, b, num(1, 1)], "inputs[2].data")
    error("roi_align", "boxes_num_over", ok, [x, b, num(4, 0)], "inputs[2].data")
    error("roi_align", "boxes_num_negative", ok, [x, b, num(-1, 4)], "inputs[2].data")
    error("roi_align", "boxes_num_fraction", ok, [x, b, T(np.array([1.5, 1.5]))], "inputs[2].data")
    nan_b = b.copy()
    nan_b[1, 2] = np.nan
    error("roi_align", "box_nan", ok, [x, nan_b, num(1, 2)], "inputs[1].data")
    inf_b = b.copy()
    inf_b[0, 0] = -np.inf
    error("roi_align", "box_inf", ok, [x, inf_b, num(1, 2)], "inputs[1].data")
    huge = np.array([[0.0, 0.0, 1.0, 5000.0]])
    error("roi_align", "adaptive_grid_too_large", ok, [x, huge, num(1, 0)], "inputs[1].data")
    error("roi_align", "boxes_5_wide", ok, [x, np.zeros((3, 5)), num(1, 2)], "inputs[1].shape")
    error("roi_align", "boxes_rank_1", ok, [x, np.zeros(4), num(1, 0)], "inputs[1].shape")
    error("roi_align", "x_rank_3", ok, [x[0], b, num(1, 2)], "inputs[0].shape")
    error("roi_align", "x_empty_plane", ok, [np.zeros((2, 2, 0, 4)), b, num(1, 2)], "inputs[0].shape")
    error("roi_align", "boxes_num_not_n", ok, [x, b, num(1, 1, 1)], "inputs[2].shape")
    error("roi_align", "absent_without_image", ok, [np.zeros((0, 2, 4, 4)), b, T(np.array(0), "int64")],
          "inputs[0].shape")
    error("roi_align", "pooled_height_zero", {"pooled_height": 0}, [x, b, num(1, 2)], "attrs.pooled_height")
    error("roi_align", "pooled_width_negative", {"pooled_width": -1}, [x, b, num(1, 2)], "attrs.pooled_width")
    error("roi_align", "spatial_scale_zero", {"spatial_scale": 0.0}, [x, b, num(1, 2)], "attrs.spatial_scale")
    error("roi_align", "sampling_ratio_too_large", {"sampling_ratio": 1025}, [x, b, num(1, 2)],
          "attrs.sampling_ratio")
    g = v(3, 2, 2, 2)
    error("roi_align_grad", "out_grad_shape", ok, [x, b, num(1, 2), v(3, 2, 2, 1)], "inputs[3].shape")
    error("roi_align_grad", "boxes_num_sum", ok, [x, b, num(2, 2), g], "inputs[2].data")
    error("roi_align_grad", "box_nan", ok, [x, nan_b, num(1, 2), g], "inputs[1].data")
    error("roi_align_grad", "pooled_width_zero", {"pooled_width": 0}, [x, b, num(1, 2), g], "attrs.pooled_width")




RNG36 = np.random.default_rng(20261230)


def np_multi_label_ce(logits, label, w, ignore_index=-100, sum_loss=True):
    """Softmax over the last dim; label j of a row costs w_j * -log p[label_j], 0 where it is
    ignore_index; summed over the row's labels ([..., 1]) or one per label ([..., k])."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    ignored = label == ignore_index
    safe = np.where(ignored, 0, label).astype(np.int64)
    per = np.where(ignored, 0.0, -np.take_along_axis(logp, safe, axis=-1) * w)
    return np.exp(logp), per.sum(axis=-1, keepdims=True) if sum_loss else per


def np_multi_label_ce_grad(p, label, w, g, ignore_index=-100, sum_loss=True, start=0):
    """sum over the labels j not ignored of w_j g_j (p - onehot(label_j)) on classes
    [start, start + C) of the global axis."""
    gj = np.broadcast_to(g, label.shape) if sum_loss else g
    wg = np.where(label == ignore_index, 0.0, w * gj)
    out = p * wg.sum(axis=-1, keepdims=True)
    flat_out, flat_label, flat_wg = out.reshape(-1, p.shape[-1]), label.reshape(-1, label.shape[-1]), wg.reshape(-1, label.shape[-1])
    for r in range(flat_out.shape[0]):
        for j in range(flat_label.shape[1]):
            c = flat_label[r, j] - start
            if flat_label[r, j] != ignore_index and 0 <= c < p.shape[-1]:
                flat_out[r, c] -= flat_wg[r, j]
    return flat_out.reshape(p.shape)


family("selection", ["nonzero", "unique"])

RNG37 = np.random.default_rng(20261231)


def np_nonzero(x):
    """The [count, rank] int64 coordinates of x's nonzero elements in row-major order (NaN is
    nonzero, -0 is zero)."""
    x = np.asarray(x)
    return T(np.argwhere(x != 0).reshape(-1, x.ndim), "int64")


def py_unique(x, dtype="float64", index=False, inverse=False, counts=False):
    """unique over the flattened x by its definition (docs/OPS.md), in plain Python: the sorted
    distinct values (NaNs one value, above every number; -0 and 0 one value, the first met
    kept), the first position of each, the position in out of each element, the counts. An
    output whose flag is false is unset: 0-d int64 zero."""
    flat = [float(v) for v in np.asarray(x, dtype=np.float64).reshape(-1)]

    def same(a, b):
        return a == b or (math.isnan(a) and math.isnan(b))

    firsts = [i for i, v in enumerate(flat) if not any(same(flat[j], v) for j in range(i))]
    firsts.sort(key=lambda i: (1, 0.0) if math.isnan(flat[i]) else (0, flat[i]))
    out = np.array([flat[i] for i in firsts])
    inv = np.array([next(k for k, i in enumerate(firsts) if same(flat[i], v)) for v in flat], dtype=np.int64)
    cnt = np.array([sum(same(flat[i], v) for v in flat) for i in firsts], dtype=np.int64)
    unset = T(np.array(0), "int64")
    return [T(out, dtype), T(np.array(firsts, dtype=np.int64), "int64") if index else unset,
            T(inv, "int64") if inverse else unset, T(cnt, "int64") if counts else unset]


def py_unique_axis(x, axis, dtype="float64", index=False, inverse=False, counts=False):
    """unique along one axis by its definition (docs/OPS.md), in plain Python: x's slices along
    axis (each listed in its own row-major order), the distinct ones (every element the same
    value, as py_unique's) sorted lexicographically, the first element that differs deciding
    (NaN above every number), laid back along axis; the first position of each, the position
    in out of each slice, the counts. Checked against np.unique(axis=...) where x holds no NaN
    (numpy keeps NaN slices apart)."""
    x = np.asarray(x)
    moved = np.moveaxis(x.astype(np.float64), axis, 0)
    slices = [[float(v) for v in s.reshape(-1)] for s in moved]

    def same(a, b):
        return all(u == v or (math.isnan(u) and math.isnan(v)) for u, v in zip(a, b))

    def key(s):
        return [(1, 0.0) if math.isnan(v) else (0, v) for v in s]

    firsts = [i for i, s in enumerate(slices) if not any(same(slices[j], s) for j in range(i))]
    firsts.sort(key=lambda i: key(slices[i]))
    out = np.moveaxis(moved[firsts] if firsts else moved[:0], 0, axis)
    inv = np.array([next(k for k, i in enumerate(firsts) if same(slices[i], s)) for s in slices], dtype=np.int64)
    cnt = np.array([sum(same(slices[i], s) for s in slices) for i in firsts], dtype=np.int64)
    if not np.isnan(moved).any():
        want, want_index, want_inverse, want_counts = np.unique(
            x.astype(np.float64), axis=axis, return_index=True, return_inverse=True, return_counts=True)
        assert np.array_equal(want, out) and np.array_equal(want_index, firsts)
        assert np.array_equal(want_inverse.reshape(-1), inv) and np.array_equal(want_counts, cnt)
    unset = T(np.array(0), "int64")
    return [T(out, dtype), T(np.array(firsts, dtype=np.int64), "int64") if index else unset,
            T(inv, "int64") if inverse else unset, T(cnt, "int64") if counts else unset]


def gen_selection():
    def small(*shape):
        return RNG37.integers(-2, 3, size=shape).astype(np.float64)

    x = small(3, 4)
    x3 = small(2, 3, 2)
    case("nonzero", "2d", {}, [x], [np_nonzero(x)])
    case("nonzero", "3d", {}, [x3], [np_nonzero(x3)])
    x1 = small(6)
    case("nonzero", "1d_float32", {}, [T(x1, "float32")], [np_nonzero(x1)])
    special = np.array([0.0, np.nan, -0.0, np.inf, -np.inf, 0.0])
    case("nonzero", "nan_and_signed_zero", {}, [special], [T(np.array([[1], [3], [4]]), "int64")])
    case("nonzero", "all_zero", {}, [np.zeros((2, 3))], [T(np.zeros((0, 2)), "int64")])
    case("nonzero", "empty_dim", {}, [np.zeros((0, 3))], [T(np.zeros((0, 2)), "int64")])
    ids = RNG37.integers(0, 3, size=(2, 3))
    case("nonzero", "int64", {}, [T(ids, "int64")], [np_nonzero(ids)])
    mask = RNG37.integers(0, 2, size=(4,))
    case("nonzero", "bool", {}, [T(mask, "bool")], [np_nonzero(mask)])
    error("nonzero", "0d", {}, [np.array(1.0)], "inputs[0].shape")
    error("nonzero", "two_inputs", {}, [x, x], "inputs")

    every = {"return_index": True, "return_inverse": True, "return_counts": True}
    case("unique", "2d_every_output", every, [x], py_unique(x, index=True, inverse=True, counts=True))
    case("unique", "2d_out_only", {}, [x], py_unique(x))
    case("unique", "3d_inverse", {"return_inverse": True}, [x3], py_unique(x3, inverse=True))
    case("unique", "3d_index_counts", {"return_index": True, "return_counts": True}, [x3],
         py_unique(x3, index=True, counts=True))
    signed = np.array([1.0, -0.0, 0.0, np.inf, -2.0, 1.0, -np.inf, np.inf])
    case("unique", "signed_zero_and_infinities", every, [signed],
         py_unique(signed, index=True, inverse=True, counts=True))
    case("unique", "0d", every, [np.array(2.5)], py_unique(np.array(2.5), index=True, inverse=True, counts=True))
    case("unique", "empty", every, [np.zeros((0, 3))], py_unique(np.zeros((0, 3)), index=True, inverse=True, counts=True))
    ids = RNG37.integers(0, 4, size=(3, 3))
    case("unique", "int64", every, [T(ids, "int64")], py_unique(ids, "int64", index=True, inverse=True, counts=True))
    mask = RNG37.integers(0, 2, size=(5,))
    case("unique", "bool", every, [T(mask, "bool")], py_unique(mask, "bool", index=True, inverse=True, counts=True))
    f32 = small(7)
    case("unique", "float32", every, [T(f32, "float32")], py_unique(f32, "float32", index=True, inverse=True, counts=True))
    # Along an axis: rows drawn from a few so that they repeat.
    rows = small(3, 5)
    xa = rows[RNG37.integers(0, 3, size=6)]
    case("unique", "axis0_every_output", dict(every, axis=[0]), [xa],
         py_unique_axis(xa, 0, index=True, inverse=True, counts=True))
    case("unique", "axis1_out_only", {"axis": [1]}, [xa.T.copy()], py_unique_axis(xa.T, 1))
    x3a = small(2, 4, 3)[:, RNG37.integers(0, 2, size=4), :]
    case("unique", "3d_axis1_inverse_counts", {"axis": [1], "return_inverse": True, "return_counts": True},
         [x3a], py_unique_axis(x3a, 1, inverse=True, counts=True))
    x3b = small(2, 2, 5)
    case("unique", "3d_axis_minus1", dict(every, axis=[-1]), [x3b],
         py_unique_axis(x3b, 2, index=True, inverse=True, counts=True))
    # numpy's slice order for axis 2 (DECISIONS.md: Paddle's kernel compares these the other way).
    order = np.stack([np.array([[0.0, 1.0], [0.0, 0.0]]), np.array([[0.0, 0.0], [1.0, 0.0]])], axis=2)
    case("unique", "axis2_slice_order", {"axis": [2], "return_inverse": True}, [order],
         py_unique_axis(order, 2, inverse=True))
    # -0 and 0 one value (the first row met kept in out); NaN: kernel_properties_test (a golden
    # output holds no NaN).
    specials = np.array([[np.inf, 1.0], [-0.0, 2.0], [np.inf, 1.0], [0.0, 2.0], [0.0, -np.inf], [0.0, 1.0]])
    case("unique", "axis0_signed_zero_and_infinities", dict(every, axis=[0]), [specials],
         py_unique_axis(specials, 0, index=True, inverse=True, counts=True))
    ida = RNG37.integers(0, 2, size=(4, 2))
    case("unique", "axis0_int64", dict(every, axis=[0]), [T(ida, "int64")],
         py_unique_axis(ida, 0, "int64", index=True, inverse=True, counts=True))
    case("unique", "axis0_empty_slices", dict(every, axis=[0]), [np.zeros((3, 0))],
         py_unique_axis(np.zeros((3, 0)), 0, index=True, inverse=True, counts=True))
    case("unique", "axis1_no_slices", dict(every, axis=[1]), [np.zeros((2, 0))],
         py_unique_axis(np.zeros((2, 0)), 1, index=True, inverse=True, counts=True))
    error("unique", "two_axes", {"axis": [0, 1]}, [x], "attrs.axis")
    error("unique", "axis_out_of_range", {"axis": [2]}, [x], "attrs.axis")
    error("unique", "axis_below_range", {"axis": [-3]}, [x], "attrs.axis")
    error("unique", "axis_on_0d", {"axis": [0]}, [np.array(2.5)], "attrs.axis")
    error("unique", "dtype_int32", {"dtype": "int32"}, [x], "attrs.dtype")
    error("unique", "two_inputs", {}, [x, x], "inputs")


def gen_c_softmax_multi_label():
    op = "c_softmax_with_multi_label_cross_entropy"

    def v(*shape):
        return np.round(RNG36.uniform(-2, 2, size=shape), 2)

    def weights(*shape):
        return np.round(RNG36.uniform(0.1, 1, size=shape), 2)

    def ids(a):
        return T(np.array(a), "int64")

    logits = v(4, 6)
    label = np.array([[0, 5], [3, 2], [1, 1], [4, 0]])  # row 2 names class 1 twice
    w = weights(4, 2)
    case(op, "two_labels_summed", {}, [logits, ids(label), w], list(np_multi_label_ce(logits, label, w)))
    case(op, "two_labels_each", {"sum_multi_label_loss": False}, [logits, ids(label), w],
         list(np_multi_label_ce(logits, label, w, sum_loss=False)))
    case(op, "ignore_index_1", {"ignore_index": 1}, [logits, ids(label), w],
         list(np_multi_label_ce(logits, label, w, ignore_index=1)))
    logits3, label3, w3 = v(2, 3, 5), np.array([[[4, 0, 2], [1, -100, 3], [0, 0, 0]],
                                                [[2, 3, 4], [-100, -100, -100], [1, 4, 2]]]), v(2, 3, 3)
    case(op, "3d_negative_weights", {"ring_id": 1, "rank": 1, "nranks": 2}, [logits3, ids(label3), w3],
         list(np_multi_label_ce(logits3, label3, w3)))
    case(op, "no_labels", {}, [logits, ids(np.zeros((4, 0), np.int64)), np.zeros((4, 0))],
         list(np_multi_label_ce(logits, np.zeros((4, 0), np.int64), np.zeros((4, 0)))))
    big = np.array([[1000.0, 999.0, -1000.0]])
    case(op, "large_logits", {"sum_multi_label_loss": False}, [big, ids([[1, 2]]), np.array([[0.5, 0.25]])],
         list(np_multi_label_ce(big, np.array([[1, 2]]), np.array([[0.5, 0.25]]), sum_loss=False)))
    lab = ids(label)
    error(op, "label_past_classes", {}, [logits, ids([[0, 6], [1, 1], [1, 1], [1, 1]]), w], "inputs[1].data")
    error(op, "label_negative", {}, [logits, ids([[0, -1], [1, 1], [1, 1], [1, 1]]), w], "inputs[1].data")
    error(op, "label_rows", {}, [logits, ids([[0, 1]] * 3), w[:3]], "inputs[1].shape")
    error(op, "label_rank", {}, [logits, ids([0, 1, 2, 3]), w[:, 0]], "inputs[1].shape")
    error(op, "weight_shape", {}, [logits, lab, w[:, :1]], "inputs[2].shape")
    error(op, "logits_0d", {}, [np.array(1.0), ids(0), np.array(1.0)], "inputs[0].shape")
    error(op, "ring_id_negative", {"ring_id": -1}, [logits, lab, w], "attrs.ring_id")
    error(op, "rank_past_nranks", {"rank": 2, "nranks": 2}, [logits, lab, w], "attrs.rank")

    op = "c_softmax_with_multi_label_cross_entropy_grad"
    p = np_softmax(v(4, 6), -1)
    g1, gk = v(4, 1), v(4, 2)
    case(op, "summed", {}, [p, lab, w, g1], [np_multi_label_ce_grad(p, label, w, g1)])
    case(op, "each", {"sum_multi_label_loss": False}, [p, lab, w, gk],
         [np_multi_label_ce_grad(p, label, w, gk, sum_loss=False)])
    case(op, "ignore_index_1", {"ignore_index": 1}, [p, lab, w, g1],
         [np_multi_label_ce_grad(p, label, w, g1, ignore_index=1)])
    piece = p[:, 1:4]
    plabel = np.array([[0, 6], [3, 2], [6, 4], [1, 5]])
    case(op, "localized_piece", {"local": {"vocab_start": 2, "global_shape": [4, 7]}}, [piece, ids(plabel), w, g1],
         [np_multi_label_ce_grad(piece, plabel, w, g1, start=2)])
    error(op, "localized_label_past_global", {"local": {"vocab_start": 2, "global_shape": [4, 7]}},
          [piece, ids([[0, 7], [1, 1], [1, 1], [1, 1]]), w, g1], "inputs[1].data")
    error(op, "label_past_classes", {}, [p, ids([[0, 6], [1, 1], [1, 1], [1, 1]]), w, g1], "inputs[1].data")
    error(op, "loss_grad_shape", {}, [p, lab, w, gk], "inputs[3].shape")
    error(op, "loss_grad_shape_each", {"sum_multi_label_loss": False}, [p, lab, w, g1], "inputs[3].shape")
    error(op, "weight_shape", {}, [p, lab, w[:, :1], g1], "inputs[2].shape")
    error(op, "softmax_0d", {}, [np.array(0.5), ids(0), np.array(1.0), np.array(1.0)], "inputs[0].shape")


def main():
    gen_elementwise()
    gen_contraction()
    gen_reduction()
    gen_norm()
    gen_shape()
    gen_paddle_ops()
    gen_paddle_ops2()
    gen_grads()
    gen_random()  # last: the cases before keep their random values
    gen_conv()  # RNG3
    gen_einsum_broadcast()  # RNG3
    gen_attention()  # RNG3
    gen_c_embedding()  # RNG3
    gen_c_softmax()  # RNG3
    gen_c_embedding_grad()  # RNG3
    gen_norm_grad()  # RNG3, after the cases above
    gen_conv_grad()  # RNG4
    gen_attention_grad()  # RNG5
    gen_block_attention()  # RNG6
    gen_adamw()  # RNG7
    gen_unary_math()  # RNG8
    gen_binary_math()  # RNG9
    gen_unary_math_later()  # RNG10
    gen_math_dtypes()  # RNG11
    gen_extrema()  # RNG12
    gen_depthwise_conv2d()  # RNG13
    gen_label_smooth()  # RNG15
    gen_frobenius_norm()  # RNG16
    gen_take_along_axis()  # RNG17
    gen_put_along_axis()  # RNG18
    gen_put_along_axis_reduce()  # RNG33
    gen_bernoulli()  # RNG22
    gen_poisson()  # RNG30
    gen_strided_slice()  # RNG19
    gen_fused_gemm_epilogue()  # RNG20
    gen_fused_linear_param_grad_add()  # RNG21
    gen_linear_v2()  # RNG27
    gen_group_norm()  # RNG25
    gen_instance_norm()  # RNG26
    gen_conv3d()  # RNG23
    gen_conv2d_transpose()  # RNG24
    gen_layer_norm_optional()  # RNG28
    gen_index_put()  # RNG29
    gen_moe_combine()  # RNG34
    gen_roi_align()  # RNG31
    gen_batch_norm()  # RNG32
    gen_moe_gate_dispatch()  # RNG35
    gen_c_softmax_multi_label()  # RNG36
    gen_selection()  # RNG37
    for name, lines in sorted(FAMILIES.items()):
        path = os.path.join(HERE, name + ".jsonl")
        with open(path, "w") as f:
            for line in lines:
                f.write(json.dumps(line, allow_nan=False) + "\n")
        print(f"{name}.jsonl: {len(lines)} cases")


if __name__ == "__main__":
    main()
