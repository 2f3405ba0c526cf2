#include "rules/einsum.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "rules/error.h"

namespace spmd {
namespace {

// The merged factor map: factor -> mesh axes, plus the order of first claims. A claimed
// factor points at the claiming operand's list (the operands outlive the inference), so
// claiming copies nothing; a cleared factor points at an empty list.
struct FactorMap {
  explicit FactorMap(int factors) : axes(factors, nullptr) { claim_order.reserve(factors); }
  std::vector<const AxisList*> axes;  // nullptr: unclaimed
  std::vector<FactorId> claim_order;

  const AxisList& Of(FactorId f) const { return axes[f] != nullptr ? *axes[f] : Empty(); }
  // Returns false when `f` already holds another non-empty list.
  bool Claim(FactorId f, const AxisList& list) {
    if (axes[f] == nullptr) {
      axes[f] = &list;
      claim_order.push_back(f);
      return true;
    }
    return *axes[f] == list;
  }
  void Clear(FactorId f) {
    if (axes[f] != nullptr) axes[f] = &Empty();
  }
  static const AxisList& Empty() {
    static const AxisList kEmpty;
    return kEmpty;
  }
};

// Step 3: a factor whose list holds an axis taken by an earlier factor becomes replicated.
// Returns false (and does nothing more) on the first collision when `strict`.
bool ResolveAxisCollisions(FactorMap& map, int mesh_ndim, bool strict) {
  std::vector<bool> used(mesh_ndim, false);
  for (FactorId f : map.claim_order) {
    const AxisList& list = map.Of(f);
    bool collides = false;
    for (int axis : list) collides = collides || used[axis];
    if (collides) {
      if (strict) return false;
      map.Clear(f);
      continue;
    }
    for (int axis : list) used[axis] = true;
  }
  return true;
}

// Steps 4-5: clear the forced-replicated factors, then read every operand back.
DistAttr ReadBack(const FactorMap& map, const Notation& notation) {
  DistAttr attr;
  attr.dims.resize(notation.size());
  for (size_t d = 0; d < notation.size(); ++d) {
    if (notation[d] != kBroadcastDim) attr.dims[d] = map.Of(notation[d]);
  }
  return attr;
}

// Operand i of a list of dist attrs held by value or by address.
const DistAttr& In(const std::vector<DistAttr>& inputs, size_t i) { return inputs[i]; }
const DistAttr& In(const std::vector<const DistAttr*>& inputs, size_t i) { return *inputs[i]; }

// The partial input axes the op keeps (axis -> reduce op), per operand.
// `inputs` is any list of dist attrs by index (values or addresses; see In below).
template <typename Inputs>
std::vector<PartialMap> AcceptedPartials(const EinsumSpec& spec, const Inputs& inputs,
                                         const std::vector<bool>& axis_used) {
  std::vector<PartialMap> kept(inputs.size());
  auto free_axis = [&](int axis) { return !axis_used[axis]; };
  switch (spec.accept) {
    case PartialAcceptance::kNone:
      break;
    case PartialAcceptance::kSumOfAll: {
      if (inputs.empty()) break;
      for (const auto& [axis, op] : In(inputs, 0).partial) {
        if (op != ReduceOp::kSum || !free_axis(axis)) continue;
        bool all = true;
        for (size_t i = 0; i < inputs.size(); ++i) {
          const PartialMap& partial = In(inputs, i).partial;
          auto it = partial.find(axis);
          all = all && it != partial.end() && it->second == ReduceOp::kSum;
        }
        if (all) {
          for (auto& k : kept) k[axis] = ReduceOp::kSum;
        }
      }
      break;
    }
    case PartialAcceptance::kMultilinear: {
      std::vector<bool> taken(axis_used.size(), false);
      for (size_t i = 0; i < inputs.size(); ++i) {
        for (const auto& [axis, op] : In(inputs, i).partial) {
          if (op != ReduceOp::kSum || !free_axis(axis) || taken[axis]) continue;
          taken[axis] = true;
          kept[i][axis] = op;
        }
      }
      break;
    }
    case PartialAcceptance::kSameOp:
    case PartialAcceptance::kAnyOp:
      for (size_t i = 0; i < inputs.size(); ++i) {
        for (const auto& [axis, op] : In(inputs, i).partial) {
          if (!free_axis(axis)) continue;
          if (spec.accept == PartialAcceptance::kSameOp && op != spec.accepted_op) continue;
          kept[i][axis] = op;
        }
      }
      break;
  }
  return kept;
}

}  // namespace

FactorId EinsumSpec::AddFactor(int64_t size) {
  factor_sizes.push_back(size);
  return static_cast<FactorId>(factor_sizes.size() - 1);
}

bool Contains(const Notation& notation, FactorId id) {
  return std::find(notation.begin(), notation.end(), id) != notation.end();
}

std::string EinsumSpec::FactorName(FactorId id) {
  if (id == kBroadcastDim) return "1";
  if (id >= 0 && id < 26) return std::string(1, static_cast<char>('a' + id));
  return "{f" + std::to_string(id) + "}";
}

std::string EinsumSpec::NotationString(const Notation& notation) {
  std::string s;
  for (FactorId f : notation) s += FactorName(f);
  return s;
}

std::string EinsumSpec::ToString() const {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i) s += (i ? "," : "") + NotationString(inputs[i]);
  s += "->";
  for (size_t i = 0; i < outputs.size(); ++i) s += (i ? "," : "") + NotationString(outputs[i]);
  if (!forced_replicated.empty()) s += " R(" + NotationString(forced_replicated) + ")";
  if (!exchanged.empty()) s += " X(" + NotationString(exchanged) + ")";
  if (!unread_inputs.empty()) {
    s += " U(";
    for (size_t i = 0; i < unread_inputs.size(); ++i) {
      s += (i ? "," : "") + std::to_string(unread_inputs[i]);
    }
    s += ")";
  }
  s += " [" + std::string(spmd::ToString(reduce)) + "]";
  return s;
}

