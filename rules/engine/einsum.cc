#include "rules/engine/einsum.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "rules/model/error.h"
#include "rules/reshard/reshard_bytes.h"

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

// Operand i of a list of dist attrs held by value or by address.
const DistAttr& In(const std::vector<DistAttr>& inputs, size_t i) { return inputs[i]; }
const DistAttr& In(const std::vector<const DistAttr*>& inputs, size_t i) { return *inputs[i]; }

// The partial input axes the op keeps (axis -> reduce op), per operand.
// `inputs` is any list of dist attrs by index (values or addresses; see In below).
template <typename Inputs>
// `numels` holds each input's element count (empty when the sizes are unknown).
std::vector<PartialMap> AcceptedPartials(const EinsumSpec& spec, const Inputs& inputs,
                                         const std::vector<bool>& axis_used,
                                         const std::vector<int64_t>& numels) {
  std::vector<PartialMap> kept(inputs.size());
  auto free_axis = [&](int axis) { return !axis_used[axis]; };
  switch (spec.accept) {
    case PartialAcceptance::kNone:
      break;
    case PartialAcceptance::kSumOfAll: {
      // Axis a stays partial(sum) on every linear input when one is partial(sum) there and
      // none is partial with another op: the others are replicated on a and take it as
      // partial(sum) (R -> P, a local step: one rank keeps its value, the others zeros),
      // as DTensor does for add. Inputs outside spec.linear_inputs (where's condition)
      // never keep a partial.
      std::vector<bool> linear(inputs.size(), spec.linear_inputs.empty());
      for (int i : spec.linear_inputs) {
        if (i >= 0 && static_cast<size_t>(i) < linear.size()) linear[i] = true;
      }
      for (int axis = 0; axis < static_cast<int>(axis_used.size()); ++axis) {
        if (!free_axis(axis)) continue;
        bool some = false, others_ok = true;
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (!linear[i]) continue;
          const PartialMap& partial = In(inputs, i).partial;
          auto it = partial.find(axis);
          if (it == partial.end()) continue;
          some = some || it->second == ReduceOp::kSum;
          others_ok = others_ok && it->second == ReduceOp::kSum;
        }
        if (!some || !others_ok) continue;
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (linear[i]) kept[i][axis] = ReduceOp::kSum;
        }
      }
      break;
    }
    case PartialAcceptance::kLinearFirst:
      // Linear in input 0 only (divide's numerator): its partial(sum) stays; every other
      // input's partial is reduced.
      if (inputs.empty()) break;
      for (const auto& [axis, op] : In(inputs, 0).partial) {
        if (op == ReduceOp::kSum && free_axis(axis)) kept[0][axis] = op;
      }
      break;
    case PartialAcceptance::kMultilinear: {
      // One operand per axis keeps its partial(sum): the largest (the others, reduced,
      // move fewer bytes; ties: the first).
      std::vector<int> keeper(axis_used.size(), -1);
      for (size_t i = 0; i < inputs.size(); ++i) {
        for (const auto& [axis, op] : In(inputs, i).partial) {
          if (op != ReduceOp::kSum || !free_axis(axis)) continue;
          int& k = keeper[axis];
          if (k < 0 || (!numels.empty() && numels[i] > numels[k])) k = static_cast<int>(i);
        }
      }
      for (size_t axis = 0; axis < keeper.size(); ++axis) {
        if (keeper[axis] >= 0) kept[keeper[axis]][static_cast<int>(axis)] = ReduceOp::kSum;
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
  if (!data_dependent.empty()) s += " D(" + NotationString(data_dependent) + ")";
  if (!exchanged.empty()) s += " X(" + NotationString(exchanged) + ")";
  if (!tied.empty()) {  // T(g=h): g follows h
    s += " T(";
    for (size_t i = 0; i < tied.size(); ++i) {
      s += (i ? "," : "") + FactorName(tied[i].first) + "=" + FactorName(tied[i].second);
    }
    s += ")";
  }
  if (!unread_inputs.empty()) {
    s += " U(";
    for (size_t i = 0; i < unread_inputs.size(); ++i) {
      s += (i ? "," : "") + std::to_string(unread_inputs[i]);
    }
    s += ")";
  }
  if (!accumulated.empty()) {  // A(2>0): input 2 is added into output 0
    s += " A(";
    for (size_t i = 0; i < accumulated.size(); ++i) {
      s += (i ? "," : "") + std::to_string(accumulated[i].first) + ">" + std::to_string(accumulated[i].second);
    }
    s += ")";
  }
  if (!output_reads.empty()) {  // O(0:0,1;1:1): output 0 reads inputs 0 and 1, output 1 input 1
    s += " O(";
    for (size_t o = 0; o < output_reads.size(); ++o) {
      s += (o ? ";" : "") + std::to_string(o) + ":";
      for (size_t i = 0; i < output_reads[o].size(); ++i) {
        s += (i ? "," : "") + std::to_string(output_reads[o][i]);
      }
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
  for (FactorId f : spec.data_dependent) {
    check_id(f);
    const auto bug = [&](const std::string& why) {
      throw std::logic_error("einsum spec " + spec.ToString() + ": data-dependent factor '" +
                             EinsumSpec::FactorName(f) + "' " + why);
    };
    if (f == kBroadcastDim) bug("is a broadcast dim");
    for (const Notation& notation : spec.inputs) {
      if (Contains(notation, f)) bug("appears in an input (its size would be known before the run)");
    }
    if (spec.factor_sizes[f] != EinsumSpec::kDataDependentSize) bug("has a size");
    if (!Contains(spec.forced_replicated, f)) bug("is not forced replicated (it would be sharded)");
    if (Contains(spec.exchanged, f)) bug("is exchanged");
    for (const auto& [follower, leader] : spec.tied) {
      if (follower == f || leader == f) bug("is tied");
    }
    for (size_t o = 0; o < spec.outputs.size(); ++o) {
      if (!Contains(spec.outputs[o], f)) continue;
      // An output holding it is never partial: every input factor it lacks is whole, no
      // partial input is kept, nothing is accumulated into it.
      if (spec.accept != PartialAcceptance::kNone) bug("is in output " + std::to_string(o) + ", which a kept partial input would make partial");
      for (const auto& [i, out] : spec.accumulated) {
        if (out == static_cast<int>(o)) bug("is in output " + std::to_string(o) + ", which accumulates an input");
      }
      for (const Notation& notation : spec.inputs) {
        for (FactorId g : notation) {
          if (g != kBroadcastDim && !Contains(spec.outputs[o], g) && !Contains(spec.forced_replicated, g)) {
            bug("is in output " + std::to_string(o) + ", which a sharded factor '" + EinsumSpec::FactorName(g) +
                "' missing from it would make partial");
          }
        }
      }
    }
  }
  for (const Notation& notation : spec.outputs) {
    for (FactorId f : notation) {
      check_id(f);
      if (f != kBroadcastDim && spec.factor_sizes[f] < 0 && !Contains(spec.data_dependent, f)) {
        throw std::logic_error("einsum spec " + spec.ToString() + ": output factor '" +
                               EinsumSpec::FactorName(f) + "' has no size");
      }
    }
  }
  for (FactorId f : spec.forced_replicated) check_id(f);
  for (FactorId f : spec.exchanged) check_id(f);
  for (const auto& [follower, leader] : spec.tied) {
    check_id(follower);
    check_id(leader);
    if (follower == kBroadcastDim || leader == kBroadcastDim || follower == leader) {
      throw std::logic_error("einsum spec " + spec.ToString() + ": a bad tied pair");
    }
  }
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
  const auto num_inputs = static_cast<int>(spec.inputs.size());
  const auto num_outputs = static_cast<int>(spec.outputs.size());
  if (!spec.output_reads.empty() && spec.output_reads.size() != spec.outputs.size()) {
    throw std::logic_error("einsum spec " + spec.ToString() + ": output_reads needs one list per output");
  }
  for (const std::vector<int>& reads : spec.output_reads) {
    for (int i : reads) {
      if (i < 0 || i >= num_inputs) {
        throw std::logic_error("einsum spec " + spec.ToString() + ": read input " + std::to_string(i) +
                               " is out of range");
      }
    }
  }
  for (const auto& [i, o] : spec.accumulated) {
    if (i < 0 || i >= num_inputs || o < 0 || o >= num_outputs || Contains(spec.whole_outputs, o) ||
        Contains(spec.unread_inputs, i)) {
      throw std::logic_error("einsum spec " + spec.ToString() + ": a bad accumulated pair");
    }
    if (!spec.output_reads.empty() && !Contains(spec.output_reads[o], i)) {
      throw std::logic_error("einsum spec " + spec.ToString() + ": output " + std::to_string(o) +
                             " does not read its accumulated input " + std::to_string(i));
    }
    for (FactorId f : spec.inputs[i]) {
      if (f != kBroadcastDim && !Contains(spec.outputs[o], f)) {
        throw std::logic_error("einsum spec " + spec.ToString() + ": factor '" + EinsumSpec::FactorName(f) +
                               "' of accumulated input " + std::to_string(i) + " is not in output " +
                               std::to_string(o));
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

// What every step of one forward inference shares: the spec, the mesh, the canonical id of
// every factor (a tied follower's is its leader's) and which factors are forced replicated.
struct Context {
  const EinsumSpec& spec;
  const Mesh& mesh;
  std::vector<FactorId> canon;
  std::vector<bool> forced;     // by canonical id
  std::vector<bool> exchanged;  // by canonical id
  std::vector<bool> unread;     // by input
  bool sized = true;            // every factor's size is known (the spec is bound)

  Context(const EinsumSpec& s, const Mesh& m, size_t num_inputs)
      : spec(s), mesh(m), canon(s.num_factors()), forced(s.num_factors(), false),
        exchanged(s.num_factors(), false), unread(num_inputs, false) {
    for (FactorId f = 0; f < s.num_factors(); ++f) canon[f] = f;
    for (const auto& [follower, leader] : s.tied) canon[follower] = leader;
    for (FactorId f : s.forced_replicated) forced[canon[f]] = true;
    for (FactorId f : s.exchanged) exchanged[canon[f]] = true;
    for (int i : s.unread_inputs) {
      if (i >= 0 && static_cast<size_t>(i) < num_inputs) unread[i] = true;
    }
    // A data-dependent factor is in outputs only; the pricing reads input sizes.
    for (FactorId f = 0; f < s.num_factors(); ++f) {
      sized = sized && (s.factor_sizes[f] >= 0 || Contains(s.data_dependent, f));
    }
    if (!sized) return;
    shapes.resize(num_inputs);
    numels.assign(num_inputs, 1);
    for (size_t i = 0; i < num_inputs && i < s.inputs.size(); ++i) {
      for (FactorId f : s.inputs[i]) {
        const int64_t size = f == kBroadcastDim ? 1 : s.factor_sizes[f];
        shapes[i].push_back(size);
        numels[i] *= size;  // at most 2^62 (checked shapes)
      }
    }
  }
  std::vector<std::vector<int64_t>> shapes;  // per input, when sized
  std::vector<int64_t> numels;               // per input, when sized
  FactorId Canon(FactorId f) const { return f == kBroadcastDim ? f : canon[f]; }
  // Whether `notation` holds canonical factor `f` (directly or through a follower).
  bool Has(const Notation& notation, FactorId f) const {
    for (FactorId g : notation) {
      if (Canon(g) == f) return true;
    }
    return false;
  }
  // Whether output `o` reads input `i` (EinsumSpec::output_reads; every input when empty).
  bool Reads(size_t o, size_t i) const {
    return spec.output_reads.empty() || Contains(spec.output_reads[o], static_cast<int>(i));
  }
  int64_t AxesProduct(const AxisList& list) const {
    int64_t p = 1;
    for (int axis : list) p *= mesh.axis_size(axis);
    return p;
  }
  const std::vector<int64_t>& InputShape(size_t i) const { return shapes[i]; }
};

DistAttr ReadBackCanon(const Context& cx, const FactorMap& map, const Notation& notation) {
  DistAttr attr;
  attr.dims.resize(notation.size());
  for (size_t d = 0; d < notation.size(); ++d) {
    if (notation[d] != kBroadcastDim) attr.dims[d] = map.Of(cx.Canon(notation[d]));
  }
  return attr;
}

// Steps 4-6 on one choice of claims (`map`): tied factors, the partial inputs the op keeps,
// the reduce-scatter of the other partial inputs onto a free factor, then the read-back.
template <typename Inputs>
InferResult Finish(const Context& cx, const Inputs& inputs, FactorMap map) {
  const EinsumSpec& spec = cx.spec;
  const Mesh& mesh = cx.mesh;
  // A leader keeps its list only when the list's size divides both tied sizes.
  for (const auto& [follower, leader] : spec.tied) {
    const int64_t p = cx.AxesProduct(map.Of(leader));
    if (p > 1 && (!cx.sized || spec.factor_sizes[leader] % p != 0 ||
                  spec.factor_sizes[follower] % p != 0)) {
      map.Clear(leader);
    }
  }
  std::vector<bool> axis_used(mesh.ndim(), false);
  for (FactorId f : map.claim_order) {
    for (int axis : map.Of(f)) axis_used[axis] = true;
  }
  const std::vector<int64_t>& numels = cx.numels;  // empty when not sized
  std::vector<PartialMap> kept = AcceptedPartials(spec, inputs, axis_used, numels);

  // Step 4b: a partial axis of an input that the op does not keep, that no factor uses and
  // that no input keeps, goes to a factor neither forced replicated nor exchanged nor tied,
  // in every output but the whole ones, whose shard (its size over the axes that already
  // shard it) is at least as large as the axis: after those axes, as the minor one. The
  // inputs partial there are reduce-scattered onto it ((n-1)/n of an all-reduce's
  // 2(n-1)/n, within each shard where the factor is already sharded), the others slice it
  // (no bytes), and the outputs come out sharded on it. The factor chosen is the one the
  // most partial elements reach (ties: the one whose largest new piece is the smallest part
  // of its shard, ceil(L / n) / L for a shard of L, so the even splits first; then one no
  // axis of size above 1 shards yet; then the lowest id).
  std::vector<AxisList> owned;
  owned.reserve(mesh.ndim());  // the map points into it: no reallocation
  if (cx.sized) {
    std::vector<bool> is_tied(spec.num_factors(), false);
    for (const auto& [follower, leader] : spec.tied) is_tied[follower] = is_tied[leader] = true;
    for (int a = 0; a < mesh.ndim(); ++a) {
      const int64_t n = mesh.axis_size(a);
      bool skip = axis_used[a] || n == 1;
      for (const PartialMap& k : kept) skip = skip || k.count(a) > 0;
      if (skip) continue;
      FactorId best = -1;
      int64_t best_gain = 0;
      int64_t best_piece = 1, best_shard = 1;  // the best's ceil(L / n) and L
      bool best_free = false;
      for (FactorId f = 0; f < spec.num_factors(); ++f) {
        // A factor sharded only on size-1 axes holds its whole dim: it is free, and takes
        // `a` after them. One sharded already takes `a` as a minor axis within its shards.
        const int64_t parts = cx.AxesProduct(map.Of(f));
        if (cx.canon[f] != f || cx.forced[f] || cx.exchanged[f] || is_tied[f] ||
            (spec.factor_sizes[f] + parts - 1) / parts < n) {
          continue;
        }
        bool everywhere = true;  // whole outputs (attrs alone make them) take no partial
        for (size_t o = 0; o < spec.outputs.size(); ++o) {
          if (Contains(spec.whole_outputs, static_cast<int>(o))) continue;
          everywhere = everywhere && cx.Has(spec.outputs[o], f);
        }
        if (!everywhere) continue;
        int64_t gain = 0;
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (cx.unread[i] || In(inputs, i).partial.count(a) == 0 || !cx.Has(spec.inputs[i], f)) continue;
          if (__builtin_add_overflow(gain, numels[i], &gain)) gain = INT64_MAX;
        }
        const int64_t shard = (spec.factor_sizes[f] + parts - 1) / parts;
        const int64_t piece = (shard + n - 1) / n;
        const bool free = parts == 1;
        // piece / shard against the best's, crosswise (both at most 2^62 / 2: no overflow
        // in practice; saturated if it did).
        int64_t lhs = 0, rhs = 0;
        if (__builtin_mul_overflow(piece, best_shard, &lhs)) lhs = INT64_MAX;
        if (__builtin_mul_overflow(best_piece, shard, &rhs)) rhs = INT64_MAX;
        if (gain > best_gain ||
            (gain == best_gain && gain > 0 && (lhs != rhs ? lhs < rhs : free && !best_free))) {
          best = f;
          best_gain = gain;
          best_piece = piece;
          best_shard = shard;
          best_free = free;
        }
      }
      if (best < 0) continue;
      AxisList list = map.Of(best);
      list.push_back(a);
      owned.push_back(std::move(list));
      if (map.axes[best] == nullptr) map.claim_order.push_back(best);
      map.axes[best] = &owned.back();
      axis_used[a] = true;
    }
  }

  InferResult result;
  result.inputs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (cx.unread[i]) {
      result.inputs.push_back(In(inputs, i));
      continue;
    }
    result.inputs.push_back(ReadBackCanon(cx, map, spec.inputs[i]));  // step 5
    result.inputs.back().partial = std::move(kept[i]);
  }
  result.outputs.reserve(spec.outputs.size());
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    const Notation& notation = spec.outputs[o];
    DistAttr out = ReadBackCanon(cx, map, notation);
    if (Contains(spec.whole_outputs, static_cast<int>(o))) {
      result.outputs.push_back(std::move(out));
      continue;
    }
    for (size_t i = 0; i < result.inputs.size(); ++i) {  // the kept partials of the inputs it reads
      const PartialMap& kept_i = result.inputs[i].partial;
      if (!cx.unread[i] && cx.Reads(o, i)) out.partial.insert(kept_i.begin(), kept_i.end());
    }
    for (FactorId f : map.claim_order) {  // step 6: factors absent from this output
      if (cx.Has(notation, f) || cx.exchanged[f]) continue;
      bool read = false;  // summed over only when an input the output reads holds it
      for (size_t i = 0; i < spec.inputs.size() && !read; ++i) read = cx.Reads(o, i) && cx.Has(spec.inputs[i], f);
      if (!read) continue;
      for (int axis : map.Of(f)) out.partial[axis] = spec.reduce;
    }
    result.outputs.push_back(std::move(out));
  }
  // Accumulated inputs take their output's partial map: each addend of it carries the input once.
  for (const auto& [i, o] : spec.accumulated) result.inputs[i].partial = result.outputs[o].partial;
  return result;
}

// The price of a rule answer: the bytes per rank, summed over the read inputs, that
// reshard each given input to the layout the answer requires (float32), as the planner's
// lower bound gives them (ReshardLowerBound: exact for gathers and all-to-alls; the
// planner's own search takes milliseconds, too slow for a rule the sweep answers millions
// of times).
// The bounds already computed, per input: (given, required) -> bytes, or kUnpriceable
// where the planner refuses the pair. Choices often require the same layout, so one
// inference keeps its own; a prepared inference (PreparedEinsumForward) keeps them for
// every inference it answers (its mesh and input shapes are fixed, and the bound is a
// function of the mesh, the shape and the two dist attrs alone).
class BoundMemo {
 public:
  static constexpr int64_t kUnpriceable = -1;

  int64_t Get(const Context& cx, size_t i, const DistAttr& given, const DistAttr& required) {
    if (i >= per_input_.size()) per_input_.resize(i + 1);
    key_.clear();
    AppendKey(key_, given);
    AppendKey(key_, required);
    auto& known = per_input_[i];
    if (auto it = known.find(key_); it != known.end()) return it->second;
    const int64_t bytes = Compute(cx, i, given, required);
    known.emplace(key_, bytes);
    return bytes;
  }

 private:
  // AppendKey: distinct pairs get distinct keys.
  static int64_t Compute(const Context& cx, size_t i, const DistAttr& given, const DistAttr& required) {
    try {
      if (!given.partial.empty() && given.partial == required.partial) {
        // Partial to partial has no derived bound (0): with the same partial map kept,
        // each addend moves its dims as a whole tensor would, so that move is the price.
        DistAttr from = given, to = required;
        from.partial.clear();
        to.partial.clear();
        return ReshardLowerBound(cx.mesh, from, cx.mesh, to, cx.InputShape(i), DType::kFloat32);
      }
      return ReshardLowerBound(cx.mesh, given, cx.mesh, required, cx.InputShape(i), DType::kFloat32);
    } catch (const SpmdError&) {
      return kUnpriceable;  // a partial map the planner refuses
    }
  }

  std::vector<std::unordered_map<std::string, int64_t>> per_input_;
  std::string key_;  // the key being looked up (kept: no allocation per lookup)
};

// Price stops adding once it reaches `limit` (the best price so far: a choice that reaches
// it cannot replace the best, so its remaining inputs need no pricing). -1: not priceable
// (no comparison).
template <typename Inputs>
int64_t Price(const Context& cx, const Inputs& inputs, const InferResult& answer, BoundMemo& memo,
              int64_t limit = std::numeric_limits<int64_t>::max()) {
  int64_t bytes = 0;
  for (size_t i = 0; i < inputs.size() && bytes < limit; ++i) {
    if (cx.unread[i]) continue;
    const DistAttr& required = answer.inputs[i];
    if (required == In(inputs, i)) continue;  // nothing moves
    const int64_t b = memo.Get(cx, i, In(inputs, i), required);
    if (b == BoundMemo::kUnpriceable) return -1;
    bytes = SaturatingAdd(bytes, b);
  }
  return bytes;
}

// At most this many choices of claims are priced; beyond it the first-claim choice stands.
constexpr int kMaxPricedChoices = 64;

// Steps 1-3: the claims, and among contested ones the cheapest choice. Returns the answer
// and the factor map it was read from.
template <typename Inputs>
std::pair<InferResult, FactorMap> ChooseClaims(const Context& cx, const Inputs& inputs, BoundMemo& memo) {
  const EinsumSpec& spec = cx.spec;
  const Mesh& mesh = cx.mesh;
  // Steps 1-2: the claims. A forced-replicated factor claims nothing (it ends replicated,
  // so it must not keep an axis from a factor that can use it); a claim whose axes all have
  // size 1 (a sharding that holds the whole dim) comes after every other claim. Each
  // factor collects its distinct claimed lists in claim order.
  std::vector<std::vector<const AxisList*>> options(spec.num_factors());
  std::vector<FactorId> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (cx.unread[i]) continue;  // claims nothing: required as given
      const Notation& notation = spec.inputs[i];
      for (size_t d = 0; d < notation.size(); ++d) {
        const AxisList& axes = In(inputs, i).dims[d];
        if (notation[d] == kBroadcastDim || axes.empty()) continue;
        const FactorId f = cx.canon[notation[d]];
        if (cx.forced[f] || (cx.AxesProduct(axes) == 1) != (pass == 1)) continue;
        auto& lists = options[f];
        if (lists.empty()) order.push_back(f);
        bool seen = false;
        for (const AxisList* list : lists) seen = seen || *list == axes;
        if (!seen) lists.push_back(&axes);
      }
    }
  }
  // The first-claim choice (D1, step 3): each factor its first list, a factor whose list
  // holds an axis an earlier factor took replicated.
  FactorMap first(spec.num_factors());
  bool contested = false;
  for (FactorId f : order) {
    first.Claim(f, *options[f].front());
    contested = contested || options[f].size() > 1;
  }
  // A claim on an axis where an input is partial contests that partial: an op that keeps
  // partials may move fewer bytes leaving the axis to the partial (its factor replicated).
  std::vector<bool> partial_axis(mesh.ndim(), false);
  if (spec.accept != PartialAcceptance::kNone) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (cx.unread[i]) continue;
      for (const auto& [axis, op] : In(inputs, i).partial) partial_axis[axis] = true;
    }
  }
  auto touches_partial = [&](const AxisList& list) {
    for (int axis : list) {
      if (partial_axis[axis]) return true;
    }
    return false;
  };
  for (FactorId f : order) {
    for (const AxisList* list : options[f]) contested = contested || touches_partial(*list);
  }
  {
    std::vector<bool> used(mesh.ndim(), false);
    for (FactorId f : first.claim_order) {
      const AxisList& list = first.Of(f);
      bool collides = false;
      for (int axis : list) collides = collides || used[axis];
      if (collides) {
        first.Clear(f);
        contested = true;
        continue;
      }
      for (int axis : list) used[axis] = true;
    }
  }
  InferResult best = Finish(cx, inputs, first);
  FactorMap best_map = first;
  if (!contested || !cx.sized) return {std::move(best), std::move(best_map)};

  // Contested axes and factors: every choice (per contested factor one of its lists, or
  // none; no mesh axis twice) is priced, and the cheapest wins; the first-claim choice wins
  // ties. A factor whose lists touch no other factor's axes and that has one list keeps it.
  std::vector<bool> contested_factor(spec.num_factors(), false);
  for (FactorId f : order) {
    if (options[f].size() > 1) contested_factor[f] = true;
    for (const AxisList* list : options[f]) {
      if (touches_partial(*list)) contested_factor[f] = true;
    }
    for (FactorId g : order) {
      if (g == f) continue;
      for (const AxisList* a : options[f]) {
        for (const AxisList* b : options[g]) {
          for (int axis : *a) {
            if (std::find(b->begin(), b->end(), axis) != b->end()) contested_factor[f] = true;
          }
        }
      }
    }
  }
  int64_t choices = 1;
  for (FactorId f : order) {
    if (contested_factor[f]) choices *= static_cast<int64_t>(options[f].size()) + 1;
    if (choices > kMaxPricedChoices) return {std::move(best), std::move(best_map)};
  }
  int64_t best_price = Price(cx, inputs, best, memo);
  if (best_price <= 0) return {std::move(best), std::move(best_map)};  // unpriceable, or nothing moves: nothing is cheaper
  std::vector<int> pick(order.size(), 0);  // per factor of `order`: 0 none, k list k-1
  std::vector<int> axis_count(mesh.ndim(), 0);
  // Depth-first over the factors of `order`.
  std::function<void(size_t)> walk = [&](size_t k) {
    if (k == order.size()) {
      // Only maximal choices: a factor left without a list none of whose lists would fit
      // (leaving an axis idle never saves a byte of the inputs'), unless the list holds a
      // partial axis (left to the partial input, which then keeps it).
      for (size_t j = 0; j < order.size(); ++j) {
        if (pick[j] != 0) continue;
        for (const AxisList* list : options[order[j]]) {
          bool fits = !touches_partial(*list);
          for (int axis : *list) fits = fits && axis_count[axis] == 0;
          if (fits) return;
        }
      }
      FactorMap map(spec.num_factors());
      for (size_t j = 0; j < order.size(); ++j) {
        if (pick[j] > 0) map.Claim(order[j], *options[order[j]][pick[j] - 1]);
      }
      InferResult answer = Finish(cx, inputs, map);
      const int64_t price = Price(cx, inputs, answer, memo, best_price);
      if (price >= 0 && price < best_price) {
        best_price = price;
        best = std::move(answer);
        best_map = map;
      }
      return;
    }
    const FactorId f = order[k];
    const int count = static_cast<int>(options[f].size());
    for (int choice = contested_factor[f] ? 0 : 1; choice <= count; ++choice) {
      const AxisList* list = choice > 0 ? options[f][choice - 1] : nullptr;
      bool fits = true;
      if (list != nullptr) {
        for (int axis : *list) fits = fits && axis_count[axis] == 0;
      }
      if (!fits) continue;
      if (list != nullptr) {
        for (int axis : *list) ++axis_count[axis];
      }
      pick[k] = choice;
      walk(k + 1);
      if (list != nullptr) {
        for (int axis : *list) --axis_count[axis];
      }
    }
  };
  walk(0);
  return {std::move(best), std::move(best_map)};
}

