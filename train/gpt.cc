#include "train/gpt.h"

#include <cmath>
#include <optional>
#include <utility>

#include "rules/ops/counter_rng.h"
#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "runtime/exec/dispatch.h"
#include "train/device.h"
#include "train/precision.h"
#include "train/sequence_attention.h"

namespace spmd::train {

using notation::Ints;
using notation::MakeAttrs;
using runtime::Communicator;
using runtime::DistTensor;

namespace {

// FNV-1a: a name's hash that does not depend on the platform (std::hash may).
uint64_t NameHash(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

kernels::Tensor HostTensor(const Shape& shape, DType dtype, const std::vector<double>& values) {
  if (dtype == DType::kFloat64) return kernels::Tensor::FromVector(shape, values);
  return kernels::Tensor::FromVector(shape, std::vector<float>(values.begin(), values.end()));
}

Variable Call(const char* op, const std::vector<Variable>& in, Communicator& comm,
              const Attrs& attrs = {}) {
  return Apply1(op, in, attrs, comm);
}

}  // namespace

double InitValue(uint64_t seed, const std::string& name, uint64_t index) {
  const uint64_t bits = counter_rng::SplitMix64(counter_rng::SplitMix64(seed ^ NameHash(name)) + index);
  return static_cast<double>(bits >> 11) * 0x1.0p-52 - 1.0;  // [-1, 1)
}

Gpt::Gpt(const GptConfig& config, Layout layout, Communicator& comm, GptPart part)
    : config_(config), layout_(std::move(layout)), part_(part) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"config.layers", config.layers}, {"config.width", config.width},
      {"config.heads", config.heads},   {"config.vocab", config.vocab},
      {"config.sequence", config.sequence}, {"config.mlp_ratio", config.mlp_ratio}};
  for (const auto& [field, value] : sizes) {
    if (value <= 0 || value > (int64_t{1} << 20)) {
      ThrowInvalid(field, std::to_string(value) + " is not in [1, 2^20]");
    }
  }
  if (config.width % config.heads != 0) {
    ThrowInvalid("config.heads", std::to_string(config.heads) + " does not divide width " +
                                     std::to_string(config.width));
  }
  if (!(config.dropout >= 0.0 && config.dropout < 1.0)) {
    ThrowInvalid("config.dropout", std::to_string(config.dropout) + " is not in [0, 1)");
  }
  if (config.dtype != DType::kFloat64 && config.dtype != DType::kFloat32) {
    ThrowInvalid("config.dtype", "must be float32 or float64");
  }
  if (config.compute_dtype && *config.compute_dtype != config.dtype &&
      !(IsTwoByteFloat(*config.compute_dtype) && config.dtype == DType::kFloat32)) {
    ThrowInvalid("config.compute_dtype", std::string(ToString(*config.compute_dtype)) + " over " +
                                             std::string(ToString(config.dtype)) +
                                             " parameters: only bfloat16 or float16 over float32");
  }
  if (part_.end_layer < 0) part_.end_layer = config.layers;
  if (part_.first_layer < 0 || part_.first_layer > part_.end_layer || part_.end_layer > config.layers) {
    ThrowInvalid("part", "layers [" + std::to_string(part_.first_layer) + ", " +
                             std::to_string(part_.end_layer) + ") are not within [0, " +
                             std::to_string(config.layers) + "]");
  }
  if (config.attention == AttentionKind::kRingZigzag && layout_.sp() && config.dropout != 0) {
    ThrowInvalid("config.dropout", "zigzag ring attention reorders the sequence, and dropout "
                                   "masks follow element indices: no dropout with it");
  }
  const int64_t d = config.width, hidden = config.mlp_ratio * config.width;
  const double weight = 0.02 * std::sqrt(3.0);  // uniform with standard deviation 0.02
  const double out_weight = weight / std::sqrt(2.0 * static_cast<double>(config.layers));
  if (part_.embedding) {
    embedding_ = Add("embedding", ParamRole::kVocabRows, {config.vocab, d}, weight, 0, comm);
    positions_ = Add("positions", ParamRole::kReplicated, {config.sequence, d}, weight, 0, comm);
  }
  for (int64_t l = part_.first_layer; l < part_.end_layer; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    BlockParams b;
    b.ln1_scale = Add(p + "ln1.scale", ParamRole::kReplicated, {d}, 0, 1, comm);
    if (!config.rms_norm) b.ln1_bias = Add(p + "ln1.bias", ParamRole::kReplicated, {d}, 0, 0, comm);
    b.wq = Add(p + "attn.q.weight", ParamRole::kColumn, {d, d}, weight, 0, comm);
    b.bq = Add(p + "attn.q.bias", ParamRole::kColumnBias, {d}, 0, 0, comm);
    b.wk = Add(p + "attn.k.weight", ParamRole::kColumn, {d, d}, weight, 0, comm);
    b.bk = Add(p + "attn.k.bias", ParamRole::kColumnBias, {d}, 0, 0, comm);
    b.wv = Add(p + "attn.v.weight", ParamRole::kColumn, {d, d}, weight, 0, comm);
    b.bv = Add(p + "attn.v.bias", ParamRole::kColumnBias, {d}, 0, 0, comm);
    b.wo = Add(p + "attn.out.weight", ParamRole::kRow, {d, d}, out_weight, 0, comm);
    b.bo = Add(p + "attn.out.bias", ParamRole::kReplicated, {d}, 0, 0, comm);
    b.ln2_scale = Add(p + "ln2.scale", ParamRole::kReplicated, {d}, 0, 1, comm);
    if (!config.rms_norm) b.ln2_bias = Add(p + "ln2.bias", ParamRole::kReplicated, {d}, 0, 0, comm);
    b.w_up = Add(p + "mlp.up.weight", ParamRole::kColumn, {d, hidden}, weight, 0, comm);
    b.b_up = Add(p + "mlp.up.bias", ParamRole::kColumnBias, {hidden}, 0, 0, comm);
    if (config.swiglu) {
      b.w_gate = Add(p + "mlp.gate.weight", ParamRole::kColumn, {d, hidden}, weight, 0, comm);
      b.b_gate = Add(p + "mlp.gate.bias", ParamRole::kColumnBias, {hidden}, 0, 0, comm);
    }
    b.w_down = Add(p + "mlp.down.weight", ParamRole::kRow, {hidden, d}, out_weight, 0, comm);
    b.b_down = Add(p + "mlp.down.bias", ParamRole::kReplicated, {d}, 0, 0, comm);
    blocks_.push_back(b);
  }
  if (part_.head) {
    lnf_scale_ = Add("final_ln.scale", ParamRole::kReplicated, {d}, 0, 1, comm);
    if (!config.rms_norm) lnf_bias_ = Add("final_ln.bias", ParamRole::kReplicated, {d}, 0, 0, comm);
    head_ = Add("head.weight", ParamRole::kVocabColumns, {d, config.vocab}, weight, 0, comm);
  }
}