void BindFactorSizes(EinsumSpec& spec, const std::vector<std::vector<int64_t>>& shapes) {
  auto check_id = [&](FactorId f) {
    if (f != kBroadcastDim && (f < 0 || f >= spec.num_factors())) {
      throw std::logic_error("einsum spec " + spec.ToString() + ": factor id " +
                             std::to_string(f) + " is out of range");
    }
  };
  if (shapes.size() != spec.inputs.size()) {
    throw std::logic_error("einsum spec " + spec.ToString() + " has " +
                           std::to_string(spec.inputs.size()) + " inputs for " +
                           std::to_string(shapes.size()) + " shapes");
  }
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    auto field = [i] { return "inputs[" + std::to_string(i) + "].shape"; };  // on failure only
    const Notation& notation = spec.inputs[i];
    if (notation.size() != shapes[i].size()) {
      ThrowInvalid(field(), "rank " + std::to_string(shapes[i].size()) + " does not fit '" +
                              EinsumSpec::NotationString(notation) + "'");
    }
    for (size_t d = 0; d < notation.size(); ++d) {
      const int64_t s = shapes[i][d];
      check_id(notation[d]);
      if (notation[d] == kBroadcastDim) {
        if (s != 1) ThrowInvalid(field(), "dim " + std::to_string(d) + " must have size 1");
        continue;
      }
      int64_t& known = spec.factor_sizes[notation[d]];
      if (known >= 0 && known != s) {
        ThrowInvalid(field(), "dim " + std::to_string(d) + " has size " + std::to_string(s) +
                                " but factor '" + EinsumSpec::FactorName(notation[d]) +
                                "' has size " + std::to_string(known) + " (" + spec.ToString() +
                                ")");
      }
      known = s;
    }
  }
  for (const Notation& notation : spec.outputs) {
    for (FactorId f : notation) {
      check_id(f);
      if (f != kBroadcastDim && spec.factor_sizes[f] < 0) {
        throw std::logic_error("einsum spec " + spec.ToString() + ": output factor '" +
                               EinsumSpec::FactorName(f) + "' has no size");
      }
    }
  }
  for (FactorId f : spec.forced_replicated) check_id(f);
  for (FactorId f : spec.exchanged) check_id(f);
  for (int i : spec.unread_inputs) {
    if (i < 0 || static_cast<size_t>(i) >= spec.inputs.size()) {
      throw std::logic_error("einsum spec " + spec.ToString() + ": unread input " +
                             std::to_string(i) + " is out of range");
    }
    for (FactorId f : spec.inputs[i]) {
      bool shared = Contains(spec.forced_replicated, f) || Contains(spec.exchanged, f);
      for (size_t j = 0; j < spec.inputs.size(); ++j) {
        shared = shared || (static_cast<int>(j) != i && Contains(spec.inputs[j], f));
      }
      for (const Notation& out : spec.outputs) shared = shared || Contains(out, f);
      if (f != kBroadcastDim && shared) {
        throw std::logic_error("einsum spec " + spec.ToString() + ": factor '" +
                               EinsumSpec::FactorName(f) + "' of unread input " +
                               std::to_string(i) + " appears elsewhere");
      }
    }
  }
}

std::vector<std::vector<int64_t>> EinsumOutputShapes(const EinsumSpec& spec) {
  std::vector<std::vector<int64_t>> shapes;
  shapes.reserve(spec.outputs.size());
  for (const Notation& notation : spec.outputs) {
    std::vector<int64_t> shape;
    shape.reserve(notation.size());
    for (FactorId f : notation) shape.push_back(f == kBroadcastDim ? 1 : spec.factor_sizes[f]);
    shapes.push_back(std::move(shape));
  }
  return shapes;
}

