// The vector-Jacobian products filled so far (rules/vjp.h), one builder per op, each a
// composition of registered ops. Declarations attach them with `.Vjp(vjps::Matmul)`;
// checker/vjp_test.cc checks every attached one against finite differences of the float64
// reference, so a new one needs no test code.
#pragma once

#include "rules/op_decl.h"

namespace spmd::vjps {

// Returns `grad` (shape `from`, a broadcast of `to`) summed back to `to`: a sum over the
// broadcast dims (keep_dim) and a reshape dropping the leading ones. Adds no call when
// the shapes are equal.
VjpRef SumToShape(VjpGraph& graph, VjpRef grad, const Shape& from, const Shape& to);

// Elementwise, broadcasting.
VjpGraph Add(const RuleContext& c);
VjpGraph Subtract(const RuleContext& c);
VjpGraph Multiply(const RuleContext& c);
VjpGraph Divide(const RuleContext& c);
// Elementwise unary.
VjpGraph Scale(const RuleContext& c);
VjpGraph Exp(const RuleContext& c);
VjpGraph Log(const RuleContext& c);
VjpGraph Sqrt(const RuleContext& c);
VjpGraph Tanh(const RuleContext& c);
VjpGraph Sigmoid(const RuleContext& c);
VjpGraph Silu(const RuleContext& c);
VjpGraph Pow(const RuleContext& c);    // y x^(y-1) g (zero for y == 0)
VjpGraph Rsqrt(const RuleContext& c);  // -0.5 out^3 g
// Contractions: matmul_grad (bmm is matmul on rank 3).
VjpGraph Matmul(const RuleContext& c);
// Reductions: reshape to the kept-dims shape, expand back (mean also scales by 1/n).
VjpGraph Sum(const RuleContext& c);
VjpGraph Mean(const RuleContext& c);
// cumsum: the prefix sums run the other way.
VjpGraph Cumsum(const RuleContext& c);
// softmax_grad; log_softmax: g - exp(out) sum(g).
VjpGraph Softmax(const RuleContext& c);
VjpGraph LogSoftmax(const RuleContext& c);
// Shape ops.
VjpGraph ReshapeBack(const RuleContext& c);  // reshape, flatten, squeeze, unsqueeze
VjpGraph Transpose(const RuleContext& c);
VjpGraph Expand(const RuleContext& c);       // expand, expand_as (y: no grad, it gives a shape)
VjpGraph Concat(const RuleContext& c);
VjpGraph Split(const RuleContext& c);  // split, split_with_num: concat of the pieces' grads
VjpGraph Unbind(const RuleContext& c);  // stack of the slices' grads
VjpGraph Triu(const RuleContext& c);   // triu is linear: triu of the cotangent
VjpGraph Tril(const RuleContext& c);      // tril of the cotangent
VjpGraph TrilTriu(const RuleContext& c);  // tril_triu of the cotangent, same attrs
VjpGraph AddN(const RuleContext& c);      // the cotangent, once per input
VjpGraph Roll(const RuleContext& c);      // roll of the cotangent by the opposite shifts
VjpGraph Stack(const RuleContext& c);  // unbind of the cotangent
VjpGraph Tile(const RuleContext& c);   // reshape to (repeat, size) pairs, sum the repeats
VjpGraph Slice(const RuleContext& c);  // the cotangent padded with zero blocks (concat)
// Masks: greater_than / less_than, then where(mask, g, 0).
VjpGraph Relu(const RuleContext& c);
VjpGraph Abs(const RuleContext& c);
VjpGraph Maximum(const RuleContext& c);
VjpGraph Minimum(const RuleContext& c);
VjpGraph Clip(const RuleContext& c);
VjpGraph Where(const RuleContext& c);  // the condition has no gradient
// dropout: g times the forward's mask output and the kept scale (nothing is redrawn).
VjpGraph Dropout(const RuleContext& c);
// Reductions.
VjpGraph MeanAll(const RuleContext& c);
VjpGraph SquaredL2Norm(const RuleContext& c);  // 2 x g
VjpGraph Max(const RuleContext& c);            // g where x equals the max (ties share it)
VjpGraph Min(const RuleContext& c);
VjpGraph Prod(const RuleContext& c);           // g times the product of the others (no division)
VjpGraph Logsumexp(const RuleContext& c);      // exp(x - out) g
VjpGraph PNorm(const RuleContext& c);          // sign(x) |x|^(p-1) / max(out, eps)^(p-1) g
// einsum: per operand, the einsum of the cotangent with the other operands.
VjpGraph Einsum(const RuleContext& c);
// layer_norm, rms_norm: through out, their grad ops (layer_norm_grad, rms_norm_grad); the
// statistics outputs' cotangents add their terms to x_grad (reshape, scale, subtract,
// multiply, add).
VjpGraph LayerNorm(const RuleContext& c);
VjpGraph RmsNorm(const RuleContext& c);
// Through Paddle's grad ops where no composition is exact: gelu_grad (erf's derivative);
// embedding_grad (a scatter-add; the ids get no gradient); cross_entropy_with_softmax_grad
// for a hard label (a one-hot; the label gets none) plus softmax_grad for softmax_out's
// cotangent. A soft label's backward is composed (log_softmax, sum, multiply), the label's
// gradient included.
VjpGraph Gelu(const RuleContext& c);
VjpGraph Embedding(const RuleContext& c);
VjpGraph CrossEntropyWithSoftmax(const RuleContext& c);
// conv2d: conv2d_grad(input, filter, g) with the forward's attrs.
VjpGraph Conv2d(const RuleContext& c);
// flash_attention: flash_attn_grad(q, k, v, out, softmax_lse, seed, mask, g_out) with
// dropout 0 and the forward's causal, plus the softmax_lse and softmax cotangents' terms and the
// mask's gradient, composed (softmax_grad, multiply, einsum, sum); the seeds get none.
VjpGraph FlashAttention(const RuleContext& c);
// c_embedding: weight: c_embedding_grad(weight, x, g) with the forward's start_index; the
// ids get none.
VjpGraph CEmbedding(const RuleContext& c);
// c_softmax_with_cross_entropy: c_softmax_with_cross_entropy_grad(softmax, label, g_loss)
// (local on a class piece) + softmax_grad(softmax, g_softmax) along the last dim; the label
// gets none.
VjpGraph CSoftmaxWithCrossEntropy(const RuleContext& c);
// index_select, gather: a scatter-add through embedding_grad, with the selected axis moved
// first and the other dims flattened (x: transpose + reshape to [V, R]; the cotangent to
// [K, R]), then back. The index gets no gradient.
VjpGraph Select(const RuleContext& c);
// pad: the cotangent sliced back to x (linear).
VjpGraph Pad(const RuleContext& c);
// swiglu: x: g y s (1 + x (1 - s)), s = sigmoid(x); y: g silu(x).
VjpGraph Swiglu(const RuleContext& c);
// fused_dropout_add: x as dropout's x (the forward's mask), y gets the cotangent.
VjpGraph FusedDropoutAdd(const RuleContext& c);
// gather_nd: scatter_nd_add of the cotangent into zeros; scatter_nd_add: x gets the
// cotangent, updates gather_nd of it. The index gets none.
VjpGraph GatherNd(const RuleContext& c);
VjpGraph ScatterNdAdd(const RuleContext& c);
// scatter: x gets the cotangent with the named rows zeroed; updates the named rows
// (overwrite: only the last update to a row, found by scattering the positions).
VjpGraph Scatter(const RuleContext& c);
// argsort, topk: out's cotangent put back at the indices (multiply by one_hot(indices) as a
// mask, sum over the picked dim, the class dim moved to the axis).
VjpGraph SortedValues(const RuleContext& c);
// fused_rotary_position_embedding: the same op on the cotangents with sin's head dim
// permuted by the partner and negated; cos: sum of g x, sin: sum of g R(x) over the
// rotated tensors, batch and heads.
VjpGraph FusedRope(const RuleContext& c);

}  // namespace spmd::vjps