size_t Gpt::Add(const std::string& name, ParamRole role, Shape shape, double scale,
                double offset, Communicator& comm) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) {
    values[i] = offset + (scale == 0 ? 0 : scale * InitValue(config_.seed, name, i));
  }
  const int rank = static_cast<int>(shape.size());
  // Built on the host, each shard then copied to the communicator's device.
  DistTensor value = OnDevice(DistTensor::ShardTensor(HostTensor(shape, config_.dtype, values),
                                                      layout_.mesh(), layout_.Storage(role, rank),
                                                      comm.rank()),
                              comm.device(), comm.stream());
  params_.push_back({name, role, Variable(std::move(value), /*requires_grad=*/true)});
  return params_.size() - 1;
}

Variable Gpt::Param(size_t index, Communicator& comm, std::optional<DType> dtype) {
  const NamedParam& p = params_[index];
  const DistAttr compute = layout_.Compute(p.role, static_cast<int>(p.value.value().shape().size()));
  // ZeRO-3: gathered for this use only (in the master's dtype); then, under mixed
  // precision, cast to the compute dtype (its backward widens the gradient before the
  // gather's reduce-scatter or any other reduction, train/precision.h).
  const Variable placed = p.value.value().dist_attr() == compute ? p.value : Redistribute(p.value, compute, comm);
  return CastVariable(placed, dtype.value_or(compute_dtype()), comm);
}

