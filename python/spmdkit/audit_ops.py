"""The ops the auditor drives: spmdkit's name, the frameworks' rule names, a case generator
and the positional argument lists a framework's rule may take.

A case is (input shapes, spmdkit attrs). Each op lists candidate Paddle signatures, most
specific first: Paddle's rules take their attrs positionally and the set of attrs changed
between versions (gelu's `approximate`, scale's scalars), so the auditor keeps, per op, the
first candidate that answers a fully replicated probe case (audit.py `_signature`). An op
whose candidates all fail on the probe is reported as not auditable, not as Paddle errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

# Dim sizes drawn for generated shapes: size 1, sizes that divide 2 and 4, and sizes that
# divide no mesh axis above 1 (uneven shards).
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 12]


@dataclass
class Case:
    shapes: List[List[int]]
    attrs: dict
    # Inputs holding integer values (ids, labels, conditions): never generated partial.
    int_inputs: Sequence[int] = ()


@dataclass
class OpSpec:
    name: str                                   # spmdkit's op name
    paddle_names: List[str]                     # candidate rule names in Paddle
    gen: Callable                               # (rng) -> Case
    # Candidate argument builders: (specs, attrs) -> positional args of infer_forward.
    signatures: List[Callable] = field(default_factory=list)


def _shape(rng, lo=1, hi=3):
    return [rng.choice(SIZES) for _ in range(rng.randint(lo, hi))]


def _bcast_partner(rng, shape):
    """A shape broadcasting against `shape`: a suffix of it, some dims set to 1."""
    n = rng.randint(1, len(shape))
    out = list(shape[len(shape) - n:])
    for i in range(n):
        if rng.random() < 0.2:
            out[i] = 1
    return out if rng.random() < 0.5 else list(shape)


def _unary(rng):
    return Case([_shape(rng)], {})


def _binary(rng):
    x = _shape(rng)
    y = _bcast_partner(rng, x)
    return Case([x, y] if rng.random() < 0.7 else [y, x], {})


def _where(rng):
    x = _shape(rng)
    return Case([list(x), _bcast_partner(rng, x), list(x)], {}, int_inputs=(0,))


def _matmul(rng):
    m, k, n = (rng.choice(SIZES) for _ in range(3))
    batch = [rng.choice(SIZES) for _ in range(rng.randint(0, 2))]
    tx, ty = rng.random() < 0.3, rng.random() < 0.3
    x = batch + ([k, m] if tx else [m, k])
    yb = batch[len(batch) - rng.randint(0, len(batch)):] if batch else []
    y = yb + ([n, k] if ty else [k, n])
    return Case([x, y], {"trans_x": tx, "trans_y": ty})


def _bmm(rng):
    b, m, k, n = (rng.choice(SIZES) for _ in range(4))
    return Case([[b, m, k], [b, k, n]], {})


EINSUM_EQUATIONS = ["ij,jk->ik", "bij,bjk->bik", "ij->ji", "ij,ij->ij", "ijk->ik", "ik,jk->ij",
                    "i,j->ij", "bij,jk->bik", "ij->", "...ij,...jk->...ik", "...j,jk->...k"]


def _einsum(rng):
    """An equation of the list; one operand's dim in four is size 1 (broadcasting, as
    numpy and Paddle allow for any letter); `...` stands for 0 to 2 dims per operand,
    right-aligned, some of them 1."""
    eq = rng.choice(EINSUM_EQUATIONS)
    size = {c: rng.choice(SIZES) for c in "bijk"}
    lhs = eq.split("->")[0].split(",")
    batch = [rng.choice(SIZES) for _ in range(rng.randint(0, 2))]
    shapes = []
    for term in lhs:
        shape = []
        for c in term.replace("...", "."):
            if c == ".":
                own = batch[len(batch) - rng.randint(0, len(batch)):] if batch else []
                shape += [1 if rng.random() < 0.25 else s for s in own]
            else:
                shape.append(1 if rng.random() < 0.25 else size[c])
        shapes.append(shape)
    return Case(shapes, {"equation": eq})


def _reduce(rng):
    x = _shape(rng)
    axes = sorted(rng.sample(range(len(x)), rng.randint(1, len(x))))
    return Case([x], {"axis": axes, "keep_dim": rng.random() < 0.3})


def _logsumexp(rng):
    x = _shape(rng)
    axes = sorted(rng.sample(range(len(x)), rng.randint(1, len(x))))
    return Case([x], {"axis": axes, "keepdim": rng.random() < 0.3, "reduce_all": False})


def _p_norm(rng):
    x = _shape(rng)
    return Case([x], {"porder": rng.choice([1.0, 2.0, 3.0]), "axis": rng.randrange(len(x)),
                      "epsilon": 1e-12, "keepdim": rng.random() < 0.3, "asvector": False})


def _argmax(rng):
    x = _shape(rng)
    return Case([x], {"axis": rng.randrange(len(x)), "keepdims": rng.random() < 0.3,
                      "flatten": False, "dtype": "int64"})


def _cumsum(rng):
    x = _shape(rng)
    return Case([x], {"axis": rng.randrange(len(x)), "flatten": False,
                      "exclusive": rng.random() < 0.3, "reverse": rng.random() < 0.3})


def _softmax(rng):
    x = _shape(rng)
    return Case([x], {"axis": rng.randrange(-len(x), len(x))})


def _layer_norm(rng):
    x = _shape(rng, 2, 3)
    begin = rng.randint(1, len(x) - 1)
    normed = 1
    for d in x[begin:]:
        normed *= d
    return Case([x, [normed], [normed]], {"epsilon": 1e-5, "begin_norm_axis": begin})


def _rms_norm(rng):
    x = _shape(rng, 2, 3)
    return Case([x, [x[-1]]], {"epsilon": 1e-6, "begin_norm_axis": len(x) - 1})


def _embedding(rng):
    ids = _shape(rng, 1, 2)
    return Case([ids, [rng.choice(SIZES), rng.choice(SIZES)]], {"padding_idx": -1, "sparse": False},
                int_inputs=(0,))


def _cross_entropy(rng):
    x = _shape(rng, 2, 3)
    label = list(x[:-1]) + [1]
    return Case([x, label], {"soft_label": False, "use_softmax": True, "numeric_stable_mode": True,
                             "ignore_index": -100, "axis": -1}, int_inputs=(1,))


def _reshape(rng):
    x = _shape(rng)
    total = 1
    for d in x:
        total *= d
    # Factor the element count into 1 to 3 dims.
    out, rest = [], total
    for _ in range(rng.randint(0, 2)):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = rng.choice(divisors)
        out.append(d)
        rest //= d
    out.append(rest)
    rng.shuffle(out)
    return Case([x], {"shape": out})


def _flatten(rng):
    x = _shape(rng, 1, 3)
    a = rng.randrange(len(x))
    b = rng.randrange(a, len(x))
    return Case([x], {"start_axis": a, "stop_axis": b})


def _squeeze(rng):
    x = _shape(rng)
    ones = [i for i, d in enumerate(x) if d == 1]
    return Case([x], {"axis": sorted(rng.sample(ones, rng.randint(0, len(ones)))) if ones else []})


def _unsqueeze(rng):
    x = _shape(rng)
    return Case([x], {"axis": [rng.randint(0, len(x))]})


def _transpose(rng):
    x = _shape(rng)
    perm = list(range(len(x)))
    rng.shuffle(perm)
    return Case([x], {"perm": perm})


def _split(rng):
    x = _shape(rng)
    axis = rng.randrange(len(x))
    size = x[axis]
    cuts = sorted(rng.sample(range(1, size), rng.randint(0, min(2, size - 1)))) if size > 1 else []
    sections = [b - a for a, b in zip([0] + cuts, cuts + [size])]
    return Case([x], {"sections": sections, "axis": axis})


def _split_with_num(rng):
    x = _shape(rng)
    axis = rng.randrange(len(x))
    num = rng.choice([d for d in range(1, x[axis] + 1) if x[axis] % d == 0])
    return Case([x], {"num": num, "axis": axis})


def _unbind(rng):
    x = _shape(rng, 2, 3)
    axis = rng.randrange(len(x))
    x[axis] = min(x[axis], 4)
    return Case([x], {"axis": axis})


def _concat(rng):
    x = _shape(rng)
    axis = rng.randrange(len(x))
    shapes = []
    for _ in range(rng.randint(1, 3)):
        s = list(x)
        s[axis] = rng.choice(SIZES)
        shapes.append(s)
    return Case(shapes, {"axis": axis})


def _stack(rng):
    x = _shape(rng)
    return Case([list(x) for _ in range(rng.randint(1, 3))], {"axis": rng.randint(0, len(x))})


def _slice(rng):
    x = _shape(rng)
    axes = sorted(rng.sample(range(len(x)), rng.randint(1, len(x))))
    starts, ends = [], []
    for a in axes:
        s = rng.randrange(x[a])
        starts.append(s)
        ends.append(rng.randint(s + 1, x[a]))
    return Case([x], {"axes": axes, "starts": starts, "ends": ends, "infer_flags": [],
                      "decrease_axis": []})


def _tile(rng):
    x = _shape(rng)
    return Case([x], {"repeat_times": [rng.choice([1, 1, 2, 3]) for _ in range(rng.randint(1, len(x) + 1))]})


def _expand(rng):
    x = _shape(rng)
    x = [d if rng.random() < 0.6 else 1 for d in x]
    target = [rng.choice(SIZES) if d == 1 else d for d in x]
    target = [rng.choice(SIZES) for _ in range(rng.randint(0, 1))] + target
    return Case([x], {"shape": target})


def _expand_as(rng):
    c = _expand(rng)
    return Case([c.shapes[0], c.attrs["shape"]], {"target_shape": c.attrs["shape"]})


def _triu(rng):
    return Case([_shape(rng, 2, 3)], {"diagonal": rng.randint(-2, 2)})


def _scale(rng):
    return Case([_shape(rng)], {"scale": rng.choice([0.5, 2.0]), "bias": rng.choice([0.0, 0.0, 1.0]),
                                "bias_after_scale": rng.random() < 0.5})


def _clip(rng):
    return Case([_shape(rng)], {"min": -0.5, "max": 0.5})


def _gelu(rng):
    return Case([_shape(rng)], {"approximate": rng.random() < 0.5})


def _argsort(rng):
    x = _shape(rng)
    return Case([x], {"axis": rng.randrange(-len(x), len(x)), "descending": rng.random() < 0.5,
                      "stable": rng.random() < 0.3})


def _topk(rng):
    x = _shape(rng)
    axis = rng.randrange(len(x))
    return Case([x], {"k": rng.randint(1, x[axis]), "axis": axis, "largest": rng.random() < 0.7,
                      "sorted": True})


def _gather_nd(rng):
    x = _shape(rng)
    depth = rng.randint(1, len(x))
    batch = [rng.choice(SIZES) for _ in range(rng.randint(1, 2))]
    return Case([x, batch + [depth]], {}, int_inputs=(1,))


def _scatter(rng):
    x = _shape(rng)
    n = rng.choice(SIZES)
    return Case([x, [n], [n] + x[1:]], {"overwrite": rng.random() < 0.5}, int_inputs=(1,))


def _scatter_nd_add(rng):
    """depth < rank(x): Paddle's rule refuses an index of higher rank than updates."""
    x = _shape(rng, 2, 3)
    depth = rng.randint(1, len(x) - 1)
    batch = [rng.choice(SIZES) for _ in range(rng.randint(1, 2))]
    return Case([x, batch + [depth], batch + x[depth:]], {}, int_inputs=(1,))


