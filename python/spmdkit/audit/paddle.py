"""The Paddle adapter of `spmd audit`: Paddle's phi SPMD rules
(`paddle.base.core.get_phi_spmd_rule`), called in this process (the audit runs it in a
worker process: `spmdkit.audit.worker`).

Per op, the Paddle rule names to try and the positional argument lists they may take, most
specific first: Paddle's rules take their attrs positionally and the set of attrs changed
between versions (gelu's `approximate`, scale's scalars), so the audit keeps, per op, the
first candidate that answers a fully replicated probe case (`core._signature`). An op whose
candidates all fail on the probe is reported as not auditable, not as Paddle errors. The
attrs are spmdkit's, normalised (every declared attr, defaults filled: `cases.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Sequence

from spmdkit import _core
from spmdkit.audit.cases import Request
from spmdkit.audit.core import Answer, FrameworkMissing, NotExpressible


@dataclass
class PaddleOp:
    name: str                                   # spmdkit's op name
    paddle_names: List[str]                     # candidate rule names in Paddle
    # Candidate argument builders: (specs, attrs) -> positional args of infer_forward.
    signatures: List[Callable] = field(default_factory=list)
    # Cases Paddle's call cannot take: (request) -> the reason, or "" (NotExpressible).
    refuses: Callable = lambda req: ""


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


def _flash_attention_args(specs, attrs):
    """Paddle's rule: (q, k, v, fixed_seed_offset, attn_mask, dropout, causal,
    return_softmax, is_test, rng_name); absent optionals as specs of shape []."""
    specs = list(specs)
    while len(specs) < 5:
        specs.append(specs[0].__class__([], _empty_attr(specs[0])))
    return specs + [float(attrs["dropout"]), attrs["causal"], attrs["return_softmax"],
                    attrs["is_test"], attrs["rng_name"]]


_flash_attention_args.attr_names = ("dropout", "causal", "return_softmax", "is_test", "rng_name")


def _cum_extreme_args(specs, attrs):
    """Paddle's cummax / cummin rule: (x, axis, dtype), dtype as Paddle's DataType."""
    from paddle.base.framework import convert_np_dtype_to_dtype_
    return list(specs) + [attrs["axis"], convert_np_dtype_to_dtype_(attrs["dtype"])]


_cum_extreme_args.attr_names = ("axis", "dtype")


def _unique_args(specs, attrs):
    """Paddle's unique rule: (x, return_index, return_inverse, return_counts, axis, dtype),
    dtype as Paddle's DataType. It answers unset outputs (a flag false) with an empty dist
    attr, as spmdkit's 0-d unset ones."""
    from paddle.base.framework import convert_np_dtype_to_dtype_
    return list(specs) + [attrs["return_index"], attrs["return_inverse"], attrs["return_counts"],
                          list(attrs["axis"]), convert_np_dtype_to_dtype_(attrs["dtype"])]


_unique_args.attr_names = ("return_index", "return_inverse", "return_counts", "axis", "dtype")


def _label_smooth_args(specs, attrs):
    """Paddle's rule: (label, prior_dist, epsilon); an absent prior_dist as an empty spec
    (Paddle's own tests pass DistTensorSpec())."""
    specs = list(specs)
    if len(specs) == 1:
        specs.append(specs[0].__class__())
    return specs + [float(attrs["epsilon"])]


_label_smooth_args.attr_names = ("epsilon",)
# Paddle's answer lays out the absent prior_dist too: only spmdkit's inputs are judged.
_label_smooth_args.adapt = lambda n_inputs, ins, outs, attrs: (ins[:n_inputs], outs)
# Paddle lays out all five inputs and a fourth output, seed_offset (its generator state):
# only spmdkit's inputs and its three outputs are judged.


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