Variable Gpt::Linear(const Variable& x, size_t weight, size_t bias, Communicator& comm) {
  const Variable y = Call("matmul", {x, Param(weight, comm)}, comm);
  return Call("add", {y, Param(bias, comm)}, comm);
}

Variable Gpt::RowLinear(const Variable& x, size_t weight, size_t bias, Communicator& comm) {
  // The partial sums over tp reduced onto the residual layout first (Megatron: an
  // all-reduce; with SP a reduce-scatter), then the bias, which is not an addend.
  const Variable y = Redistribute(Call("matmul", {x, Param(weight, comm)}, comm), layout_.Residual(), comm);
  return Call("add", {y, Param(bias, comm)}, comm);
}

Variable Gpt::Norm(const Variable& x, size_t scale, size_t bias, Communicator& comm) {
  // In the model's dtype, as torch.autocast runs norms in float32: x cast up, the norm on
  // the master scale and bias, the result cast back to the compute dtype. (rms_norm's
  // backward cubes 1 / rms, which float16 cannot hold for small activations.)
  const Attrs attrs = MakeAttrs({{"begin_norm_axis", int64_t{2}}});
  const DType wide = config_.dtype;
  const Variable in = CastVariable(x, wide, comm);
  const Variable out = config_.rms_norm
                           ? Apply("rms_norm", {in, Param(scale, comm, wide)}, attrs, comm)[0]
                           : Apply("layer_norm", {in, Param(scale, comm, wide), Param(bias, comm, wide)}, attrs, comm)[0];
  return CastVariable(out, compute_dtype(), comm);
}

Variable Gpt::Dropout(const Variable& x, uint64_t stream, uint64_t site, Communicator& comm) {
  if (config_.dropout == 0) return x;
  const uint64_t seed = counter_rng::SplitMix64(stream + site);
  return Apply("dropout", {x},
               MakeAttrs({{"p", config_.dropout}, {"seed", static_cast<int64_t>(seed)}}), comm)[0];
}

uint64_t Gpt::DropoutStream(int64_t step, int64_t micro_batch) const {
  using counter_rng::SplitMix64;
  return SplitMix64(SplitMix64(SplitMix64(config_.seed ^ NameHash("dropout")) + static_cast<uint64_t>(step)) +
                    static_cast<uint64_t>(micro_batch));
}

std::optional<Variable> Gpt::SequenceOrder(int64_t s, Communicator& comm) const {
  if (config_.attention != AttentionKind::kRingZigzag || !layout_.sp()) return std::nullopt;
  const int64_t n = layout_.mesh().axis_size(*layout_.sp());
  if (s % (2 * n) != 0) {
    ThrowInvalid("tokens", "zigzag ring attention needs a sequence that is a multiple of 2 x " +
                               std::to_string(n) + " (sp), got " + std::to_string(s));
  }
  return Variable(OnDevice(DistTensor::ShardTensor(kernels::Tensor::FromVector({s}, ZigzagOrder(s, n)),
                                                   layout_.mesh(), DistAttr::Replicated(1), comm.rank()),
                           comm.device(), comm.stream()));
}

DistTensor Gpt::Permute(const DistTensor& ids, const Variable& order, Communicator& comm) {
  const Attrs along_sequence = MakeAttrs({{"axis", int64_t{1}}});
  return runtime::Dispatch("index_select", {ids, order.value()}, along_sequence, comm)[0]
      .Reshard(ids.dist_attr(), comm);
}

Variable Gpt::Loss(const DistTensor& tokens, const DistTensor& labels, Communicator& comm,
                   int64_t step, int64_t micro_batch) {
  const Variable x = Embed(tokens, comm, step, micro_batch);  // checks the tokens first
  if (labels.shape() != tokens.shape()) ThrowInvalid("labels", "must have the tokens' shape");
  return Head(Blocks(x, comm, step, micro_batch), labels, comm);
}