def _fused_rope(rng):
    """q, k, v of one shape (Paddle requires it) and sin, cos [s, d] or [1, s, 1, d]."""
    b, s, h = (rng.choice(SIZES) for _ in range(3))
    d = rng.choice([2, 4, 6, 8, 12])
    time_major = rng.random() < 0.3
    qkv = [s, b, h, d] if time_major else [b, s, h, d]
    table = [s, d] if rng.random() < 0.5 else [1, s, 1, d]
    return Case([list(qkv), list(qkv), list(qkv), list(table), list(table)],
                {"use_neox_rotary_style": rng.random() < 0.5, "time_major": time_major,
                 "rotary_emb_base": 10000.0})


def _fused_dropout_add(rng):
    x = _shape(rng)
    return Case([x, list(x)], {"p": rng.choice([0.1, 0.5]), "is_test": False,
                               "mode": "upscale_in_train", "seed": rng.randint(0, 99),
                               "fix_seed": True})


def _fused_rope_args(specs, attrs):
    """Paddle's rule: (q, k, v, sin, cos, position_ids, use_neox_rotary_style, time_major,
    rotary_emb_base); position_ids absent (a spec of shape [])."""
    return list(specs) + [specs[0].__class__([], _empty_attr(specs[0]))] + [
        attrs["use_neox_rotary_style"], attrs["time_major"], float(attrs["rotary_emb_base"])]


