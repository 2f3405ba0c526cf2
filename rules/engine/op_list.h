// The registry is this explicit list: every op spmdkit has, by Paddle name.
//
// Each entry has one rule declaration (rules/ops/<family>.cc) and one float64 reference
// (reference/ops_*.cc). The reference table is generated from this list, so an op
// without a reference does not link. docs/OPS.md describes each op.
#pragma once

#include "rules/engine/binary_math_list.h"
#include "rules/engine/unary_math_list.h"

#define SPMD_FOR_EACH_OP(X) \
  /* elementwise unary */   \
  X(relu)                   \
  X(gelu)                   \
  X(silu)                   \
  X(exp)                    \
  X(log)                    \
  X(tanh)                   \
  X(sigmoid)                \
  X(sqrt)                   \
  X(abs)                    \
  X(scale)                  \
  X(clip)                   \
  X(cast)                   \
  /* elementwise binary */  \
  X(add)                    \
  X(subtract)               \
  X(multiply)               \
  X(divide)                 \
  X(maximum)                \
  X(minimum)                \
  X(greater_than)           \
  X(less_than)              \
  X(where)                  \
  /* contractions */        \
  X(matmul)                 \
  X(bmm)                    \
  X(einsum)                 \
  X(matmul_grad)            \
  /* reductions */          \
  X(sum)                    \
  X(mean)                   \
  X(max)                    \
  X(min)                    \
  X(prod)                   \
  X(any)                    \
  X(all)                    \
  X(squared_l2_norm)        \
  X(mean_all)               \
  X(logsumexp)              \
  X(p_norm)                 \
  X(frobenius_norm)         \
  X(argmax)                 \
  X(cumsum)                 \
  /* extrema (rules/ops/extrema.cc) */ \
  X(amax)                   \
  X(amin)                   \
  X(argmin)                 \
  X(cummax)                 \
  X(cummin)                 \
  /* softmax (rules/ops/softmax.cc) */ \
  X(softmax)                \
  X(log_softmax)            \
  X(softmax_grad)           \
  /* normalisation (rules/ops/norm.cc) */ \
  X(layer_norm)             \
  X(rms_norm)               \
  X(group_norm)             \
  X(instance_norm)          \
  X(batch_norm)             \
  /* embedding (rules/ops/embedding.cc) */ \
  X(lookup_table_v2)        \
  /* loss (rules/ops/loss.cc) */ \
  X(cross_entropy_with_softmax) \
  X(label_smooth)           \
  /* shape ops */           \
  X(reshape)                \
  X(flatten)                \
  X(squeeze)                \
  X(unsqueeze)              \
  X(transpose)              \
  X(split)                  \
  X(split_with_num)         \
  X(unbind)                 \
  X(concat)                 \
  X(stack)                  \
  X(slice)                  \
  X(strided_slice)          \
  X(tile)                   \
  X(expand)                 \
  X(expand_as)              \
  /* added after the first set */ \
  X(triu)                   \
  /* random ops */          \
  X(dropout)                \
  X(bernoulli)              \
  X(poisson)                \
  /* backward ops (Paddle's grad kernels, where no composition is exact) */ \
  X(gelu_grad)              \
  X(embedding_grad)         \
  X(cross_entropy_with_softmax_grad) \
  /* Paddle's other registered rules */ \
  X(pow)                    \
  X(rsqrt)                  \
  X(add_n)                  \
  X(tril)                   \
  X(tril_triu)              \
  X(one_hot)                \
  X(roll)                   \
  X(index_select)           \
  X(gather)                 \
  X(take_along_axis)        \
  X(put_along_axis)         \
  X(index_put)              \
  X(moe_combine)            \
  X(moe_gate_dispatch)      \
  X(pad)                    \
  X(swiglu)                 \
  /* more of Paddle's registered rules */ \
  X(argsort)                \
  X(topk)                   \
  X(gather_nd)              \
  X(scatter)                \
  X(scatter_nd_add)         \
  X(fused_rotary_position_embedding) \
  X(fused_dropout_add)      \
  X(bmm_grad)               \
  X(fused_gemm_epilogue)    \
  X(fused_linear_param_grad_add) \
  X(linear_v2)                  \
  /* convolution, attention, vocabulary-parallel ops (embedding: rules/ops/embedding.cc; */ \
  /* the cross entropies: rules/ops/loss.cc) */ \
  X(conv2d)                 \
  X(conv2d_grad)            \
  X(depthwise_conv2d)       \
  X(conv3d)                 \
  X(conv3d_grad)            \
  X(conv2d_transpose)       \
  X(roi_align)              \
  X(roi_align_grad)         \
  X(flash_attention)        \
  X(flash_attn_grad)        \
  X(c_embedding)            \
  X(c_embedding_grad)       \
  X(c_softmax_with_cross_entropy) \
  X(c_softmax_with_cross_entropy_grad) \
  X(c_softmax_with_multi_label_cross_entropy) \
  X(c_softmax_with_multi_label_cross_entropy_grad) \
  /* normalisation backward (rules/ops/norm.cc) */ \
  X(layer_norm_grad)        \
  X(rms_norm_grad)          \
  /* ring attention's block steps */ \
  X(block_attention)        \
  X(block_attention_grad)   \
  /* optimizer steps */     \
  X(adamw)                  \
  /* outputs sized by values (rules/ops/selection.cc) */ \
  X(nonzero)                \
  X(unique)                 \
  /* the unary math family (rules/engine/unary_math_list.h) */ \
  SPMD_FOR_EACH_UNARY_MATH_OP(X) \
  /* the binary math family (rules/engine/binary_math_list.h) */ \
  SPMD_FOR_EACH_BINARY_MATH_OP(X)