namespace {

template <typename Inputs>
InferResult EinsumForward(const EinsumSpec& spec, const Mesh& mesh, const Inputs& inputs) {
  FactorMap map(spec.num_factors());
  std::vector<bool> unread(inputs.size(), false);
  for (int i : spec.unread_inputs) {
    if (i >= 0 && static_cast<size_t>(i) < unread.size()) unread[i] = true;
  }
  // Steps 1-2: first claim wins; a different later claim is resharded (D1).
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (unread[i]) continue;  // claims nothing: required as given below
    const Notation& notation = spec.inputs[i];
    for (size_t d = 0; d < notation.size(); ++d) {
      const AxisList& axes = In(inputs, i).dims[d];
      if (notation[d] == kBroadcastDim || axes.empty()) continue;
      map.Claim(notation[d], axes);
    }
  }
  ResolveAxisCollisions(map, mesh.ndim(), /*strict=*/false);  // step 3
  for (FactorId f : spec.forced_replicated) map.Clear(f);  // step 4

  std::vector<bool> axis_used(mesh.ndim(), false);
  for (FactorId f : map.claim_order) {
    for (int axis : map.Of(f)) axis_used[axis] = true;
  }
  std::vector<PartialMap> kept = AcceptedPartials(spec, inputs, axis_used);

  InferResult result;
  result.inputs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (unread[i]) {
      result.inputs.push_back(In(inputs, i));
      continue;
    }
    result.inputs.push_back(ReadBack(map, spec.inputs[i]));  // step 5
    result.inputs.back().partial = std::move(kept[i]);
  }
  PartialMap carried;
  for (size_t i = 0; i < result.inputs.size(); ++i) {
    if (!unread[i]) carried.insert(result.inputs[i].partial.begin(), result.inputs[i].partial.end());
  }
  result.outputs.reserve(spec.outputs.size());
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    const Notation& notation = spec.outputs[o];
    DistAttr out = ReadBack(map, notation);
    if (Contains(spec.whole_outputs, static_cast<int>(o))) {
      result.outputs.push_back(std::move(out));
      continue;
    }
    out.partial = carried;
    for (FactorId f : map.claim_order) {  // step 6: factors absent from this output
      if (Contains(notation, f) || Contains(spec.exchanged, f)) continue;
      for (int axis : map.Of(f)) out.partial[axis] = spec.reduce;
    }
    result.outputs.push_back(std::move(out));
  }
  return result;
}

}  // namespace

InferResult InferEinsumForward(const EinsumSpec& spec, const Mesh& mesh,
                               const std::vector<DistAttr>& inputs) {
  return EinsumForward(spec, mesh, inputs);
}

InferResult InferEinsumForward(const EinsumSpec& spec, const Mesh& mesh,
                               const std::vector<const DistAttr*>& inputs) {
  return EinsumForward(spec, mesh, inputs);
}

InferResult InferEinsumReverse(const EinsumSpec& spec, const Mesh& mesh,
                               const std::vector<DistAttr>& outputs) {
  FactorMap map(spec.num_factors());
  // A forced-replicated factor's sharding is dropped whatever it is, so it claims nothing
  // and conflicts with nothing (split's pieces are distinct factors of different sizes: an
  // axis on the split dim of several outputs is not a conflict).
  std::vector<bool> forced(spec.num_factors(), false);
  for (FactorId f : spec.forced_replicated) forced[f] = true;
  for (size_t o = 0; o < outputs.size(); ++o) {
    const Notation& notation = spec.outputs[o];
    for (size_t d = 0; d < notation.size(); ++d) {
      if (notation[d] == kBroadcastDim || forced[notation[d]] || outputs[o].dims[d].empty()) {
        continue;
      }
      if (!map.Claim(notation[d], outputs[o].dims[d])) {
        throw SpmdError(ErrorType::kConflict,
                        "outputs[" + std::to_string(o) + "].dims_mapping[" +
                            std::to_string(d) + "]",
                        "factor '" + EinsumSpec::FactorName(notation[d]) +
                            "' is sharded by two different mesh axis lists");
      }
    }
  }
  if (!ResolveAxisCollisions(map, mesh.ndim(), /*strict=*/true)) {
    throw SpmdError(ErrorType::kConflict, "outputs",
                    "one mesh axis shards two different factors (" + spec.ToString() + ")");
  }
  for (FactorId f : spec.forced_replicated) map.Clear(f);
  InferResult result;
  for (const Notation& notation : spec.inputs) result.inputs.push_back(ReadBack(map, notation));
  for (const Notation& notation : spec.outputs) {
    result.outputs.push_back(ReadBack(map, notation));
  }
  return result;
}

}  // namespace spmd
