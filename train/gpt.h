// A small GPT built from registered ops, laid out by a Layout (train/layout.h).
//
//   x = dropout(embedding[tokens] + positions)              [B, S, D]
//   each block: x = x + dropout(attention(norm(x)))         causal, H heads; norm:
//               x = x + dropout(mlp(norm(x)))               LayerNorm or RMSNorm;
//                                                           MLP: GELU or SwiGLU
//   logits = norm(x) @ head                                 [B, S, V]
//   loss = mean over B, S of cross_entropy(logits, labels)
// Every op is a Dispatch through autograd (train/autograd.h), so each has a proven
// sharding rule and a declared backward. The model asks the layout where every parameter
// and boundary activation lives and never branches on the strategy.
//
// Initialisation: every parameter's global value is a function of (seed, parameter name,
// element index) only (counter-based: splitmix64), so every layout starts from the same
// model. Weights are uniform with standard deviation 0.02 (the output projections
// 0.02 / sqrt(2 * layers), GPT-2's scheme), biases 0, norms' scales 1.
//
// Dropout (config.dropout > 0), where GPT-2 puts its residual dropout: on the embedding
// sum and on each row-parallel layer's output before the residual add. Each site draws
// the op's counter-based mask (rules/ops/counter_rng.h) at global element indices, with a
// seed hashed from (config.seed, step, micro-batch, site): every step and site drops
// other elements, and every layout drops the same ones as one device.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/exec/dist_tensor.h"
#include "train/autograd.h"
#include "train/layout.h"

namespace spmd::train {

// How a block's attention is computed. kDefault: from registered ops (matmul, softmax),
// sharded by the rules like every other op. kUlysses / kRing / kRingZigzag:
// SequenceAttention (train/sequence_attention.h) over the layout's "sp" axis, the
// strategy's own communication (all-to-alls / a ring of k/v blocks), on any device; on a
// layout without an sp axis they compute the default. kRingZigzag runs the model on the sequence in
// zigzag order (Loss permutes the tokens, the labels and the positions it adds; the mean
// loss does not depend on the order): the sequence must be a multiple of 2 x sp, and
// dropout is refused (its masks follow element indices, which the order changes).
enum class AttentionKind { kDefault, kUlysses, kRing, kRingZigzag };

struct GptConfig {
  int64_t layers = 2;
  int64_t width = 16;     // D
  int64_t heads = 2;      // H; D must be a multiple
  int64_t vocab = 32;     // V
  int64_t sequence = 8;   // S, the longest sequence
  int64_t mlp_ratio = 4;  // hidden = mlp_ratio * D
  bool swiglu = false;    // SwiGLU MLP (silu(x W1) * (x W3)) W2 instead of GELU
  bool rms_norm = false;  // RMSNorm (a scale, no bias) instead of LayerNorm, as in LLaMA
  uint64_t seed = 1;
  double dropout = 0;     // the residual dropout probability, in [0, 1); 0: no dropout op
  DType dtype = DType::kFloat64;  // float64 or float32: the parameters (masters) and the loss
  // The forward and backward's dtype (train/precision.h): every use of a parameter is a
  // cast copy of it, activations are in this dtype, the logits are cast back to `dtype`
  // for the cross-entropy. nullopt: `dtype` (no casts). bfloat16 or float16 need a float32
  // `dtype`.
  std::optional<DType> compute_dtype;
  AttentionKind attention = AttentionKind::kDefault;
};

// The part of the model a Gpt holds: blocks [first_layer, end_layer) (end_layer -1: to
// the last), with the embedding (and positions) and with the final norm and LM head. The
// whole model by default; a pipeline stage (train/pipeline.h) holds a part. A part's
// parameters have the whole model's names and values.
struct GptPart {
  int64_t first_layer = 0;
  int64_t end_layer = -1;
  bool embedding = true;
  bool head = true;
};

struct NamedParam {
  std::string name;
  ParamRole role;
  Variable value;
};

class Gpt {
 public:
  // Builds the parameters on every rank of the layout's mesh. Throws InvalidArgument
  // naming the config field ("config.width" ...) for a non-positive size, a width not a
  // multiple of heads, a dropout outside [0, 1) ("config.dropout"; also any dropout with
  // kRingZigzag on an sp layout), a dtype that is not float32/float64, or a compute dtype
  // that is neither `dtype` nor bfloat16/float16 over a float32 `dtype`
  // ("config.compute_dtype").
  // With a part, only its parameters (InvalidArgument "part" for a layer range outside
  // [0, layers]).
  Gpt(const GptConfig& config, Layout layout, runtime::Communicator& comm, GptPart part = {});

