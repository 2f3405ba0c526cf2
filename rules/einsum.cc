#include "rules/einsum.h"

#include <array>

#include "rules/error.h"

namespace spmd {
namespace {

constexpr char kBroadcast = '1';

// The merged factor map: letter -> mesh axes, plus the order of first claims.
struct FactorMap {
  std::array<AxisList, 256> axes;
  std::array<bool, 256> claimed{};
  std::string claim_order;

  const AxisList& Of(char letter) const { return axes[static_cast<unsigned char>(letter)]; }
  // Returns false when `letter` already holds another non-empty list.
  bool Claim(char letter, const AxisList& list) {
    auto i = static_cast<unsigned char>(letter);
    if (!claimed[i]) {
      claimed[i] = true;
      axes[i] = list;
      claim_order.push_back(letter);
      return true;
    }
    return axes[i] == list;
  }
  void Clear(char letter) { axes[static_cast<unsigned char>(letter)].clear(); }
};

bool Contains(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// Step 3: a factor whose list holds an axis taken by an earlier factor becomes replicated.
// Returns false (and does nothing more) on the first collision when `strict`.
bool ResolveAxisCollisions(FactorMap& map, int mesh_ndim, bool strict) {
  std::vector<bool> used(mesh_ndim, false);
  for (char letter : map.claim_order) {
    const AxisList& list = map.Of(letter);
    bool collides = false;
    for (int axis : list) collides = collides || used[axis];
    if (collides) {
      if (strict) return false;
      map.Clear(letter);
      continue;
    }
    for (int axis : list) used[axis] = true;
  }
  return true;
}

// Steps 4-5: clear the forced-replicated factors, then read every operand back.
DistAttr ReadBack(const FactorMap& map, const std::string& notation) {
  DistAttr attr;
  attr.dims.resize(notation.size());
  for (size_t d = 0; d < notation.size(); ++d) {
    if (notation[d] != kBroadcast) attr.dims[d] = map.Of(notation[d]);
  }
  return attr;
}

// The partial input axes the op keeps (axis -> reduce op), per operand.
std::vector<PartialMap> AcceptedPartials(const EinsumSpec& spec,
                                         const std::vector<DistAttr>& inputs,
                                         const std::vector<bool>& axis_used) {
  std::vector<PartialMap> kept(inputs.size());
  auto free_axis = [&](int axis) { return !axis_used[axis]; };
  switch (spec.accept) {
    case PartialAcceptance::kNone:
      break;
    case PartialAcceptance::kSumOfAll: {
      if (inputs.empty()) break;
      for (const auto& [axis, op] : inputs[0].partial) {
        if (op != ReduceOp::kSum || !free_axis(axis)) continue;
        bool all = true;
        for (const DistAttr& in : inputs) {
          auto it = in.partial.find(axis);
          all = all && it != in.partial.end() && it->second == ReduceOp::kSum;
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
        for (const auto& [axis, op] : inputs[i].partial) {
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
        for (const auto& [axis, op] : inputs[i].partial) {
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

std::string EinsumSpec::ToString() const {
  // Fresh letters (bytes >= 128, see rules/notation.h) print as '*'.
  auto printable = [](std::string text) {
    for (char& c : text) c = static_cast<unsigned char>(c) >= 128 ? '*' : c;
    return text;
  };
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i) s += (i ? "," : "") + printable(inputs[i]);
  s += "->";
  for (size_t i = 0; i < outputs.size(); ++i) s += (i ? "," : "") + printable(outputs[i]);
  if (!forced_replicated.empty()) s += " R(" + printable(forced_replicated) + ")";
  s += " [" + std::string(spmd::ToString(reduce)) + "]";
  return s;
}

void CheckNotationShapes(const EinsumSpec& spec,
                         const std::vector<std::vector<int64_t>>& shapes) {
  std::array<int64_t, 256> size;
  size.fill(-1);
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const std::string field = "inputs[" + std::to_string(i) + "].shape";
    const std::string& notation = spec.inputs[i];
    if (notation.size() != shapes[i].size()) {
      ThrowInvalid(field, "rank " + std::to_string(shapes[i].size()) + " does not fit '" +
                              notation + "'");
    }
    for (size_t d = 0; d < notation.size(); ++d) {
      const int64_t s = shapes[i][d];
      if (notation[d] == kBroadcast) {
        if (s != 1) ThrowInvalid(field, "dim " + std::to_string(d) + " must have size 1");
        continue;
      }
      int64_t& known = size[static_cast<unsigned char>(notation[d])];
      if (known >= 0 && known != s) {
        ThrowInvalid(field, "dim " + std::to_string(d) + " has size " + std::to_string(s) +
                                " but factor '" + notation[d] + "' has size " +
                                std::to_string(known) + " (" + spec.ToString() + ")");
      }
      known = s;
    }
  }
}

InferResult InferEinsumForward(const EinsumSpec& spec, const Mesh& mesh,
                               const std::vector<DistAttr>& inputs) {
  FactorMap map;
  // Steps 1-2: first claim wins; a different later claim is resharded (D1).
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& notation = spec.inputs[i];
    for (size_t d = 0; d < notation.size(); ++d) {
      if (notation[d] == kBroadcast || inputs[i].dims[d].empty()) continue;
      map.Claim(notation[d], inputs[i].dims[d]);
    }
  }
  ResolveAxisCollisions(map, mesh.ndim(), /*strict=*/false);  // step 3
  for (char letter : spec.forced_replicated) map.Clear(letter);  // step 4

  std::vector<bool> axis_used(mesh.ndim(), false);
  for (char letter : map.claim_order) {
    for (int axis : map.Of(letter)) axis_used[axis] = true;
  }
  std::vector<PartialMap> kept = AcceptedPartials(spec, inputs, axis_used);

  InferResult result;
  result.inputs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    result.inputs.push_back(ReadBack(map, spec.inputs[i]));  // step 5
    result.inputs.back().partial = kept[i];
  }
  PartialMap carried;
  for (const PartialMap& k : kept) carried.insert(k.begin(), k.end());
  result.outputs.reserve(spec.outputs.size());
  for (const std::string& notation : spec.outputs) {
    DistAttr out = ReadBack(map, notation);
    out.partial = carried;
    for (char letter : map.claim_order) {  // step 6: factors absent from this output
      if (Contains(notation, letter)) continue;
      for (int axis : map.Of(letter)) out.partial[axis] = spec.reduce;
    }
    result.outputs.push_back(std::move(out));
  }
  return result;
}

InferResult InferEinsumReverse(const EinsumSpec& spec, const Mesh& mesh,
                               const std::vector<DistAttr>& outputs) {
  FactorMap map;
  for (size_t o = 0; o < outputs.size(); ++o) {
    const std::string& notation = spec.outputs[o];
    for (size_t d = 0; d < notation.size(); ++d) {
      if (notation[d] == kBroadcast || outputs[o].dims[d].empty()) continue;
      if (!map.Claim(notation[d], outputs[o].dims[d])) {
        throw SpmdError(ErrorType::kConflict,
                        "outputs[" + std::to_string(o) + "].dims_mapping[" +
                            std::to_string(d) + "]",
                        std::string("factor '") + notation[d] +
                            "' is sharded by two different mesh axis lists");
      }
    }
  }
  if (!ResolveAxisCollisions(map, mesh.ndim(), /*strict=*/true)) {
    throw SpmdError(ErrorType::kConflict, "outputs",
                    "one mesh axis shards two different factors (" + spec.ToString() + ")");
  }
  for (char letter : spec.forced_replicated) map.Clear(letter);
  InferResult result;
  for (const std::string& notation : spec.inputs) result.inputs.push_back(ReadBack(map, notation));
  for (const std::string& notation : spec.outputs) {
    result.outputs.push_back(ReadBack(map, notation));
  }
  return result;
}

}  // namespace spmd
