#include "checker/grad_check.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "checker/input_values.h"
#include "checker/shards.h"
#include "checker/sweep.h"
#include "checker/vjp_eval.h"
#include "rules/model/error.h"
#include "rules/model/layout.h"
#include "rules/engine/phase.h"
#include "rules/engine/registry.h"

namespace spmd::checker {
namespace {

using reference::Tensor;
using reference::Tensors;

// A failure found while running a case; caught in CheckGrad and turned into an outcome.
struct Failure {
  std::string what;
  int call = -1;
  std::string call_op;
  std::string message;
};

std::string ShapeText(const Shape& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? "," : "") + std::to_string(shape[d]);
  return s + "]";
}

std::string RefText(const VjpRef& ref) {
  switch (ref.kind) {
    case VjpRef::Kind::kInput: return "input " + std::to_string(ref.index);
    case VjpRef::Kind::kOutput: return "output " + std::to_string(ref.index);
    case VjpRef::Kind::kOutputGrad: return "cotangent " + std::to_string(ref.index);
    case VjpRef::Kind::kCall:
      return "call " + std::to_string(ref.index) + " result " + std::to_string(ref.result);
  }
  return "?";
}

// The op whose VJP is checked: the declaration, with an injected graph where one is given.
OpDecl WithVjp(const OpDecl& op, const VjpBuilder& vjp) {
  OpDecl copy = op;
  if (vjp) copy.vjp = vjp;
  return copy;
}

double Scale(const Tensor& t) {
  double scale = 1;
  for (double v : t.data) {
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  }
  return scale;
}

// The first element where `got` and `want` differ by more than tolerance * scale, as a
// sentence; "" when none.
std::string Compare(const Tensor& got, const Tensor& want, double tolerance, double scale,
                    const std::string& got_name, const std::string& want_name) {
  for (size_t j = 0; j < want.data.size(); ++j) {
    const double g = got.data[j], w = want.data[j];
    const bool same = (std::isnan(g) && std::isnan(w)) || g == w || std::fabs(g - w) <= tolerance * scale;
    if (!same) {
      return "element " + std::to_string(j) + ": " + got_name + " " + Number(g) + ", " + want_name + " " +
             Number(w) + " (tolerance " + Number(tolerance * scale) + ")";
    }
  }
  return "";
}

// A dist attr drawn at random: each mesh axis R, S(d) or P(op) for op in `partial_ops`;
// the axes sharding one dim in random order.
DistAttr RandomDistAttr(int rank, int mesh_ndim, const std::vector<ReduceOp>& partial_ops, std::mt19937_64& rng) {
  DistAttr attr = DistAttr::Replicated(rank);
  const int options = 1 + rank + static_cast<int>(partial_ops.size());
  for (int a = 0; a < mesh_ndim; ++a) {
    const int choice = std::uniform_int_distribution<int>(0, options - 1)(rng);
    if (choice >= 1 && choice <= rank) attr.dims[choice - 1].push_back(a);
    if (choice > rank) attr.partial[a] = partial_ops[choice - rank - 1];
  }
  for (AxisList& axes : attr.dims) std::shuffle(axes.begin(), axes.end(), rng);
  return attr;
}

// Saturating element count of `shape` (a bound above `cap` reads as cap + 1).
int64_t Elements(const Shape& shape, int64_t cap) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s > 0 && n > cap / s) return cap + 1;
    n *= std::max<int64_t>(s, 0);
  }
  return n;
}

// Refuses a case too large to check: finite differences run the reference twice per input
// element, and the simulation holds every tensor once per rank.
void CheckGradSize(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs, int64_t ranks) {
  int64_t differenced = 0, held = 0;
  const int64_t held_cap = kMaxSimulatedElements / std::max<int64_t>(ranks, 1);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t n = Elements(inputs[i], kMaxGradInputElements);
    differenced += n;
    held += Elements(inputs[i], held_cap);
    if (differenced > kMaxGradInputElements || held > held_cap) {
      ThrowUnsupported("inputs[" + std::to_string(i) + "].shape",
                       "the gradient check takes at most " + std::to_string(kMaxGradInputElements) +
                           " input elements (finite differences run the reference twice per element) and " +
                           std::to_string(kMaxSimulatedElements) + " elements over all ranks; shrink the sizes");
    }
  }
  for (size_t o = 0; o < outputs.size(); ++o) {
    held += Elements(outputs[o], held_cap);
    if (held > held_cap) {
      ThrowUnsupported("outputs[" + std::to_string(o) + "].shape",
                       "the gradient check holds at most " + std::to_string(kMaxSimulatedElements) +
                           " elements over all ranks; shrink the sizes");
    }
  }
}

}  // namespace

