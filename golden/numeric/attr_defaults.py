"""Every declared attr of every op with its default, as gen_numeric.py fills the "attrs" of
each case: the declarations' (rules/ops/<family>.cc) written out once more, because the goldens are
computed independently of the C++ code. check_attr_defaults.py fails when they differ from
the declarations (`spmd ops --json`). Kept apart from gen_numeric.py so that the check needs
no numpy."""

REQUIRED = object()
FLOAT_MAX = 1.7976931348623157e308

# Every declared attr of every op with its default (REQUIRED: no default). The Python
# type of the default is the attr kind: bool, int, float, str, list (ints).
_REDUCE = {"axis": [], "keep_dim": False, "reduce_all": False}
DEFAULTS = {
    "relu": {}, "silu": {}, "exp": {}, "log": {}, "tanh": {}, "sigmoid": {}, "sqrt": {},
    "abs": {},
    "gelu": {"approximate": False},
    "scale": {"scale": 1.0, "bias": 0.0, "bias_after_scale": True},
    "clip": {"min": -FLOAT_MAX, "max": FLOAT_MAX},
    "cast": {"dtype": "float64"},
    "add": {}, "subtract": {}, "multiply": {}, "divide": {}, "maximum": {}, "minimum": {},
    "greater_than": {}, "less_than": {}, "where": {},
    "matmul": {"trans_x": False, "trans_y": False},
    "bmm": {},
    "einsum": {"equation": REQUIRED},
    "matmul_grad": {"trans_x": False, "trans_y": False},
    "sum": _REDUCE, "mean": _REDUCE, "max": _REDUCE, "min": _REDUCE, "prod": _REDUCE,
    "any": _REDUCE, "all": _REDUCE,
    "squared_l2_norm": {"axis": [], "keep_dim": False},
    "mean_all": {},
    "logsumexp": {"axis": [], "keepdim": False, "reduce_all": False},
    "p_norm": {"porder": 2.0, "axis": -1, "epsilon": 1e-12, "keepdim": False,
               "asvector": False},
    "argmax": {"axis": -1, "keepdims": False, "flatten": False, "dtype": "int64"},
    "frobenius_norm": _REDUCE,
    "amax": _REDUCE, "amin": _REDUCE,
    "argmin": {"axis": -1, "keepdims": False, "flatten": False, "dtype": "int64"},
    "cummax": {"axis": -1, "dtype": "int64"},
    "cummin": {"axis": -1, "dtype": "int64"},
    "label_smooth": {"epsilon": 0.0},
    "cumsum": {"axis": -1, "flatten": False, "exclusive": False, "reverse": False},
    "softmax": {"axis": -1}, "log_softmax": {"axis": -1}, "softmax_grad": {"axis": -1},
    "layer_norm": {"epsilon": 1e-5, "begin_norm_axis": 1},
    "rms_norm": {"epsilon": 1e-6, "begin_norm_axis": 1},
    "lookup_table_v2": {"padding_idx": -1, "sparse": False},
    "cross_entropy_with_softmax": {"soft_label": False, "use_softmax": True,
                                   "numeric_stable_mode": True, "ignore_index": -100,
                                   "axis": -1},
    "reshape": {"shape": REQUIRED},
    "flatten": {"start_axis": 0, "stop_axis": -1},
    "squeeze": {"axis": []},
    "unsqueeze": {"axis": REQUIRED},
    "transpose": {"perm": REQUIRED},
    "split": {"sections": REQUIRED, "axis": 0},
    "split_with_num": {"num": REQUIRED, "axis": 0},
    "unbind": {"axis": 0},
    "concat": {"axis": 0},
    "stack": {"axis": 0},
    "slice": {"axes": REQUIRED, "starts": REQUIRED, "ends": REQUIRED, "infer_flags": [],
              "decrease_axis": []},
    "tile": {"repeat_times": REQUIRED},
    "expand": {"shape": REQUIRED},
    "expand_as": {"target_shape": []},
    "triu": {"diagonal": 0},
    # Paddle's other registered rules
    "pow": {"y": 1.0}, "rsqrt": {}, "add_n": {},
    "tril": {"diagonal": 0}, "tril_triu": {"diagonal": 0, "lower": False},
    "one_hot": {"num_classes": REQUIRED}, "roll": {"shifts": [], "axis": []},
    "index_select": {"axis": 0}, "gather": {"axis": 0}, "take_along_axis": {"axis": 0},
    "pad": {"paddings": REQUIRED, "pad_value": 0.0}, "swiglu": {},
    # more of Paddle's registered rules
    "argsort": {"axis": -1, "descending": False, "stable": False},
    "topk": {"k": 1, "axis": -1, "largest": True, "sorted": True},
    "gather_nd": {}, "scatter": {"overwrite": True}, "scatter_nd_add": {},
    "fused_rotary_position_embedding": {"use_neox_rotary_style": True, "time_major": False,
                                        "rotary_emb_base": 10000.0},
    "fused_dropout_add": {"p": 0.5, "is_test": False, "mode": "upscale_in_train", "seed": 0,
                          "fix_seed": False},
    "bmm_grad": {},
    "fused_gemm_epilogue": {"trans_x": False, "trans_y": False, "activation": "none"},
    "fused_linear_param_grad_add": {"multi_precision": True, "has_bias": True},
    "conv2d": {"strides": [1, 1], "paddings": [0, 0], "padding_algorithm": "EXPLICIT",
               "dilations": [1, 1], "groups": 1, "data_format": "NCHW"},
    "conv2d_grad": {"strides": [1, 1], "paddings": [0, 0], "padding_algorithm": "EXPLICIT",
                    "dilations": [1, 1], "groups": 1, "data_format": "NCHW"},
    "depthwise_conv2d": {"strides": [1, 1], "paddings": [0, 0], "padding_algorithm": "EXPLICIT",
                    "dilations": [1, 1], "groups": 1, "data_format": "NCHW"},
    "flash_attention": {"dropout": 0.0, "causal": False, "return_softmax": False,
                        "is_test": False, "rng_name": ""},
    "flash_attn_grad": {"dropout": 0.0, "causal": False},
    "block_attention": {"scale": 0.0, "causal": False, "q_starts": [], "k_starts": []},
    "block_attention_grad": {"scale": 0.0, "causal": False, "q_starts": [], "k_starts": []},
    "c_embedding": {"start_index": 0, "vocab_size": -1},
    "c_embedding_grad": {"start_index": 0},
    "c_softmax_with_cross_entropy": {"ignore_index": -100, "ring_id": 0, "rank": 0, "nranks": 0},
    "c_softmax_with_cross_entropy_grad": {"ignore_index": -100, "ring_id": 0, "rank": 0,
                                          "nranks": 0},
    "gelu_grad": {"approximate": False},
    "embedding_grad": {"padding_idx": -1, "sparse": False},
    "cross_entropy_with_softmax_grad": {"soft_label": False, "use_softmax": True,
                                        "numeric_stable_mode": True, "ignore_index": -100,
                                        "axis": -1},
    "dropout": {"p": 0.5, "is_test": False, "mode": "upscale_in_train", "seed": 0,
                "fix_seed": False},
    "layer_norm_grad": {"epsilon": 1e-5, "begin_norm_axis": 1},
    "rms_norm_grad": {"epsilon": 1e-6, "begin_norm_axis": 1},
    "adamw": {"lr": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "weight_decay": 0.01,
              "step": 1},
}