def _empty_attr(spec):
    from paddle.distributed.auto_parallel.static.dist_attribute import TensorDistAttr
    attr = TensorDistAttr()
    attr.process_mesh = spec.process_mesh()
    attr.dims_mapping = []
    return attr


_fused_rope_args.attr_names = ("use_neox_rotary_style", "time_major", "rotary_emb_base")
# Paddle's answer lays out position_ids too: only spmdkit's five inputs are judged.
_fused_rope_args.adapt = lambda n_inputs, ins, outs, attrs: (ins[:n_inputs], outs)


def _fused_dropout_add_args(specs, attrs):
    """Paddle's rule takes x and y; both answer (out, seed_offset), seed_offset `[-1]`."""
    return list(specs)


_fused_dropout_add_args.attr_names = ()


def _conv2d(rng):
    """NCHW or NHWC, groups 1 or 2, small filters that fit the (padded) input."""
    n, o = rng.choice(SIZES), rng.choice([1, 2, 4, 6])
    groups = 2 if rng.random() < 0.3 else 1
    cg = rng.choice([1, 2, 3])
    kh, kw = rng.randint(1, 3), rng.randint(1, 3)
    h, w = rng.randint(kh, kh + 4), rng.randint(kw, kw + 4)
    nhwc = rng.random() < 0.3
    c = cg * groups
    o *= groups
    x = [n, h, w, c] if nhwc else [n, c, h, w]
    pads = [rng.randint(0, 1) for _ in range(rng.choice([2, 4]))]
    return Case([x, [o, cg, kh, kw]],
                {"strides": [rng.randint(1, 2), rng.randint(1, 2)], "paddings": pads,
                 "padding_algorithm": rng.choice(["EXPLICIT", "EXPLICIT", "SAME", "VALID"]),
                 "dilations": [1, 1], "groups": groups,
                 "data_format": "NHWC" if nhwc else "NCHW"})