Variable Gpt::Embed(const DistTensor& tokens, Communicator& comm, int64_t step, int64_t micro_batch) {
  if (!part_.embedding) ThrowInvalid("part", "this part has no embedding");
  const Shape& shape = tokens.shape();
  if (shape.size() != 2 || shape[1] > config_.sequence || shape[1] < 1) {
    ThrowInvalid("tokens", "must be [batch, s] with 1 <= s <= config.sequence");
  }
  const int64_t s = shape[1];
  // Dropout site 0 is the embedding's; block l's are 1 + 2 l and 2 + 2 l.
  // Zigzag ring attention: the model runs on the sequence in zigzag order (tokens, labels
  // and positions permuted alike); everything but attention is position-wise.
  const std::optional<Variable> order = SequenceOrder(s, comm);
  Variable x = Call("lookup_table_v2", {Variable(order ? Permute(tokens, *order, comm) : tokens),
                                        Param(embedding_, comm)}, comm);
  Variable pos = Param(positions_, comm);
  if (s < config_.sequence) {
    pos = Call("slice", {pos}, comm,
               MakeAttrs({{"axes", Ints{0}}, {"starts", Ints{0}}, {"ends", Ints{s}}}));
  }
  if (order) pos = Call("index_select", {pos, *order}, comm, MakeAttrs({{"axis", int64_t{0}}}));
  // Reduce the vocabulary-parallel lookup onto the residual layout before adding the
  // positions (under SP a reduce-scatter, not an all-reduce then a slice).
  return Dropout(Call("add", {Redistribute(x, layout_.Residual(), comm), pos}, comm),
                 DropoutStream(step, micro_batch), 0, comm);
}

Variable Gpt::Blocks(const Variable& input, Communicator& comm, int64_t step, int64_t micro_batch) {
  const Shape& shape = input.value().shape();
  if (shape.size() != 3 || shape[1] > config_.sequence || shape[1] < 1 || shape[2] != config_.width) {
    ThrowInvalid("x", "must be [batch, s, width] with 1 <= s <= config.sequence");
  }
  if (blocks_.empty()) return input;
  const int64_t b = shape[0], s = shape[1], d = config_.width, h = config_.heads, dh = d / h;
  const Layout& layout = layout_;
  const uint64_t stream = DropoutStream(step, micro_batch);
  uint64_t site = 1 + 2 * static_cast<uint64_t>(part_.first_layer);

  // The causal mask, added to the scores: 0 on and below the diagonal, -1e9 above.
  // In the compute dtype; float16 cannot hold -1e9 (it would be -inf): -3e4 there, which
  // exp still takes to 0.
  const double masked = compute_dtype() == DType::kFloat16 ? -3e4 : -1e9;
  std::vector<double> mask_values(s * s, 0.0);
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t j = i + 1; j < s; ++j) mask_values[i * s + j] = masked;
  }
  const Variable mask = CastVariable(
      Variable(OnDevice(DistTensor::ShardTensor(HostTensor({s, s}, config_.dtype, mask_values), layout.mesh(),
                                                DistAttr::Replicated(2), comm.rank()),
                        comm.device(), comm.stream())),
      compute_dtype(), comm);
  const Attrs heads_shape = MakeAttrs({{"shape", Ints{b, s, h, dh}}});
  const Attrs to_heads = MakeAttrs({{"perm", Ints{0, 2, 1, 3}}});
  const Attrs merged_shape = MakeAttrs({{"shape", Ints{b, s, d}}});

  // One block: x -> x + attention -> + MLP, its dropout sites fixed by the block (`site`
  // is a copy: a recomputed block draws the masks its forward drew).
  auto block = [this, mask, heads_shape, to_heads, merged_shape, stream, dh](
                   const BlockParams& p, uint64_t site, Variable x, Communicator& comm) {
    const Layout& layout = layout_;
    // Attention.
    const Variable a_in = Redistribute(Norm(x, p.ln1_scale, p.ln1_bias, comm), layout.BlockInput(), comm);
    auto heads = [&](size_t w, size_t bias) {
      return Call("transpose", {Call("reshape", {Linear(a_in, w, bias, comm)}, comm, heads_shape)},
                  comm, to_heads);  // [B, H, S, Dh]
    };
    if (config_.attention != AttentionKind::kDefault && layout.sp()) {
      // The sequence strategies work on [B, S, H, Dh] with S sharded over sp.
      // SequenceAttention takes float32/float64: under mixed precision its q, k, v are cast
      // to the model's dtype and its output back (as autocast runs unsupported ops wide).
      auto split = [&](size_t w, size_t bias) {
        return CastVariable(Call("reshape", {Linear(a_in, w, bias, comm)}, comm, heads_shape), config_.dtype, comm);
      };
      const SequenceStrategy strategy =
          config_.attention == AttentionKind::kUlysses ? SequenceStrategy::kUlysses
          : config_.attention == AttentionKind::kRing  ? SequenceStrategy::kRing
                                                       : SequenceStrategy::kRingZigzag;
      const SequenceAttentionOptions options{strategy, *layout.sp(), /*causal=*/true, 0};
      const Variable context = Call(
          "reshape",
          {CastVariable(SequenceAttention(split(p.wq, p.bq), split(p.wk, p.bk), split(p.wv, p.bv), options, comm),
                        compute_dtype(), comm)},
          comm, merged_shape);  // [B, S, D]
      x = Call("add", {x, Dropout(RowLinear(context, p.wo, p.bo, comm), stream, site++, comm)}, comm);
    } else {
      const Variable q = heads(p.wq, p.bq), k = heads(p.wk, p.bk), v = heads(p.wv, p.bv);
      Variable scores = Call("matmul", {q, k}, comm, MakeAttrs({{"trans_y", true}}));
      scores = Call("scale", {scores}, comm, MakeAttrs({{"scale", 1.0 / std::sqrt(static_cast<double>(dh))}}));
      const Variable probs = Call("softmax", {Call("add", {scores, mask}, comm)}, comm);
      const Variable context = Call(
          "reshape", {Call("transpose", {Call("matmul", {probs, v}, comm)}, comm, to_heads)}, comm,
          merged_shape);  // [B, S, D]
      x = Call("add", {x, Dropout(RowLinear(context, p.wo, p.bo, comm), stream, site++, comm)}, comm);
    }

    // MLP.
    const Variable m_in = Redistribute(Norm(x, p.ln2_scale, p.ln2_bias, comm), layout.BlockInput(), comm);
    Variable hidden = Linear(m_in, p.w_up, p.b_up, comm);
    if (config_.swiglu) {
      hidden = Call("multiply", {Call("silu", {Linear(m_in, p.w_gate, p.b_gate, comm)}, comm), hidden}, comm);
    } else {
      hidden = Call("gelu", {hidden}, comm);
    }
    x = Call("add", {x, Dropout(RowLinear(hidden, p.w_down, p.b_down, comm), stream, site++, comm)}, comm);
    return x;
  };
  Variable x = input;
  for (const BlockParams& p : blocks_) {
    if (recompute_) {
      x = Checkpoint("block", {x},
                     [block, p, site](const std::vector<Variable>& in, Communicator& c) {
                       return std::vector<Variable>{block(p, site, in[0], c)};
                     },
                     comm)[0];
    } else {
      x = block(p, site, x, comm);
    }
    site += 2;
  }
  return x;
}