# The unary math family (rules/engine/unary_math_list.h).
UNARY_MATH_DEFAULTS = {
    "sin": {}, "cos": {}, "tan": {}, "asin": {}, "acos": {}, "atan": {}, "sinh": {}, "cosh": {},
    "asinh": {}, "atanh": {}, "expm1": {}, "log1p": {}, "log2": {}, "log10": {}, "erf": {},
    "ceil": {}, "floor": {}, "round": {"decimals": 0}, "trunc": {}, "sign": {}, "reciprocal": {},
    "square": {}, "logsigmoid": {}, "softsign": {}, "softplus": {"beta": 1.0, "threshold": 20.0},
    "mish": {"threshold": 20.0}, "swish": {}, "relu6": {}, "hardswish": {},
    "hardsigmoid": {"slope": 0.2, "offset": 0.5}, "leaky_relu": {"negative_slope": 0.02},
    "elu": {"alpha": 1.0}, "celu": {"alpha": 1.0},
    "selu": {"scale": 1.0507009873554804934193349852946, "alpha": 1.6732632423543772848170429916717},
    "hardshrink": {"threshold": 0.5}, "softshrink": {"threshold": 0.5},
    "hardtanh": {"t_min": 0.0, "t_max": 24.0}, "thresholded_relu": {"threshold": 1.0, "value": 0.0},
    "stanh": {"scale_a": 0.67, "scale_b": 1.7159}, "tanh_shrink": {}, "logit": {"eps": 1e-6},
    "assign": {}, "acosh": {}, "lgamma": {}, "digamma": {},
    "erfinv": {}, "conj": {}, "fill": {"value": 0.0}, "logical_not": {}, "bitwise_not": {},
}
DEFAULTS.update(UNARY_MATH_DEFAULTS)

# The binary math family (rules/engine/binary_math_list.h): no attrs.
BINARY_MATH_DEFAULTS = {op: {} for op in [
    "elementwise_pow", "floor_divide", "remainder", "fmax", "fmin", "heaviside", "equal",
    "not_equal", "greater_equal", "less_equal", "logical_and", "logical_or", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor", "trunc_divide"]}
DEFAULTS.update(BINARY_MATH_DEFAULTS)