def _layer_norm_args(specs, attrs):
    """Paddle's rule: (x, scale, bias, epsilon, begin_norm_axis). Its scale and bias are
    optional; its rule wants them 1-D, and its own tests pass an absent one as a spec of shape
    [0] on no mesh: so is spmdkit's absent (0-d) scale or bias passed."""
    from paddle.distributed.auto_parallel.static.dist_attribute import TensorDistAttr
    specs = list(specs)

    def shape_of(spec):
        return list(spec.shape() if callable(spec.shape) else spec.shape)

    for i in (1, 2):
        if not shape_of(specs[i]):
            specs[i] = specs[i].__class__([0], TensorDistAttr())
    # Paddle 3.3.1's rule fails on a negative begin_norm_axis (ValueError
    # "basic_string::_M_create"); both count it from the end: passed as rank + axis.
    axis = attrs["begin_norm_axis"]
    if axis < 0:
        axis += len(shape_of(specs[0]))
    return specs + [attrs["epsilon"], axis]


def _unset_if_meshless(attr):
    """Paddle lays out an absent layer_norm parameter as `[-1]` on no mesh: judged as
    spmdkit's unset (0-d) layout."""
    from paddle.distributed.auto_parallel.static.dist_attribute import TensorDistAttr
    if attr.process_mesh is not None:
        return attr
    unset = TensorDistAttr()
    unset.dims_mapping = []
    return unset


_layer_norm_args.attr_names = ("epsilon", "begin_norm_axis")
_layer_norm_args.adapt = lambda n_inputs, ins, outs, attrs: ([_unset_if_meshless(a) for a in ins], outs)


def _roi_align_args(specs, attrs):
    """Paddle's rule: (x, boxes, boxes_num, pooled_height, pooled_width, spatial_scale,
    sampling_ratio, aligned). spmdkit's absent (0-d) boxes_num is passed as layer_norm's
    absent parameters are, a spec of shape [0] on no mesh; Paddle lays it out on no mesh,
    judged as spmdkit's unset (0-d) layout."""
    from paddle.distributed.auto_parallel.static.dist_attribute import TensorDistAttr
    specs = list(specs)
    shape = list(specs[2].shape() if callable(specs[2].shape) else specs[2].shape)
    if not shape:
        specs[2] = specs[2].__class__([0], TensorDistAttr())
    return specs + [attrs[n] for n in _roi_align_args.attr_names]


_roi_align_args.attr_names = ("pooled_height", "pooled_width", "spatial_scale", "sampling_ratio", "aligned")
_roi_align_args.adapt = lambda n_inputs, ins, outs, attrs: ([_unset_if_meshless(a) for a in ins], outs)


def _put_along_axis_args(specs, attrs):
    """Paddle's rule: (x, index, value, axis, reduce, include_self). Paddle 3.3.1's rule
    fails on a negative axis (basic_string::replace); both count it from the end: passed
    as rank + axis."""
    rank = len(list(specs[0].shape() if callable(specs[0].shape) else specs[0].shape))
    axis = attrs["axis"]
    return list(specs) + [axis + rank if axis < 0 else axis, attrs["reduce"], attrs["include_self"]]


_put_along_axis_args.attr_names = ("axis", "reduce", "include_self")


def _group_norm_args(specs, attrs):
    """Paddle's rule: (x, scale, bias, epsilon, groups, data_format)."""
    return list(specs) + [float(attrs["epsilon"]), attrs["groups"], attrs["data_format"]]


def _with_groups_dim(attr):
    """Paddle's group_norm rule lays out mean and variance (`[N, groups]`) with one entry,
    the batch's: read as `[batch, -1]` (its rule never shards the groups; no partial)."""
    from paddle.distributed.auto_parallel.static.dist_attribute import TensorDistAttr
    if len(attr.dims_mapping) != 1:
        return attr
    padded = TensorDistAttr()
    padded.process_mesh = attr.process_mesh
    padded.dims_mapping = list(attr.dims_mapping) + [-1]
    return padded


_group_norm_args.attr_names = ("epsilon", "groups", "data_format")
_group_norm_args.adapt = lambda n_inputs, ins, outs, attrs: (
    ins, [outs[0]] + [_with_groups_dim(o) for o in outs[1:]])