def _flash_attention(rng):
    """q [b, s, h, d], k and v [b, sk, hk, d], sk >= s; sometimes grouped heads and a mask
    [b, 1, s, sk] (then a 0-d fixed_seed_offset: Paddle's absent optional)."""
    b, s, h = (rng.choice(SIZES) for _ in range(3))
    d = rng.choice([2, 4, 8])
    sk = s + rng.randint(0, 2)
    hk = h if rng.random() < 0.7 or h % 2 else h // 2
    shapes = [[b, s, h, d], [b, sk, hk, d], [b, sk, hk, d]]
    if rng.random() < 0.3:
        shapes += [[], [b, 1, s, sk]]
    return Case(shapes, {"dropout": 0.0, "causal": rng.random() < 0.5,
                         "return_softmax": rng.random() < 0.5, "is_test": False, "rng_name": ""})


def _flash_attention_args(specs, attrs):
    """Paddle's rule: (q, k, v, fixed_seed_offset, attn_mask, dropout, causal,
    return_softmax, is_test, rng_name); absent optionals as specs of shape []."""
    specs = list(specs)
    while len(specs) < 5:
        specs.append(specs[0].__class__([], _empty_attr(specs[0])))
    return specs + [float(attrs["dropout"]), attrs["causal"], attrs["return_softmax"],
                    attrs["is_test"], attrs["rng_name"]]