// Step 3b: a mesh axis of size above 1 that the answer leaves idle (its factor is forced
// replicated or lost a contest, or no input uses it: slicing onto it can make another
// input's move cheaper) is offered to each free factor (not forced,
// exchanged or tied, on no axis of size above 1, at least the axis's size, in a read input
// and in every output but the whole ones, so no output turns partial); the
// cheapest answer by the planner's bound wins, the current one on ties. Axes in mesh order; at most 64 candidates.
template <typename Inputs>
InferResult GiveIdleAxes(const Context& cx, const Inputs& inputs, InferResult best, FactorMap map,
                         BoundMemo& memo) {
  const EinsumSpec& spec = cx.spec;
  const Mesh& mesh = cx.mesh;
  std::vector<bool> used(mesh.ndim(), false);
  auto mark = [&](const DistAttr& attr, std::vector<bool>& marks) {
    for (const AxisList& list : attr.dims) {
      for (int axis : list) marks[axis] = true;
    }
  };
  for (const DistAttr& attr : best.inputs) mark(attr, used);
  for (const DistAttr& attr : best.outputs) {
    mark(attr, used);
    for (const auto& [axis, op] : attr.partial) used[axis] = true;
  }
  for (const DistAttr& attr : best.inputs) {
    for (const auto& [axis, op] : attr.partial) used[axis] = true;
  }
  std::vector<int> idle;
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (!used[a] && mesh.axis_size(a) > 1) idle.push_back(a);
  }
  if (idle.empty()) return best;
  int64_t best_price = Price(cx, inputs, best, memo);
  if (best_price <= 0) return best;  // unpriceable, or nothing moves
  std::vector<bool> is_tied(spec.num_factors(), false);
  for (const auto& [follower, leader] : spec.tied) is_tied[follower] = is_tied[leader] = true;
  std::deque<AxisList> owned;  // the maps point into it
  int budget = kMaxPricedChoices;  // candidates priced at most (specs of hundreds of factors)
  for (int a : idle) {
    const int64_t n = mesh.axis_size(a);
    FactorMap chosen = map;
    for (FactorId f = 0; f < spec.num_factors(); ++f) {
      if (cx.canon[f] != f || cx.forced[f] || cx.exchanged[f] || is_tied[f] ||
          cx.AxesProduct(map.Of(f)) != 1 || spec.factor_sizes[f] < n) {
        continue;
      }
      bool everywhere = true, read = false;
      for (size_t o = 0; o < spec.outputs.size(); ++o) {
        if (Contains(spec.whole_outputs, static_cast<int>(o))) continue;
        everywhere = everywhere && cx.Has(spec.outputs[o], f);
      }
      for (size_t i = 0; i < inputs.size(); ++i) read = read || (!cx.unread[i] && cx.Has(spec.inputs[i], f));
      if (!everywhere || !read) continue;
      if (budget-- <= 0) return best;
      AxisList list = map.Of(f);
      list.push_back(a);
      owned.push_back(std::move(list));
      FactorMap candidate = map;
      if (candidate.axes[f] == nullptr) candidate.claim_order.push_back(f);
      candidate.axes[f] = &owned.back();
      InferResult answer = Finish(cx, inputs, candidate);
      const int64_t price = Price(cx, inputs, answer, memo, best_price);
      if (price >= 0 && price < best_price) {
        best_price = price;
        best = std::move(answer);
        chosen = std::move(candidate);
      }
    }
    map = std::move(chosen);
  }
  return best;
}