GradOracle MakeGradOracle(const GradCase& c) {
  GradOracle oracle;
  const OpDecl op = WithVjp(*c.op, c.vjp);
  const reference::ReferenceFn fn = reference::FindReference(op.name);
  Attrs normalized;
  std::vector<InputValues> kinds;
  std::mt19937_64 rng(c.seed);
  std::vector<Shape> out_shapes;
  try {
    normalized = op.NormalizeAttrs(c.attrs);
    out_shapes = InferOutputShapes(op, c.shapes, normalized);
  } catch (const SpmdError& e) {
    oracle.note = std::string("the declaration refuses the request: ") + e.what();
    return oracle;
  }
  CheckGradSize(c.shapes, out_shapes, 1);
  try {
    kinds = op.InputValueKinds(RuleContext{c.shapes, normalized});
    for (size_t i = 0; i < c.shapes.size(); ++i) oracle.inputs.push_back(MakeInputValues(c.shapes[i], kinds[i], rng));
    oracle.outputs = fn(oracle.inputs, normalized);
  } catch (const SpmdError& e) {
    // The forward refuses these sizes (the soundness sweep checks that the declaration and
    // the reference agree on what is valid); a gradient is only owed where it runs.
    oracle.note = std::string("the forward refuses the request: ") + e.what();
    return oracle;
  }
  oracle.applicable = true;
  if (!op.vjp) {
    oracle.failure = op.name + " has no VJP";
    return oracle;
  }
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  for (const Tensor& y : oracle.outputs) {
    Tensor g{y.shape, std::vector<double>(y.data.size()), DType::kFloat64};
    for (double& v : g.data) v = unit(rng);
    oracle.cotangents.push_back(std::move(g));
  }
  try {
    oracle.vjp = EvaluateVjp(op, oracle.inputs, c.attrs, oracle.outputs, oracle.cotangents);
  } catch (const SpmdError& e) {
    oracle.failure = "the unsharded VJP fails on a request the forward accepts: " + e.field() + ": " + e.what();
    return oracle;
  }
  auto loss = [&](const Tensors& inputs) {
    const Tensors ys = fn(inputs, normalized);
    double sum = 0;
    for (size_t o = 0; o < ys.size(); ++o) {
      // An int64 or bool output (a seed_offset) has no derivative; its constant values
      // would only add cancellation to the differences.
      if (!IsFloating(ys[o].dtype)) continue;
      for (size_t k = 0; k < ys[o].data.size(); ++k) sum += oracle.cotangents[o].data[k] * ys[o].data[k];
    }
    return sum;
  };
  for (size_t i = 0; i < oracle.inputs.size(); ++i) {
    if (!IsFloating(oracle.inputs[i].dtype)) {
      if (oracle.vjp[i]) {
        oracle.failure = "input " + std::to_string(i) + " is " + std::string(ToString(oracle.inputs[i].dtype)) +
                         " but the VJP gives it a gradient";
        return oracle;
      }
      oracle.differences.push_back(std::nullopt);
      continue;
    }
    if (IsConstantInput(op, i)) {  // held constant by the op's backward (roi_align's boxes)
      if (oracle.vjp[i]) {
        oracle.failure = "input " + std::to_string(i) + " is held constant but the VJP gives it a gradient";
        return oracle;
      }
      oracle.differences.push_back(std::nullopt);
      continue;
    }
    Tensor fd{oracle.inputs[i].shape, std::vector<double>(oracle.inputs[i].data.size()), DType::kFloat64};
    Tensors moved = oracle.inputs;
    for (size_t j = 0; j < fd.data.size(); ++j) {
      const double x = oracle.inputs[i].data[j];
      moved[i].data[j] = x + kDifferenceStep;
      const double plus = loss(moved);
      moved[i].data[j] = x - kDifferenceStep;
      const double minus = loss(moved);
      moved[i].data[j] = x;
      fd.data[j] = (plus - minus) / (2 * kDifferenceStep);
    }
    oracle.differences.push_back(std::move(fd));
  }
  return oracle;
}