_flash_attention_args.attr_names = ("dropout", "causal", "return_softmax", "is_test", "rng_name")


def _unset_like(attr):
    """A 0-d layout on `attr`'s mesh: spmdkit's unset softmax."""
    from paddle.distributed.auto_parallel.static.dist_attribute import TensorDistAttr
    unset = TensorDistAttr()
    unset.process_mesh = attr.process_mesh
    unset.dims_mapping = []
    return unset


def _flash_attention_adapt(n_inputs, ins, outs, attrs):
    """Paddle lays out all five inputs (spmdkit's given ones are judged) and the same four
    outputs; without return_softmax Paddle still lays out softmax `[b, h, s, t]`, which
    spmdkit leaves unset (0-d): judged as unset."""
    outs = list(outs)
    if not attrs.get("return_softmax", False):
        outs[1] = _unset_like(outs[1])
    return ins[:n_inputs], outs


_flash_attention_args.adapt = _flash_attention_adapt


def _a(*names):
    """A signature: the specs in order, then the named attrs."""
    def build(specs, attrs):
        return list(specs) + [attrs[n] for n in names]
    build.attr_names = names
    return build


def _listed(*names):
    """A signature whose tensors form one list argument (concat, stack, einsum)."""
    def build(specs, attrs):
        return [list(specs)] + [attrs[n] for n in names]
    build.attr_names = names
    return build


def _tril_triu(specs, attrs):
    """Paddle's tril_triu rule: (x, diagonal, lower); triu is lower = false."""
    return list(specs) + [attrs["diagonal"], False]


_tril_triu.attr_names = ("diagonal", "lower=False")

_UNARY = ["relu", "silu", "exp", "log", "tanh", "sigmoid", "sqrt", "abs",
          # the unary math family (rules/unary_math_list.h): Paddle's elementwise-unary rule
          "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "atanh",
          "expm1", "log1p", "log2", "log10", "erf", "ceil", "floor", "round", "trunc",
          "sign", "reciprocal", "square", "logsigmoid", "softsign", "softplus", "mish",
          "swish", "relu6", "hardswish", "hardsigmoid", "leaky_relu", "elu", "celu", "selu",
          "hardshrink", "softshrink", "hardtanh", "thresholded_relu", "stanh", "tanh_shrink",
          "logit", "assign"]
_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "greater_than", "less_than"]
_REDUCE = ["sum", "mean", "max", "min", "prod", "any", "all"]