Variable Gpt::Head(const Variable& x, const DistTensor& labels, Communicator& comm) {
  if (!part_.head) ThrowInvalid("part", "this part has no head");
  const Shape& shape = x.value().shape();
  if (shape.size() != 3 || labels.shape() != Shape{shape[0], shape[1]}) {
    ThrowInvalid("labels", "must be [batch, s], the tokens' shape");
  }
  const int64_t b = shape[0], s = shape[1];
  const Variable final_in =
      Redistribute(Norm(x, lnf_scale_, lnf_bias_, comm), layout_.BlockInput(), comm);
  // [B, S, V]; the cross-entropy in the model's dtype (float32 under mixed precision).
  const Variable logits = CastVariable(Call("matmul", {final_in, Param(head_, comm)}, comm), config_.dtype, comm);
  // Labels need no gradient: the reshape is not recorded.
  const std::optional<Variable> order = SequenceOrder(s, comm);
  const Variable labels_3d =
      Call("reshape", {Variable(order ? Permute(labels, *order, comm) : labels)}, comm,
           MakeAttrs({{"shape", Ints{b, s, 1}}}));
  const Variable token_losses =
      Apply("cross_entropy_with_softmax", {logits, labels_3d}, {}, comm)[1];  // [B, S, 1]
  return Call("mean_all", {token_losses}, comm);
}

}  // namespace spmd::train