def _a(*names):
    """A signature: the specs in order, then the named attrs."""
    def build(specs, attrs):
        return list(specs) + [attrs[n] for n in names]
    build.attr_names = names
    return build


def _batch_norm_args(specs, attrs):
    """Paddle's rule: (x, mean, variance, scale, bias, is_test, momentum, epsilon,
    data_format, use_global_stats, trainable_statistics). It answers a sixth output,
    reserve_space (always `[-1]`), which spmdkit's op has not: dropped."""
    return list(specs) + [attrs["is_test"], float(attrs["momentum"]), float(attrs["epsilon"]),
                          attrs["data_format"], attrs["use_global_stats"], attrs["trainable_statistics"]]


_batch_norm_args.attr_names = ("is_test", "momentum", "epsilon", "data_format", "use_global_stats",
                               "trainable_statistics")
_batch_norm_args.adapt = lambda n_inputs, ins, outs, attrs: (ins, outs[:5])


def _moe_gate_dispatch_args(specs, attrs):
    """Paddle's rule: (x, gate_logits, k, capacity, use_pad); it takes no corr_bias (its
    kernel reads the whole bias). The bias's rank is kept for the adapter below (called
    right after, in the same run_framework)."""
    shape = specs[2].shape() if callable(specs[2].shape) else specs[2].shape
    _moe_gate_dispatch_args.bias_rank = len(list(shape))
    return list(specs[:2]) + [attrs["k"], attrs["capacity"], attrs["use_pad"]]


def _moe_gate_dispatch_adapt(n_inputs, ins, outs, attrs):
    """Paddle lays out x and gate_logits only: corr_bias is judged replicated (its kernel
    reads every expert's bias), or unset (0-d) when absent."""
    from paddle.distributed.auto_parallel.static.dist_attribute import TensorDistAttr
    bias = TensorDistAttr()
    bias.process_mesh = ins[0].process_mesh
    bias.dims_mapping = [-1] * _moe_gate_dispatch_args.bias_rank
    return list(ins[:2]) + [bias], outs


_moe_gate_dispatch_args.attr_names = ("k", "capacity", "use_pad")
_moe_gate_dispatch_args.bias_rank = 0
_moe_gate_dispatch_args.adapt = _moe_gate_dispatch_adapt


def _linear_v2_args(specs, attrs):
    """Paddle's rule: (x, weight, bias, transpose_weight); it answers a second, unset output
    that spmdkit's op has not (transpose_weight true: _linear_v2_refuses)."""
    return list(specs) + [attrs["transpose_weight"]]


_linear_v2_args.attr_names = ("transpose_weight",)
_linear_v2_args.adapt = lambda n_inputs, ins, outs, attrs: (ins, outs[:1])


def _listed(*names):
    """A signature whose tensors form one list argument (concat, stack, einsum)."""
    def build(specs, attrs):
        return [list(specs)] + [attrs[n] for n in names]
    build.attr_names = names
    return build


def _index_put_args(specs, attrs):
    """Paddle's rule: (x, indices, value, accumulate), indices one list argument; spmdkit's
    inputs are one flat list (x, the indices, value). Paddle's answer nests the indices'
    layouts: flattened in order (`_flatten_attrs`)."""
    specs = list(specs)
    return [specs[0], specs[1:-1], specs[-1], attrs["accumulate"]]


_index_put_args.attr_names = ("accumulate",)


def _tril_triu(specs, attrs):
    """Paddle's tril_triu rule: (x, diagonal, lower); triu is lower = false."""
    return list(specs) + [attrs["diagonal"], False]


_tril_triu.attr_names = ("diagonal", "lower=False")