SPECS: List[OpSpec] = (
    [OpSpec(n, [n], _unary, [_a()]) for n in _UNARY]
    + [OpSpec("gelu", ["gelu"], _gelu, [_a("approximate"), _a()]),
       OpSpec("scale", ["scale"], _scale, [_a("scale", "bias", "bias_after_scale"), _a()]),
       OpSpec("clip", ["clip"], _clip, [_a("min", "max"), _a()])]
    + [OpSpec(n, [n], _binary, [_a()]) for n in _BINARY]
    + [OpSpec("where", ["where"], _where, [_a()]),
       OpSpec("matmul", ["matmul"], _matmul, [_a("trans_x", "trans_y")]),
       OpSpec("bmm", ["bmm"], _bmm, [_a()]),
       OpSpec("einsum", ["einsum"], _einsum, [_listed("equation")])]
    + [OpSpec(n, [n], _reduce, [_a("axis", "keep_dim")]) for n in _REDUCE]
    + [OpSpec("squared_l2_norm", ["squared_l2_norm"], _reduce, [_a("axis", "keep_dim"), _a()]),
       OpSpec("mean_all", ["mean_all"], _unary, [_a()]),
       OpSpec("logsumexp", ["logsumexp"], _logsumexp, [_a("axis", "keepdim", "reduce_all")]),
       OpSpec("p_norm", ["p_norm"], _p_norm, [_a("porder", "axis", "epsilon", "keepdim", "asvector")]),
       OpSpec("argmax", ["argmax"], _argmax, [_a("axis", "keepdims", "flatten", "dtype"),
                                              _a("axis", "keepdims", "flatten")]),
       OpSpec("cumsum", ["cumsum"], _cumsum, [_a("axis", "flatten", "exclusive", "reverse")]),
       OpSpec("softmax", ["softmax"], _softmax, [_a("axis")]),
       OpSpec("log_softmax", ["log_softmax"], _softmax, [_a("axis")]),
       OpSpec("layer_norm", ["layer_norm"], _layer_norm, [_a("epsilon", "begin_norm_axis")]),
       OpSpec("rms_norm", ["rms_norm", "fused_rms_norm"], _rms_norm, [_a("epsilon", "begin_norm_axis")]),
       OpSpec("lookup_table_v2", ["lookup_table_v2", "embedding"], _embedding, [_a("padding_idx", "sparse")]),
       OpSpec("cross_entropy_with_softmax", ["cross_entropy_with_softmax"], _cross_entropy,
              [_a("soft_label", "use_softmax", "numeric_stable_mode", "ignore_index", "axis")]),
       OpSpec("reshape", ["reshape"], _reshape, [_a("shape")]),
       OpSpec("flatten", ["flatten"], _flatten, [_a("start_axis", "stop_axis")]),
       OpSpec("squeeze", ["squeeze"], _squeeze, [_a("axis")]),
       OpSpec("unsqueeze", ["unsqueeze"], _unsqueeze, [_a("axis")]),
       OpSpec("transpose", ["transpose"], _transpose, [_a("perm")]),
       OpSpec("split", ["split"], _split, [_a("sections", "axis")]),
       OpSpec("split_with_num", ["split_with_num"], _split_with_num, [_a("num", "axis")]),
       OpSpec("unbind", ["unbind"], _unbind, [_a("axis")]),
       OpSpec("concat", ["concat"], _concat, [_listed("axis")]),
       OpSpec("stack", ["stack"], _stack, [_listed("axis")]),
       OpSpec("slice", ["slice"], _slice, [_a("axes", "starts", "ends", "infer_flags", "decrease_axis")]),
       OpSpec("tile", ["tile"], _tile, [_a("repeat_times")]),
       OpSpec("expand", ["expand"], _expand, [_a("shape")]),
       OpSpec("expand_as", ["expand_as"], _expand_as, [_a("target_shape")]),
       OpSpec("triu", ["triu", "tril_triu"], _triu, [_a("diagonal"), _tril_triu]),
       OpSpec("argsort", ["argsort"], _argsort, [_a("axis", "descending", "stable"),
                                                 _a("axis", "descending")]),
       OpSpec("topk", ["topk"], _topk, [_a("k", "axis", "largest", "sorted")]),
       OpSpec("gather_nd", ["gather_nd"], _gather_nd, [_a()]),
       OpSpec("scatter", ["scatter"], _scatter, [_a("overwrite")]),
       OpSpec("scatter_nd_add", ["scatter_nd_add"], _scatter_nd_add, [_a()]),
       OpSpec("fused_rotary_position_embedding", ["fused_rotary_position_embedding"], _fused_rope,
              [_fused_rope_args]),
       OpSpec("fused_dropout_add", ["fused_dropout_add"], _fused_dropout_add,
              [_fused_dropout_add_args]),
       OpSpec("conv2d", ["conv2d"], _conv2d,
              [_a("strides", "paddings", "padding_algorithm", "dilations", "groups", "data_format")]),
       OpSpec("flash_attention", ["flash_attention"], _flash_attention, [_flash_attention_args])]
)

BY_NAME = {s.name: s for s in SPECS}


def spec_for(name: str) -> Optional[OpSpec]:
    return BY_NAME.get(name)
