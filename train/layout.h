// A parallel strategy as data: where each parameter, its optimizer states and the
// activations at the model's boundaries live on a named mesh.
//
// The model (train/gpt.h) is written once. It asks the Layout for every placement and
// never branches on the strategy; the rules and the planner do the rest. Mesh axes are
// named "dp" (data), "tp" (tensor; Megatron's sequence parallelism shards the residual
// stream's sequence over the same axis) and "sp" (sequence: every activation's sequence
// dim sharded over it, attention included, parameters replicated over it and their
// gradients reduced over it as over dp); any may be absent, any size, uneven included.
//
//   strategy   parameters            gradients                         states
//   DP         replicated on dp      partial on dp until the step,     replicated
//                                    then all-reduced
//   ZeRO-1     replicated on dp      partial until the step, then      dp-sharded
//                                    reduce-scattered; updated slices
//                                    all-gathered into the parameter
//   ZeRO-2     replicated on dp      reduce-scattered as the backward  dp-sharded
//                                    produces them (1/N held)
//   ZeRO-3     dp-sharded, gathered  as ZeRO-2                         dp-sharded
//   (FSDP)     before each use
//              (Redistribute)
//   TP (Megatron)       column weights [in, out] S(1) on tp, their bias S(0); row weights
//                       S(0) on tp; embedding rows (vocabulary) S(0) on tp; LM head
//                       columns (vocabulary) S(1) on tp; norms replicated
//   SP (with TP)        the residual stream [B, S, D] sharded on S over tp between blocks
//                       (LayerNorm regions); gathered on S before the column matmuls,
//                       reduce-scattered after the row matmuls
// The batch is sharded over dp in every strategy. ZeRO-3 keeps the gathered parameter
// alive from its forward use to its backward use (the autograd graph holds it) instead of
// gathering it a second time: 2(N-1)/N of the parameter bytes per step, not FSDP's 3(N-1)/N,
// for more memory between forward and backward (docs/TRAINING.md).
#pragma once

#include <optional>
#include <string>

#include "rules/model/dist_attr.h"
#include "rules/model/mesh.h"

namespace spmd::train {

// What a parameter is to tensor parallelism.
enum class ParamRole {
  kReplicated,     // norms' scale and bias, a row layer's bias, positions
  kColumn,         // [in, out], the output features split: Q, K, V, MLP up
  kColumnBias,     // [out] of a column layer
  kRow,            // [in, out], the input features split: attention out, MLP down
  kVocabRows,      // [vocab, width] embedding table
  kVocabColumns,   // [width, vocab] LM head
};

struct Strategy {
  int zero_stage = 0;              // 0 (plain DP) to 3, over the dp axis
  bool sequence_parallel = false;  // over the tp axis; needs tp
};

class Layout {
 public:
  // Throws SpmdError(kInvalidArgument, "mesh.axis_names") when an axis is not named "dp",
  // "tp" or "sp" or a name repeats, "strategy.zero_stage" outside 0..3, and
  // "strategy.sequence_parallel" without a tp axis.
  Layout(Mesh mesh, Strategy strategy);

  const Mesh& mesh() const { return mesh_; }
  const Strategy& strategy() const { return strategy_; }
  std::optional<int> dp() const { return dp_; }
  std::optional<int> tp() const { return tp_; }
  std::optional<int> sp() const { return sp_; }

  // How the forward uses a parameter (TP's sharding only).
  DistAttr Compute(ParamRole role, int rank) const;
  // How it is stored between steps (ZeRO-3: also sharded over dp).
  DistAttr Storage(ParamRole role, int rank) const;
  // Where its reduced gradient and optimizer states live (ZeRO >= 1: sharded over dp).
  DistAttr State(ParamRole role, int rank) const;

  // Where Backward reshards each gradient contribution (Variable::set_grad_layout):
  // the state layout from ZeRO-2 on; nothing below (gradients stay partial until the step).
  std::optional<DistAttr> GradLayout(ParamRole role, int rank) const;

  // Token ids and labels, [B, S] or [B, S, 1]: the batch over dp, the sequence over sp.
  DistAttr Tokens(int rank) const;
  // The residual stream [B, S, D] between blocks (SP: the sequence over tp too).
  DistAttr Residual() const;
  // A block's input to its column matmuls, [B, S, D]: the batch over dp, the sequence
  // over sp.
  DistAttr BlockInput() const;

  // "dp=2,tp=2 zero=1 sp=0" style summary for logs.
  std::string ToString() const;

 private:
  // Appends dp to dim 0's axes (co-sharding after tp when dim 0 is already split).
  DistAttr WithDp(DistAttr attr) const;

  Mesh mesh_;
  Strategy strategy_;
  std::optional<int> dp_, tp_, sp_;
};

// Parses "dp=2,tp=2" into a named mesh (InvalidArgument "mesh" on bad text):
// ParseMeshSpec (rules/model/mesh.h), the parser the launcher agrees on.
Mesh ParseNamedMesh(const std::string& text);

}  // namespace spmd::train