GradOutcome CheckGrad(const GradCase& c) { return CheckGrad(c, MakeGradOracle(c)); }

GradOutcome CheckGrad(const GradCase& c, const GradOracle& oracle) {
  GradOutcome outcome;
  if (!oracle.applicable) {
    outcome.note = oracle.note;
    return outcome;
  }
  if (c.inputs.size() != c.shapes.size()) ThrowInvalid("inputs", "one dist attr per input");
  if (c.cotangents.size() != oracle.outputs.size()) {
    ThrowInvalid("cotangents", "has " + std::to_string(c.cotangents.size()) + " entries, " + c.op->name + " has " +
                                   std::to_string(oracle.outputs.size()) + " outputs here");
  }
  for (size_t o = 0; o < c.cotangents.size(); ++o) {
    Validate(c.cotangents[o], c.mesh, static_cast<int>(oracle.outputs[o].shape.size()),
             "cotangents[" + std::to_string(o) + "]");
  }
  std::vector<Shape> out_shapes;
  for (const Tensor& y : oracle.outputs) out_shapes.push_back(y.shape);
  CheckGradSize(c.shapes, out_shapes, c.mesh.size());
  std::vector<TensorArg> forward_args;
  for (size_t i = 0; i < c.shapes.size(); ++i) forward_args.push_back({c.shapes[i], c.inputs[i]});
  InferResult forward;
  try {
    forward = InferForward(*c.op, c.mesh, forward_args, c.attrs);
  } catch (const SpmdError& e) {
    outcome.note = std::string("the forward rule refuses: ") + e.what();
    return outcome;
  }
  try {
    if (!oracle.failure.empty()) throw Failure{"graph", -1, "", oracle.failure};
    const OpDecl op = WithVjp(*c.op, c.vjp);
    const Attrs normalized = op.NormalizeAttrs(c.attrs);
    VjpGraph graph;
    try {
      graph = op.vjp(RuleContext{c.shapes, normalized});
    } catch (const SpmdError& e) {
      throw Failure{"graph", -1, "", std::string("the VJP builder refuses: ") + e.what()};
    }
    std::mt19937_64 rng(c.shard_seed);
    std::vector<ShardedTensor> inputs, outputs, cotangents;
    for (size_t i = 0; i < c.shapes.size(); ++i) inputs.push_back(ShardTensor(oracle.inputs[i], c.inputs[i], c.mesh, rng));
    for (size_t o = 0; o < oracle.outputs.size(); ++o) {
      outputs.push_back(ShardTensor(oracle.outputs[o], forward.outputs[o], c.mesh, rng));
      cotangents.push_back(ShardTensor(oracle.cotangents[o], c.cotangents[o], c.mesh, rng));
    }
    std::vector<std::vector<ShardedTensor>> results;
    auto resolve = [&](const VjpRef& ref, size_t k) -> const ShardedTensor& {
      const std::vector<ShardedTensor>* list = nullptr;
      size_t index = ref.index;
      switch (ref.kind) {
        case VjpRef::Kind::kInput: list = &inputs; break;
        case VjpRef::Kind::kOutput: list = &outputs; break;
        case VjpRef::Kind::kOutputGrad: list = &cotangents; break;
        case VjpRef::Kind::kCall:
          if (ref.index >= k) break;
          list = &results[ref.index];
          index = ref.result;
          break;
      }
      if (list == nullptr || index >= list->size()) {
        throw Failure{"graph", static_cast<int>(k), "", "refers to " + RefText(ref) + ", which does not exist"};
      }
      return (*list)[index];
    };
    const auto coords = MeshCoordinates(c.mesh);
    for (size_t k = 0; k < graph.calls.size(); ++k) {
      const VjpCall& call = graph.calls[k];
      const int at = static_cast<int>(k);
      const OpDecl* callee = FindOp(call.op);
      if (callee == nullptr) throw Failure{"graph", at, call.op, "'" + call.op + "' is not a registered op"};
      std::vector<ShardedTensor> operands;
      std::vector<TensorArg> args;
      std::string held;  // the operands as held, for the messages
      for (size_t j = 0; j < call.operands.size(); ++j) {
        operands.push_back(resolve(call.operands[j], k));
        args.push_back({operands.back().global_shape, operands.back().attr});
        held += (j ? ", " : "") + RefText(call.operands[j]) + " " + ShapeText(operands.back().global_shape) + " " +
                ToPlacementString(operands.back().attr, c.mesh.ndim());
      }
      InferResult rule;
      Attrs attrs;
      std::vector<Shape> out_shapes;
      try {
        rule = InferForward(*callee, c.mesh, args, call.attrs);
        attrs = callee->NormalizeAttrs(call.attrs);
        out_shapes = InferOutputShapes(*callee, [&] {
          std::vector<Shape> shapes;
          for (const ShardedTensor& t : operands) shapes.push_back(t.global_shape);
          return shapes;
        }(), attrs);
      } catch (const SpmdError& e) {
        throw Failure{"rule refuses", at, call.op,
                      "the rule refuses operands (" + held + "): " + std::string(ToString(e.type())) + " " +
                          e.field() + ": " + e.what()};
      }
      // Reshard: an operand the rule wants held otherwise is assembled and split again.
      std::vector<Shape> global_in, local_in, offsets;
      for (size_t j = 0; j < operands.size(); ++j) {
        global_in.push_back(operands[j].global_shape);
        if (operands[j].attr == rule.inputs[j]) {
          outcome.partial_operands += operands[j].attr.IsPartial();
          continue;
        }
        ++outcome.reshards;
        Tensor whole;
        std::string error;
        if (!AssembleTensor(operands[j], c.mesh, kShardedRelative, 1e-12, &whole, &error)) {
          throw Failure{"replicas", at, call.op, "operand " + std::to_string(j) + " (" + RefText(call.operands[j]) +
                                                     "): " + error};
        }
        operands[j] = ShardTensor(whole, rule.inputs[j], c.mesh, rng);
      }
      std::vector<ShardedTensor> produced(out_shapes.size());
      for (size_t o = 0; o < out_shapes.size(); ++o) produced[o] = {out_shapes[o], rule.outputs[o], DType::kFloat64, {}};
      const reference::ReferenceFn registered = reference::FindReference(call.op);
      if (registered == nullptr && !c.local_reference) throw Failure{"reference refuses", at, call.op, "no reference"};
      // An op with an exchange inside (OpDecl::exchange) runs its two phases around a
      // simulated all-gather over the exchanged dim's mesh axes (members in Mesh::GroupOf
      // order) when that dim is sharded, as the soundness sweep and Dispatch do.
      int exchange_dim = ExchangedDim(*callee, RuleContext{global_in, attrs});
      if (exchange_dim >= 0 && rule.inputs[callee->exchange->input].dims[exchange_dim].empty()) exchange_dim = -1;
      auto run = [&](const KernelRef& kernel, const Tensors& args, const Attrs& local_attrs) {
        if (c.local_reference) return c.local_reference(kernel, args, local_attrs);
        const reference::ReferenceFn fn = kernel.phase ? reference::FindReference(kernel) : registered;
        if (fn == nullptr) throw std::logic_error(call.op + " declares an exchange without its phases");
        return fn(args, local_attrs);
      };
      auto refused = [&](int64_t pid, const std::string& what) {
        return Failure{"reference refuses", at, call.op,
                       "on rank " + std::to_string(pid) + "'s shards (operands " + held + "): " + what};
      };
      std::vector<Tensors> rank_locals(coords.size());
      std::vector<Attrs> rank_attrs(coords.size());
      std::vector<std::vector<Shape>> rank_out(coords.size());
      for (size_t r = 0; r < coords.size(); ++r) {
        const int64_t pid = c.mesh.process_ids()[r];
        local_in.clear();
        offsets.clear();
        for (size_t j = 0; j < operands.size(); ++j) {
          rank_locals[r].push_back(operands[j].locals[r]);
          local_in.push_back(rank_locals[r].back().shape);
          offsets.push_back(GlobalOffset(operands[j].global_shape, operands[j].attr, c.mesh, coords[r]));
        }
        for (size_t o = 0; o < out_shapes.size(); ++o) {
          rank_out[r].push_back(LocalShape(out_shapes[o], rule.outputs[o], c.mesh, coords[r]));
        }
        try {
          const LocalContext context{attrs, global_in, local_in, offsets, out_shapes, rank_out[r]};
          rank_attrs[r] = callee->localize ? callee->localize(context) : attrs;
        } catch (const SpmdError& e) {
          throw refused(pid, std::string(ToString(e.type())) + " " + e.what());
        }
      }
      std::vector<Tensor> stats(exchange_dim >= 0 ? coords.size() : 0);
      for (size_t r = 0; r < stats.size(); ++r) {
        try {
          Tensors out = run(KernelRef(call.op, Phase::kStats), rank_locals[r], rank_attrs[r]);
          if (out.size() != 1) throw std::logic_error(call.op + "'s stats phase must give one tensor");
          stats[r] = std::move(out[0]);
        } catch (const SpmdError& e) {
          throw refused(c.mesh.process_ids()[r], std::string(ToString(e.type())) + " " + e.what());
        }
      }
      std::map<int64_t, size_t> row_of;  // process id -> its position in coords
      for (size_t r = 0; r < coords.size(); ++r) row_of[c.mesh.process_ids()[r]] = r;
      for (size_t r = 0; r < coords.size(); ++r) {
        const int64_t pid = c.mesh.process_ids()[r];
        const std::vector<Shape>& local_out = rank_out[r];
        Tensors got;
        try {
          if (exchange_dim >= 0) {
            const std::vector<int>& axes = rule.inputs[callee->exchange->input].dims[exchange_dim];
            Tensor gathered{stats[r].shape, {}, stats[r].dtype};
            const std::vector<int64_t> members = c.mesh.GroupOf(coords[r], axes);
            gathered.shape.insert(gathered.shape.begin(), static_cast<int64_t>(members.size()));
            for (int64_t member : members) {
              const Tensor& piece = stats[row_of.at(member)];
              gathered.data.insert(gathered.data.end(), piece.data.begin(), piece.data.end());
            }
            Tensors finish_inputs = rank_locals[r];
            finish_inputs.push_back(std::move(gathered));
            got = run(KernelRef(call.op, Phase::kFinish), finish_inputs, rank_attrs[r]);
          } else {
            got = run(call.op, rank_locals[r], rank_attrs[r]);
          }
        } catch (const SpmdError& e) {
          throw refused(pid, std::string(ToString(e.type())) + " " + e.what());
        } catch (const std::exception& e) {  // not a typed error: a bug, reported as one
          throw refused(pid, std::string("untyped ") + e.what());
        }
        if (got.size() != out_shapes.size()) {
          throw Failure{"local shape", at, call.op,
                        "rank " + std::to_string(pid) + " gets " + std::to_string(got.size()) + " outputs, the rule " +
                            std::to_string(out_shapes.size())};
        }
        for (size_t o = 0; o < got.size(); ++o) {
          if (got[o].shape != local_out[o]) {
            throw Failure{"local shape", at, call.op,
                          "output " + std::to_string(o) + " on rank " + std::to_string(pid) + " has local shape " +
                              ShapeText(got[o].shape) + ", the layout " +
                              ToPlacementString(rule.outputs[o], c.mesh.ndim()) + " says " + ShapeText(local_out[o])};
          }
          produced[o].dtype = got[o].dtype;
          produced[o].locals.push_back(std::move(got[o]));
        }
      }
      results.push_back(std::move(produced));
      ++outcome.calls;
    }
    if (graph.input_grads.size() != c.shapes.size()) {
      throw Failure{"graph", -1, "", std::to_string(graph.input_grads.size()) + " input gradients for " +
                                         std::to_string(c.shapes.size()) + " inputs"};
    }
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      const std::string name = "input " + std::to_string(i) + "'s gradient";
      const std::optional<Tensor>& fd = oracle.differences[i];
      if (!graph.input_grads[i]) {
        if (fd) {  // a real input the graph gives no gradient: its loss must not depend on it
          const Tensor zero{fd->shape, std::vector<double>(fd->data.size(), 0.0), DType::kFloat64};
          const std::string diff = Compare(zero, *fd, kDifferenceTolerance, 1, "none (0)", "finite difference");
          if (!diff.empty()) throw Failure{"vs finite differences", -1, "", name + ", " + diff};
        }
        continue;
      }
      const VjpRef ref = *graph.input_grads[i];
      const ShardedTensor& held = resolve(ref, graph.calls.size());
      if (held.global_shape != c.shapes[i]) {
        throw Failure{"graph", -1, "", name + " (" + RefText(ref) + ") has shape " + ShapeText(held.global_shape) +
                                           " for an input of shape " + ShapeText(c.shapes[i])};
      }
      Tensor got;
      std::string error;
      if (!AssembleTensor(held, c.mesh, kShardedRelative, 1e-12, &got, &error)) {
        throw Failure{"replicas", ref.kind == VjpRef::Kind::kCall ? static_cast<int>(ref.index) : -1, "",
                      name + " (" + RefText(ref) + " " + ToPlacementString(held.attr, c.mesh.ndim()) + "): " + error};
      }
      const std::string where = name + " (" + RefText(ref) + ", held " + ToPlacementString(held.attr, c.mesh.ndim()) + ")";
      if (!oracle.vjp[i]) throw Failure{"graph", -1, "", name + ": the unsharded VJP gives none"};
      const Tensor& want = *oracle.vjp[i];
      const double scale = Scale(want);
      std::string diff = Compare(got, want, kShardedRelative, scale, "sharded", "unsharded");
      if (!diff.empty()) throw Failure{"sharded vs unsharded", -1, "", where + ", " + diff};
      if (fd) {
        diff = Compare(got, *fd, kDifferenceTolerance, scale, "sharded", "finite difference");
        if (!diff.empty()) throw Failure{"vs finite differences", -1, "", where + ", " + diff};
      }
    }
    outcome.verdict = GradVerdict::kPassed;
  } catch (const Failure& f) {
    outcome.verdict = GradVerdict::kFailed;
    outcome.what = f.what;
    outcome.call = f.call;
    outcome.call_op = f.call_op;
    outcome.message = f.message;
    if (f.call >= 0) outcome.message = "call " + std::to_string(f.call) + " (" + f.call_op + "): " + f.message;
  }
  return outcome;
}