  // The mean cross-entropy of next-token prediction: `tokens` and `labels` are int64
  // [B, S'] with S' <= S, laid out as layout().Tokens(2) (kRingZigzag on an sp layout:
  // S' a multiple of 2 x sp, InvalidArgument "tokens" otherwise). A recorded forward: call
  // Backward on the result. `step` and `micro_batch` only choose the dropout masks.
  Variable Loss(const runtime::DistTensor& tokens, const runtime::DistTensor& labels,
                runtime::Communicator& comm, int64_t step = 0, int64_t micro_batch = 0);

  // The pieces of Loss, for a part (InvalidArgument "part" when it lacks the piece):
  // Embed gives the residual stream [B, S', D] (laid out as layout().Residual()) of the
  // tokens, Blocks runs the part's blocks on it, Head gives the mean cross-entropy of its
  // next-token prediction. Loss = Head(Blocks(Embed(tokens)), labels).
  Variable Embed(const runtime::DistTensor& tokens, runtime::Communicator& comm, int64_t step = 0,
                 int64_t micro_batch = 0);
  Variable Blocks(const Variable& x, runtime::Communicator& comm, int64_t step = 0,
                  int64_t micro_batch = 0);
  Variable Head(const Variable& x, const runtime::DistTensor& labels, runtime::Communicator& comm);

  // Activation recompute (TrainOptions::recompute): each block a Checkpoint
  // (train/autograd.h) keeping only its input; its backward runs the block again with the
  // same dropout masks. Changes no bit of any value or gradient. Off by default. A graph
  // recorded this way calls back into this Gpt in its backward: keep it alive (and in
  // place) until then.
  void set_recompute(bool on) { recompute_ = on; }
  bool recompute() const { return recompute_; }

  const std::vector<NamedParam>& params() const { return params_; }
  const GptPart& part() const { return part_; }
  const GptConfig& config() const { return config_; }
  const Layout& layout() const { return layout_; }

 private:
  // In its compute layout and the compute dtype (or `dtype`).
  Variable Param(size_t index, runtime::Communicator& comm, std::optional<DType> dtype = std::nullopt);
  size_t Add(const std::string& name, ParamRole role, Shape shape, double scale, double offset,
             runtime::Communicator& comm);
  Variable Linear(const Variable& x, size_t weight, size_t bias, runtime::Communicator& comm);
  // A row-parallel layer: the matmul's partial sums reduced to the residual layout, then
  // the bias.
  Variable RowLinear(const Variable& x, size_t weight, size_t bias, runtime::Communicator& comm);
  Variable Norm(const Variable& x, size_t scale, size_t bias, runtime::Communicator& comm);
  // dropout(x) with the mask of (step, micro-batch, site); x itself when config.dropout is 0.
  Variable Dropout(const Variable& x, uint64_t stream, uint64_t site, runtime::Communicator& comm);

  // Zigzag ring attention on an sp layout: the zigzag order of s positions, replicated
  // (InvalidArgument "tokens" when 2 x sp does not divide s); nullopt otherwise.
  std::optional<Variable> SequenceOrder(int64_t s, runtime::Communicator& comm) const;
  // ids [B, S] with dim 1 in `order`, in ids' layout.
  static runtime::DistTensor Permute(const runtime::DistTensor& ids, const Variable& order,
                                     runtime::Communicator& comm);

  // The dropout stream of (step, micro-batch): site k draws with SplitMix64(stream + k).
  uint64_t DropoutStream(int64_t step, int64_t micro_batch) const;
  DType compute_dtype() const { return config_.compute_dtype.value_or(config_.dtype); }

  struct BlockParams {
    size_t ln1_scale = 0, ln1_bias = 0, wq = 0, bq = 0, wk = 0, bk = 0, wv = 0, bv = 0, wo = 0,
           bo = 0, ln2_scale = 0, ln2_bias = 0, w_up = 0, b_up = 0, w_gate = 0, b_gate = 0,
           w_down = 0, b_down = 0;
  };

  GptConfig config_;
  Layout layout_;
  GptPart part_;
  std::vector<NamedParam> params_;
  size_t embedding_ = 0, positions_ = 0, lnf_scale_ = 0, lnf_bias_ = 0, head_ = 0;
  std::vector<BlockParams> blocks_;  // the part's blocks, in order
  bool recompute_ = false;
};

// The counter-based value of element `index` of parameter `name`: uniform in [-1, 1).
double InitValue(uint64_t seed, const std::string& name, uint64_t index);

}  // namespace spmd::train