template <typename Inputs>
InferResult EinsumForward(const Context& cx, const Inputs& inputs, BoundMemo& memo) {
  auto [best, map] = ChooseClaims(cx, inputs, memo);
  if (!cx.sized) return std::move(best);
  return GiveIdleAxes(cx, inputs, std::move(best), std::move(map), memo);
}

template <typename Inputs>
InferResult EinsumForward(const EinsumSpec& spec, const Mesh& mesh, const Inputs& inputs) {
  const Context cx(spec, mesh, inputs.size());
  BoundMemo memo;
  return EinsumForward(cx, inputs, memo);
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

// The spec and mesh are held here, and the context refers to them (the state is not moved:
// the plan holds it by pointer).
struct PreparedEinsumForward::State {
  State(EinsumSpec s, Mesh m, size_t n) : spec(std::move(s)), mesh(std::move(m)), num_inputs(n), cx(spec, mesh, n) {}
  const EinsumSpec spec;
  const Mesh mesh;
  const size_t num_inputs;
  const Context cx;
  BoundMemo memo;
};

PreparedEinsumForward::PreparedEinsumForward(EinsumSpec spec, Mesh mesh, size_t num_inputs)
    : state_(std::make_unique<State>(std::move(spec), std::move(mesh), num_inputs)) {}
PreparedEinsumForward::~PreparedEinsumForward() = default;
PreparedEinsumForward::PreparedEinsumForward(PreparedEinsumForward&&) noexcept = default;
PreparedEinsumForward& PreparedEinsumForward::operator=(PreparedEinsumForward&&) noexcept = default;

const EinsumSpec& PreparedEinsumForward::spec() const { return state_->spec; }

InferResult PreparedEinsumForward::Infer(const std::vector<const DistAttr*>& inputs) {
  // The context is sized for the prepared number of inputs; another count is answered as
  // InferEinsumForward answers it.
  if (inputs.size() != state_->num_inputs) return EinsumForward(state_->spec, state_->mesh, inputs);
  return EinsumForward(state_->cx, inputs, state_->memo);
}

InferResult InferEinsumReverse(const EinsumSpec& spec, const Mesh& mesh,
                               const std::vector<DistAttr>& outputs) {
  const Context cx(spec, mesh, spec.inputs.size());
  FactorMap map(spec.num_factors());
  // A forced-replicated factor's sharding is dropped whatever it is, so it claims nothing
  // and conflicts with nothing (split's pieces are distinct factors of different sizes: an
  // axis on the split dim of several outputs is not a conflict).
  for (size_t o = 0; o < outputs.size(); ++o) {
    const Notation& notation = spec.outputs[o];
    for (size_t d = 0; d < notation.size(); ++d) {
      if (notation[d] == kBroadcastDim || cx.forced[cx.canon[notation[d]]] ||
          outputs[o].dims[d].empty()) {
        continue;
      }
      if (!map.Claim(cx.canon[notation[d]], outputs[o].dims[d])) {
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
  for (const auto& [follower, leader] : spec.tied) {
    const int64_t p = cx.AxesProduct(map.Of(leader));
    if (p > 1 && (!cx.sized || spec.factor_sizes[leader] % p != 0 ||
                  spec.factor_sizes[follower] % p != 0)) {
      map.Clear(leader);
    }
  }
  InferResult result;
  for (const Notation& notation : spec.inputs) result.inputs.push_back(ReadBackCanon(cx, map, notation));
  for (const Notation& notation : spec.outputs) {
    result.outputs.push_back(ReadBackCanon(cx, map, notation));
  }
  return result;
}

}  // namespace spmd