std::vector<const OpDecl*> GradOps(const std::vector<std::string>& names) {
  std::vector<const OpDecl*> ops;
  for (const OpDecl* op : SelectOps(names)) {
    if (op->vjp) ops.push_back(op);
  }
  return ops;
}

namespace {

// One op's row: `families` draws of (example, sizes, values), each on `layouts` random
// meshes of 1 to 3 axes (at most 8 ranks) with random input and cotangent dist attrs.
GradRow GradRowOf(const OpDecl& op, const GradOptions& options) {
  GradRow row{op.name};
  std::mt19937_64 rng(options.seed ^ std::hash<std::string>()(op.name));
  auto pick = [&](int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(rng); };
  // Sizes 1..7: divisible, uneven and smaller than a mesh axis all occur.
  const std::vector<int64_t> sizes = {1, 2, 3, 4, 5, 6, 7};
  const VjpBuilder vjp = options.vjp ? options.vjp(op) : VjpBuilder();
  std::pair<int64_t, int64_t> smallest{0, 0};  // of the reported failure: ranks, input elements
  for (int64_t f = 0; f < options.families; ++f) {
    const SizePalette palette{{sizes[pick(sizes.size())], sizes[pick(sizes.size())], sizes[pick(sizes.size())]}};
    const std::vector<Example> examples = op.examples(palette);
    if (examples.empty()) continue;
    const Example& example = examples[pick(examples.size())];
    GradCase c;
    c.op = &op;
    c.shapes = example.shapes;
    c.attrs = example.attrs;
    c.seed = rng();
    c.local_reference = options.local_reference;
    c.vjp = vjp;
    GradOracle oracle;
    try {
      oracle = MakeGradOracle(c);
    } catch (const SpmdError&) {  // over the size budget: not checkable here
      row.skipped += options.layouts;
      continue;
    }
    std::vector<ReduceOp> partial_ops;
    std::vector<Shape> out_shapes;
    try {
      const Attrs normalized = op.NormalizeAttrs(example.attrs);
      partial_ops = PartialInputOps(op, example, normalized);
      out_shapes = InferOutputShapes(op, example.shapes, normalized);
    } catch (const SpmdError&) {
      row.skipped += options.layouts;
      continue;
    }
    if (!oracle.applicable) {
      row.skipped += options.layouts;
      continue;
    }
    for (int64_t l = 0; l < options.layouts; ++l) {
      std::vector<int64_t> mesh_shape;
      int64_t ranks = 1;
      const int axes = 1 + static_cast<int>(pick(3));
      for (int a = 0; a < axes; ++a) {
        int64_t s = 1 + pick(4);
        while (ranks * s > 8) --s;
        mesh_shape.push_back(s);
        ranks *= s;
      }
      std::vector<int64_t> ids(static_cast<size_t>(ranks));
      for (int64_t i = 0; i < ranks; ++i) ids[i] = i;
      if (pick(2)) std::shuffle(ids.begin(), ids.end(), rng);
      c.mesh = Mesh(mesh_shape, ids);
      c.inputs.clear();
      for (const Shape& s : c.shapes) c.inputs.push_back(RandomDistAttr(static_cast<int>(s.size()), axes, partial_ops, rng));
      // Cotangents: half the time held as the forward output is (its partial axes as
      // P(sum): a gradient is a sum), else any layout with P(sum) allowed.
      std::vector<DistAttr> like_output;
      try {
        std::vector<TensorArg> args;
        for (size_t i = 0; i < c.shapes.size(); ++i) args.push_back({c.shapes[i], c.inputs[i]});
        const InferResult forward = InferForward(op, c.mesh, args, c.attrs);
        like_output = forward.outputs;
        // Half the time the backward reads the inputs as the forward ran on them (after its
        // reshards), else as they were given.
        if (pick(2)) c.inputs = forward.inputs;
      } catch (const SpmdError&) {
        ++row.skipped;  // the forward rule refuses this layout
        continue;
      }
      c.cotangents.clear();
      for (size_t o = 0; o < out_shapes.size(); ++o) {
        DistAttr g = RandomDistAttr(static_cast<int>(out_shapes[o].size()), axes, {ReduceOp::kSum}, rng);
        if (pick(2)) {
          g = like_output[o];
          for (auto& [axis, reduce] : g.partial) reduce = ReduceOp::kSum;
        }
        c.cotangents.push_back(std::move(g));
      }
      c.shard_seed = rng();
      GradOutcome outcome;
      try {
        outcome = CheckGrad(c, oracle);
      } catch (const SpmdError& e) {  // a generated case the checker cannot take: a bug here
        outcome.verdict = GradVerdict::kFailed;
        outcome.what = "case";
        outcome.message = std::string(ToString(e.type())) + " " + e.field() + ": " + e.what();
      }
      switch (outcome.verdict) {
        case GradVerdict::kNotApplicable: ++row.skipped; break;
        case GradVerdict::kPassed: ++row.cases; ++row.passed; break;
        case GradVerdict::kFailed: {
          ++row.cases;
          ++row.failed;
          // The reported counterexample is the smallest failing case: fewest ranks, then
          // fewest input elements (the first of equals).
          int64_t elements = 0;
          for (const Shape& s : c.shapes) elements += Elements(s, kMaxGradInputElements);
          const std::pair<int64_t, int64_t> size{c.mesh.size(), elements};
          if (row.failure.empty() || size < smallest) {
            smallest = size;
            row.failure = outcome.what + ": " + outcome.message;
            if (options.replay) row.failure += "\n    replay: " + options.replay(c);
          }
          break;
        }
      }
      row.calls += outcome.calls;
      row.reshards += outcome.reshards;
      row.partial_operands += outcome.partial_operands;
    }
  }
  return row;
}

}  // namespace

std::vector<GradRow> RunGradCheck(const GradOptions& options,
                                  const std::function<void(const GradRow&, size_t, size_t)>& progress) {
  const std::vector<const OpDecl*> ops = GradOps(options.ops);
  std::vector<GradRow> rows(ops.size());
  std::atomic<size_t> next{0};
  size_t done = 0;
  std::mutex mutex;
  auto worker = [&]() {
    for (size_t t = next++; t < ops.size(); t = next++) {
      const auto start = std::chrono::steady_clock::now();
      GradRow row = GradRowOf(*ops[t], options);
      row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::lock_guard<std::mutex> lock(mutex);
      rows[t] = std::move(row);
      if (progress) progress(rows[t], ++done, ops.size());
    }
  };
  std::vector<std::thread> threads;
  for (int j = 1; j < std::max(1, options.jobs); ++j) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  return rows;
}

}  // namespace spmd::checker