_UNARY = ["relu", "silu", "exp", "log", "tanh", "sigmoid", "sqrt", "abs",
          # the unary math family (rules/engine/unary_math_list.h): Paddle's elementwise-unary rule
          "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
          "lgamma", "digamma",
          "expm1", "log1p", "log2", "log10", "erf", "ceil", "floor", "round", "trunc",
          "sign", "reciprocal", "square", "logsigmoid", "softsign", "softplus", "mish",
          "swish", "relu6", "hardswish", "hardsigmoid", "leaky_relu", "elu", "celu", "selu",
          "hardshrink", "softshrink", "hardtanh", "thresholded_relu", "stanh", "tanh_shrink",
          "logit", "assign", "erfinv", "conj", "fill", "logical_not", "bitwise_not", "bernoulli", "poisson"]
_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "greater_than", "less_than",
           # the binary math family (rules/engine/binary_math_list.h): Paddle's elementwise rule
           "elementwise_pow", "floor_divide", "trunc_divide", "remainder", "fmax", "fmin", "heaviside",
           "equal", "not_equal", "greater_equal", "less_equal", "logical_and", "logical_or",
           "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"]
_REDUCE = ["sum", "mean", "max", "min", "prod", "any", "all", "amax", "amin", "frobenius_norm"]

OPS: List[PaddleOp] = (
    [PaddleOp(n, [n], [_a()]) for n in _UNARY]
    + [PaddleOp("gelu", ["gelu"], [_a("approximate"), _a()]),
       PaddleOp("scale", ["scale"], [_a("scale", "bias", "bias_after_scale"), _a()]),
       PaddleOp("clip", ["clip"], [_a("min", "max"), _a()])]
    + [PaddleOp(n, [n], [_a()]) for n in _BINARY]
    + [PaddleOp("where", ["where"], [_a()]),
       PaddleOp("matmul", ["matmul"], [_a("trans_x", "trans_y")]),
       PaddleOp("bmm", ["bmm"], [_a()]),
       PaddleOp("einsum", ["einsum"], [_listed("equation")])]
    + [PaddleOp(n, [n], [_a("axis", "keep_dim")]) for n in _REDUCE]
    + [PaddleOp("squared_l2_norm", ["squared_l2_norm"], [_a("axis", "keep_dim"), _a()]),
       PaddleOp("mean_all", ["mean_all"], [_a()]),
       PaddleOp("logsumexp", ["logsumexp"], [_a("axis", "keepdim", "reduce_all")]),
       PaddleOp("p_norm", ["p_norm"], [_a("porder", "axis", "epsilon", "keepdim", "asvector")]),
       PaddleOp("argmax", ["argmax"], [_a("axis", "keepdims", "flatten", "dtype"),
                                              _a("axis", "keepdims", "flatten")]),
       PaddleOp("argmin", ["argmin"], [_a("axis", "keepdims", "flatten", "dtype"),
                                        _a("axis", "keepdims", "flatten")]),
       PaddleOp("cumsum", ["cumsum"], [_a("axis", "flatten", "exclusive", "reverse")]),
       PaddleOp("cummax", ["cummax"], [_cum_extreme_args]),
       PaddleOp("cummin", ["cummin"], [_cum_extreme_args]),
       PaddleOp("softmax", ["softmax"], [_a("axis")]),
       PaddleOp("log_softmax", ["log_softmax"], [_a("axis")]),
       PaddleOp("layer_norm", ["layer_norm"], [_layer_norm_args]),
       PaddleOp("rms_norm", ["rms_norm", "fused_rms_norm"], [_a("epsilon", "begin_norm_axis")]),
       PaddleOp("group_norm", ["group_norm"], [_group_norm_args]),
       PaddleOp("instance_norm", ["instance_norm"], [_a("epsilon")]),
       PaddleOp("batch_norm", ["batch_norm"], [_batch_norm_args]),
       PaddleOp("lookup_table_v2", ["lookup_table_v2", "embedding"], [_a("padding_idx", "sparse")]),
       PaddleOp("cross_entropy_with_softmax", ["cross_entropy_with_softmax"],
              [_a("soft_label", "use_softmax", "numeric_stable_mode", "ignore_index", "axis")]),
       PaddleOp("label_smooth", ["label_smooth"], [_label_smooth_args]),
       PaddleOp("reshape", ["reshape"], [_a("shape")]),
       PaddleOp("flatten", ["flatten"], [_a("start_axis", "stop_axis")]),
       PaddleOp("squeeze", ["squeeze"], [_a("axis")]),
       PaddleOp("unsqueeze", ["unsqueeze"], [_a("axis")]),
       PaddleOp("transpose", ["transpose"], [_a("perm")]),
       PaddleOp("split", ["split"], [_a("sections", "axis")]),
       PaddleOp("split_with_num", ["split_with_num"], [_a("num", "axis")]),
       PaddleOp("unbind", ["unbind"], [_a("axis")]),
       PaddleOp("concat", ["concat"], [_listed("axis")]),
       PaddleOp("stack", ["stack"], [_listed("axis")]),
       PaddleOp("slice", ["slice"], [_a("axes", "starts", "ends", "infer_flags", "decrease_axis")]),
       PaddleOp("strided_slice", ["strided_slice"], [_a("axes", "starts", "ends", "strides")]),
       PaddleOp("tile", ["tile"], [_a("repeat_times")]),
       PaddleOp("expand", ["expand"], [_a("shape")]),
       PaddleOp("expand_as", ["expand_as"], [_a("target_shape")]),
       PaddleOp("triu", ["triu", "tril_triu"], [_a("diagonal"), _tril_triu]),
       PaddleOp("argsort", ["argsort"], [_a("axis", "descending", "stable"),
                                                 _a("axis", "descending")]),
       PaddleOp("topk", ["topk"], [_a("k", "axis", "largest", "sorted")]),
       PaddleOp("gather_nd", ["gather_nd"], [_a()]),
       PaddleOp("scatter", ["scatter"], [_a("overwrite")]),
       PaddleOp("scatter_nd_add", ["scatter_nd_add"], [_a()]),
       PaddleOp("fused_rotary_position_embedding", ["fused_rotary_position_embedding"],
              [_fused_rope_args]),
       PaddleOp("fused_dropout_add", ["fused_dropout_add"],
              [_fused_dropout_add_args]),
       PaddleOp("conv2d", ["conv2d"],
              [_a("strides", "paddings", "padding_algorithm", "dilations", "groups", "data_format")]),
       PaddleOp("depthwise_conv2d", ["depthwise_conv2d"],
              [_a("strides", "paddings", "padding_algorithm", "groups", "dilations", "data_format")]),
       PaddleOp("conv3d", ["conv3d"],
              [_a("strides", "paddings", "padding_algorithm", "groups", "dilations", "data_format")]),
       PaddleOp("conv2d_transpose", ["conv2d_transpose"],
              [_a("strides", "paddings", "output_padding", "output_size", "padding_algorithm", "groups",
                  "dilations", "data_format")]),
       PaddleOp("roi_align", ["roi_align"], [_roi_align_args]),
       PaddleOp("flash_attention", ["flash_attention"], [_flash_attention_args]),
       PaddleOp("pow", ["pow"], [_a()]),
       PaddleOp("one_hot", ["one_hot"], [_a("num_classes")]),
       PaddleOp("gather", ["gather"], [_a("axis"), _a()]),
       PaddleOp("take_along_axis", ["take_along_axis"], [_a("axis")]),
       PaddleOp("put_along_axis", ["put_along_axis"], [_put_along_axis_args]),
       PaddleOp("index_put", ["index_put"], [_index_put_args]),
       PaddleOp("moe_combine", ["moe_combine"], [_a()]),
       PaddleOp("moe_gate_dispatch", ["moe_gate_dispatch"], [_moe_gate_dispatch_args]),
       PaddleOp("fused_gemm_epilogue", ["fused_gemm_epilogue"],
                [_a("trans_x", "trans_y"), _a("trans_x", "trans_y", "activation")]),
       PaddleOp("fused_linear_param_grad_add", ["fused_linear_param_grad_add"],
                [_a("multi_precision", "has_bias")]),
       PaddleOp("linear_v2", ["linear_v2"], [_linear_v2_args]),
       PaddleOp("swiglu", ["swiglu"], [_a()]),
       PaddleOp("add_n", ["add_n"], [_listed()]),
       PaddleOp("c_embedding", ["c_embedding"], [_a("start_index", "vocab_size"), _a("start_index")]),
       PaddleOp("c_softmax_with_cross_entropy", ["c_softmax_with_cross_entropy"],
                [_a("ignore_index", "ring_id", "rank", "nranks"), _a("ignore_index", "rank", "nranks")]),
       PaddleOp("c_softmax_with_multi_label_cross_entropy", ["c_softmax_with_multi_label_cross_entropy"],
                [_a("ignore_index", "sum_multi_label_loss", "rank", "nranks")]),
       PaddleOp("nonzero", ["nonzero"], [_a()]),
       PaddleOp("unique", ["unique"], [_unique_args])]
)

def _rope_refuses(req) -> str:
    """Paddle's rule takes q, k, v of one shape, then sin and cos (spmdkit's k, v and the
    tables are optional)."""
    if len(req.shapes) != 5 or not req.shapes[0] == req.shapes[1] == req.shapes[2]:
        return "Paddle's fused_rotary_position_embedding takes q, k, v of one shape, sin, cos"
    return ""


def _scatter_nd_add_refuses(req) -> str:
    """Paddle's rule refuses an index of higher rank than updates: K < rank(x)."""
    x, index = req.shapes[0], req.shapes[1]
    return "" if index and index[-1] < len(x) else "Paddle's scatter_nd_add rule needs K < rank(x)"


def _gather_refuses(req) -> str:
    """Paddle's gather rule reads a 0-d index's dims mapping as one entry: it refuses (or,
    without the axis argument, crashes on) a 0-d index."""
    return "" if len(req.shapes[1]) >= 1 else "Paddle's gather rule cannot take a 0-d index"


def _linear_v2_refuses(req) -> str:
    """Paddle's linear_v2 rule refuses transpose_weight true in SPMD mode."""
    return "Paddle's linear_v2 rule refuses transpose_weight true" if req.attrs.get("transpose_weight") else ""


def _group_norm_refuses(req) -> str:
    """Paddle's group_norm rule takes x of rank 3 to 5 and a 1-D scale and bias (an absent
    one, a spec of shape [], fails its rank check)."""
    x, scale, bias = req.shapes
    return "" if 3 <= len(x) <= 5 and scale and bias else "Paddle's group_norm rule needs x of rank 3-5, scale, bias"


def _instance_norm_refuses(req) -> str:
    """Paddle's instance_norm rule takes x of rank 4 only and a 1-D scale and bias."""
    x, scale, bias = req.shapes
    return "" if len(x) == 4 and scale and bias else "Paddle's instance_norm rule needs x of rank 4, scale, bias"


def _batch_norm_refuses(req) -> str:
    """Paddle's batch_norm rule takes a 1-D scale and bias (an absent one, a spec of shape
    [], fails its rank check)."""
    scale, bias = req.shapes[3:5]
    return "" if scale and bias else "Paddle's batch_norm rule needs scale and bias"


def _index_put_refuses(req) -> str:
    """Paddle's index_put rule takes 1-D index tensors only (InvalidArgument "The ndim of
    indices in index_put should be equal to 1")."""
    indices = req.shapes[1:-1]
    return "" if all(len(s) == 1 for s in indices) else "Paddle's index_put rule takes 1-D indices only"


_REFUSES = {"fused_rotary_position_embedding": _rope_refuses, "scatter_nd_add": _scatter_nd_add_refuses,
            "gather": _gather_refuses, "linear_v2": _linear_v2_refuses, "group_norm": _group_norm_refuses,
            "instance_norm": _instance_norm_refuses, "index_put": _index_put_refuses,
            "batch_norm": _batch_norm_refuses}
for _op in OPS:
    _op.refuses = _REFUSES.get(_op.name, _op.refuses)

TABLE: Dict[str, PaddleOp] = {o.name: o for o in OPS}


def candidates(op: str) -> List[tuple]:
    """(rule name, argument list index) pairs to probe, in order."""
    spec = TABLE.get(op)
    return [(n, i) for n in spec.paddle_names for i in range(len(spec.signatures))] if spec else []


def describe(op: str, name: str, index: int) -> str:
    return f"{name}{tuple(getattr(TABLE[op].signatures[index], 'attr_names', ()))}"


# ----------------------------------------------------------------------------- attrs

# Attrs Paddle's rules take that spmdkit does not declare (they change no layout), at
# Paddle's defaults.
PADDLE_ONLY = {"infer_flags": [], "decrease_axis": []}

# Declared attrs an op's Paddle rule does not take and that change no layout (the random
# ops' probability and seed): any value may be left out of the call.
LAYOUT_FREE = {"fused_dropout_add": {"p", "is_test", "mode", "seed", "fix_seed"},
               "fill": {"value"}, "bernoulli": {"seed"}, "poisson": {"seed"}}


def paddle_attrs(op: str, signature, attrs: dict) -> dict:
    """The attrs as a Paddle argument list reads them: spmdkit's normalised attrs under
    their names and their aliases (keepdim for keep_dim), and PADDLE_ONLY. A declared attr
    the argument list does not pass must be at its default, else the call would ask Paddle
    another question than the case does: NotExpressible (the case is drawn again)."""
    passed = {n.split("=")[0] for n in getattr(signature, "attr_names", ())}
    out = dict(PADDLE_ONLY)
    out.update(attrs)
    for spec in _core.attr_specs(op):
        names = {spec["name"], *spec["aliases"]}
        if spec["name"] in attrs:
            for alias in spec["aliases"]:
                out.setdefault(alias, attrs[spec["name"]])
        if names & passed or spec["name"] in LAYOUT_FREE.get(op, ()):
            continue
        if spec["name"] in attrs and attrs[spec["name"]] != spec["default"]:
            raise NotExpressible(f"{op}: Paddle's arguments {sorted(passed)} leave out "
                                 f"{spec['name']}={attrs[spec['name']]!r}")
    return out


# ----------------------------------------------------------------------------- layouts


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


# ----------------------------------------------------------------------------- the rules


class InProcessRules:
    """An adapter calling the framework's rules in this process. Subclasses give
    `rule(name)` (an object with infer_forward(*specs_and_attrs) -> (input dist attrs,
    output dist attrs)), `spec(mesh, shape, paddle_layout)` and `read(dist_attr)`."""

    framework = "fake"
    version = ""

    def __init__(self):
        self._rules = {}

    def candidates(self, op: str) -> List[tuple]:
        return candidates(op)

    def describe(self, op: str, name: str, index: int) -> str:
        return describe(op, name, index)

    def answer(self, op: str, name: str, index: int, req: Request) -> Answer:
        why = TABLE[op].refuses(req)
        if why:
            raise NotExpressible(why)
        signature = TABLE[op].signatures[index]
        attrs = paddle_attrs(op, signature, req.attrs)
        if name not in self._rules:
            self._rules[name] = self.rule(name)
        return run_framework(self, self._rules[name], signature, req, attrs)


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


def run_framework(rules, rule, signature, req: Request, attrs: dict) -> Answer:
    specs = [rules.spec(req.mesh, s, to_paddle_layout(l)) for s, l in zip(req.shapes, req.layouts)]
    result = rule.infer_forward(*signature(specs, attrs))
    ins, outs = _flatten_attrs(result[0]), _flatten_attrs(result[1])
    adapt = getattr(signature, "adapt", None)  # where the framework's op has other tensors
    if adapt is not None:
        ins, outs = adapt(len(req.shapes), ins, outs, req.attrs)
    return Answer([rules.read(a) for a in ins], [rules.read(a) for a in outs])


# The in-process adapter the worker runs (spmdkit.audit.worker).
Rules = PaddleRules
