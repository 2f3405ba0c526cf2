#include "checker/simulate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>

#include "checker/input_values.h"
#include "checker/shards.h"
#include "reference/reference.h"
#include "rules/model/error.h"
#include "rules/model/layout.h"
#include "rules/engine/partial_split.h"
#include "rules/engine/phase.h"

namespace spmd::checker {
namespace {

using reference::Tensor;
using reference::Tensors;

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  explicit Rng(const std::mt19937_64& gen) : gen_(gen) {}
  double Uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen_); }
  int64_t Int(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen_); }
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

struct NotApplicable {
  std::string why;
};

int64_t Numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// The generated values of one input (checker/input_values.h); an index below a bound of
// 0 does not exist.
Tensor MakeInput(const Shape& shape, InputValues values, Rng& rng) {
  if (values.kind == ValueKind::kIndex && values.bound <= 0 && Numel(shape) > 0) {
    throw NotApplicable{"no valid index below bound 0"};
  }
  return MakeInputValues(shape, values, rng.gen());
}

// The addends of `whole` for `partial` (rules/engine/partial_split.h), one tensor per slot.
std::vector<Tensor> SplitPartialTensor(const Tensor& whole, const PartialMap& partial,
                                       const Mesh& mesh, Rng& rng) {
  SplitOptions options;
  options.boolean = whole.dtype == DType::kBool;
  std::vector<Tensor> parts;
  for (std::vector<double>& values : SplitPartial(whole.data, partial, mesh, options, rng.gen())) {
    parts.push_back(Tensor{whole.shape, std::move(values), whole.dtype});
  }
  return parts;
}

std::vector<int64_t> Strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

// Calls fn(multi-index) for every element of `shape` in row-major order.
template <typename Fn>
void ForEachIndex(const Shape& shape, Fn&& fn) {
  const int64_t n = Numel(shape);
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    fn(index, k);
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

double Reduce(ReduceOp op, const double* values, int64_t n) {
  double r = values[0];
  for (int64_t i = 1; i < n; ++i) {
    const double v = values[i];
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: r += v; break;
      case ReduceOp::kMax: r = std::max(r, v); break;
      case ReduceOp::kMin: r = std::min(r, v); break;
      case ReduceOp::kProd: r *= v; break;
      case ReduceOp::kAny: r = (r != 0 || v != 0) ? 1 : 0; break;
      case ReduceOp::kAll: r = (r != 0 && v != 0) ? 1 : 0; break;
    }
  }
  if (op == ReduceOp::kAvg) r /= static_cast<double>(n);
  if (op == ReduceOp::kAny || op == ReduceOp::kAll) r = r != 0 ? 1 : 0;
  return r;
}

// Reduces the block of Π n(axis) values, the first axis most significant, innermost first.
double ReduceNested(const std::vector<std::pair<ReduceOp, int64_t>>& axes, size_t level,
                    const double* values) {
  if (level == axes.size()) return values[0];
  int64_t block = 1;
  for (size_t l = level + 1; l < axes.size(); ++l) block *= axes[l].second;
  std::vector<double> inner(axes[level].second);
  for (int64_t c = 0; c < axes[level].second; ++c) inner[c] = ReduceNested(axes, level + 1, values + c * block);
  return Reduce(axes[level].first, inner.data(), axes[level].second);
}

constexpr double kAbsoluteFloor = 1e-12;

bool Close(double expected, double got, DType dtype) {
  if (std::isnan(expected) || std::isnan(got)) return std::isnan(expected) && std::isnan(got);
  if (std::isinf(expected) || std::isinf(got)) return expected == got;
  if (!IsFloating(dtype)) return expected == got;
  // Relative to the larger magnitude; the floor only absorbs rounding where a sum cancels
  // to about 0 (the generated values are of order 1), so values that are all small (a
  // product of many) are still compared.
  return std::abs(expected - got) <= 1e-9 * std::max(std::abs(expected), std::abs(got)) + kAbsoluteFloor;
}


Outcome Unsound(Counterexample ce) {
  Outcome outcome;
  outcome.verdict = Verdict::kUnsound;
  outcome.counterexample = std::move(ce);
  return outcome;
}

// Assembles output `o` from the local outputs per SEMANTICS.md §2.1 and compares it with
// the global reference. Returns a counterexample or nothing.
std::optional<Counterexample> CheckOutput(int o, const Tensor& global, const DistAttr& claim,
                                          const Mesh& mesh,
                                          const std::vector<std::vector<int64_t>>& coords,
                                          const std::vector<Tensors>& local) {
  std::vector<int> replicated;
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (claim.DimOfAxis(a) < 0 && claim.partial.count(a) == 0) replicated.push_back(a);
  }
  std::vector<std::pair<ReduceOp, int64_t>> partial_axes;
  int64_t partial_count = 1;
  for (const auto& [axis, op] : claim.partial) {
    partial_axes.push_back({op, mesh.axis_size(axis)});
    partial_count *= mesh.axis_size(axis);
  }
  const int64_t numel = Numel(global.shape);
  std::vector<double> values(numel * partial_count, 0.0);
  std::vector<int64_t> filled(numel, 0);
  const std::vector<int64_t> strides = Strides(global.shape);
  auto linear = [&](const std::vector<int64_t>& coord) {
    int64_t r = 0;
    for (int a = 0; a < mesh.ndim(); ++a) r = r * mesh.axis_size(a) + coord[a];
    return r;
  };
  for (size_t r = 0; r < coords.size(); ++r) {
    const std::vector<int64_t>& coord = coords[r];
    const Tensor& mine = local[r][o];
    const int64_t pid = mesh.process_ids()[r];
    const Shape want = LocalShape(global.shape, claim, mesh, coord);
    if (mine.shape != want) {
      return Counterexample{"shape", o, pid, mine.shape, 0, 0,
                            "output " + std::to_string(o) + " on rank " + std::to_string(pid) +
                                " has local shape " + IndexText(mine.shape) + ", the layout says " +
                                IndexText(want)};
    }
    std::vector<int64_t> base = coord;
    bool is_base = true;
    for (int a : replicated) {
      is_base = is_base && coord[a] == 0;
      base[a] = 0;
    }
    if (!is_base) {  // a replica must hold what its coordinate-0 peer holds
      const Tensor& peer = local[linear(base)][o];
      for (size_t k = 0; k < mine.data.size(); ++k) {
        if (!Close(peer.data[k], mine.data[k], global.dtype)) {
          return Counterexample{"replica", o, pid, {static_cast<int64_t>(k)}, peer.data[k], mine.data[k],
                                "output " + std::to_string(o) + " is claimed replicated but rank " +
                                    std::to_string(pid) + " holds " + Number(mine.data[k]) +
                                    " at local element " + std::to_string(k) + " where rank " +
                                    std::to_string(mesh.process_ids()[linear(base)]) + " holds " +
                                    Number(peer.data[k])};
        }
      }
      continue;
    }
    const Shape offset = GlobalOffset(global.shape, claim, mesh, coord);
    const int64_t slot = PartialSlot(claim.partial, mesh, coord);
    ForEachIndex(mine.shape, [&](const std::vector<int64_t>& index, int64_t k) {
      int64_t at = 0;
      for (size_t d = 0; d < index.size(); ++d) at += (offset[d] + index[d]) * strides[d];
      values[at * partial_count + slot] = mine.data[k];
      ++filled[at];
    });
  }
  std::optional<Counterexample> found;
  ForEachIndex(global.shape, [&](const std::vector<int64_t>& index, int64_t at) {
    if (found) return;
    const double expected = global.data[at];
    if (filled[at] != partial_count) {
      found = Counterexample{"value", o, -1, index, expected, NAN,
                             "output " + std::to_string(o) + " element " + IndexText(index) +
                                 " is held by " + std::to_string(filled[at]) + " ranks, expected " +
                                 std::to_string(partial_count)};
      return;
    }
    const double got = ReduceNested(partial_axes, 0, values.data() + at * partial_count);
    if (!Close(expected, got, global.dtype)) {
      // The rank holding this element with coordinate 0 on the partial axes.
      int64_t pid = -1;
      for (size_t r = 0; r < coords.size() && pid < 0; ++r) {
        bool holds = PartialSlot(claim.partial, mesh, coords[r]) == 0;
        for (int a : replicated) holds = holds && coords[r][a] == 0;
        for (int d = 0; d < claim.rank() && holds; ++d) {
          const Range range = DimRangeAt(global.shape[d], claim.dims[d], mesh, coords[r]);
          holds = index[d] >= range.begin && index[d] < range.end;
        }
        if (holds) pid = mesh.process_ids()[r];
      }
      found = Counterexample{"value", o, pid, index, expected, got,
                             "output " + std::to_string(o) + " element " + IndexText(index) +
                                 " (on rank " + std::to_string(pid) + "): expected " + Number(expected) +
                                 ", got " + Number(got)};
    }
  });
  return found;
}

// The simulation holds each tensor globally and each rank's shard of it: refuses a case
// whose elements, counted once per rank, exceed kMaxSimulatedElements (shapes are already
// bounded by 2^62 elements, so no product below overflows).
void CheckSimulationSize(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs,
                         const Mesh& mesh) {
  const int64_t ranks = std::max<int64_t>(mesh.size(), 1);
  const int64_t budget = kMaxSimulatedElements / ranks;
  int64_t total = 0;
  auto add = [&](const Shape& shape, const std::string& field) {
    int64_t numel = 1;
    for (int64_t s : shape) {
      if (s > 0 && numel > budget / s) numel = budget + 1;  // saturate: over the budget
      else numel *= std::max<int64_t>(s, 0);
    }
    total += std::min(numel, budget + 1);
    if (total > budget) {
      ThrowUnsupported(field, "the simulated check holds at most " + std::to_string(kMaxSimulatedElements) +
                                  " elements over all ranks; this case needs more (shrink the sizes)");
    }
  };
  for (size_t i = 0; i < inputs.size(); ++i) add(inputs[i], "inputs[" + std::to_string(i) + "].shape");
  for (size_t o = 0; o < outputs.size(); ++o) add(outputs[o], "outputs[" + std::to_string(o) + "].shape");
}

// The local program of an op with an exchange (OpDecl::exchange) on every rank: its
// Phase::kStats, the all-gather of its output over the mesh axes that shard the exchanged
// dim (members in Mesh::GroupOf order), its Phase::kFinish. Fills `local`; returns a
// counterexample when a phase fails on some rank.
std::optional<Counterexample> RunExchange(const OpDecl& op, const RuleContext& context, const Mesh& mesh,
                                          const std::vector<std::vector<int64_t>>& coords,
                                          const std::vector<DistAttr>& required,
                                          const std::vector<Tensors>& inputs, const std::vector<Attrs>& attrs,
                                          size_t outputs, std::vector<Tensors>& local) {
  const reference::ReferenceFn stats_fn = reference::FindReference(KernelRef(op.name, Phase::kStats));
  const reference::ReferenceFn finish_fn = reference::FindReference(KernelRef(op.name, Phase::kFinish));
  if (stats_fn == nullptr || finish_fn == nullptr) {
    throw std::logic_error(op.name + " declares an exchange without the references of its phases");
  }
  const int input = op.exchange->input;
  const int dim = ExchangedDim(op, context);
  const std::vector<int>& axes = required[input].dims[dim];
  auto failed = [&](size_t r, const std::string& phase, const SpmdError& e) {
    const int64_t pid = mesh.process_ids()[r];
    return Counterexample{"local error", -1, pid, {}, 0, 0,
                          "the reference's " + phase + " phase fails on rank " + std::to_string(pid) +
                              "'s shards: " + e.what()};
  };
  std::vector<Tensor> stats(coords.size());
  for (size_t r = 0; r < coords.size(); ++r) {
    try {
      Tensors out = stats_fn(inputs[r], attrs[r]);
      if (out.size() != 1) throw std::logic_error(op.name + "'s stats phase must give one tensor");
      stats[r] = std::move(out[0]);
    } catch (const SpmdError& e) {
      return failed(r, "stats", e);
    }
  }
  std::map<int64_t, size_t> row_of;  // process id -> its position in coords (ids may be large)
  for (size_t r = 0; r < coords.size(); ++r) row_of[mesh.process_ids()[r]] = r;
  for (size_t r = 0; r < coords.size(); ++r) {
    Tensor gathered;
    gathered.dtype = stats[r].dtype;
    gathered.shape = stats[r].shape;
    const std::vector<int64_t> members = mesh.GroupOf(coords[r], axes);
    gathered.shape.insert(gathered.shape.begin(), static_cast<int64_t>(members.size()));
    for (int64_t pid : members) {
      const Tensor& piece = stats[row_of.at(pid)];
      gathered.data.insert(gathered.data.end(), piece.data.begin(), piece.data.end());
    }
    Tensors finish_inputs = inputs[r];
    finish_inputs.push_back(std::move(gathered));
    try {
      local[r] = finish_fn(finish_inputs, attrs[r]);
    } catch (const SpmdError& e) {
      return failed(r, "finish", e);
    }
    if (local[r].size() != outputs) {
      return Counterexample{"local error", -1, mesh.process_ids()[r], {}, 0, 0, "wrong number of local outputs"};
    }
  }
  return std::nullopt;
}

// The global inputs of one draw (from c.seed, `kinds`, negated reals or not), the
// reference's outputs on them and the generator's state after the draw; from c.cache when
// it holds the draw (computed and stored there otherwise).
const SimulationCache::Draw& GlobalDraw(const Case& c, const Attrs& attrs, const std::vector<InputValues>& kinds,
                                        bool negate_reals, reference::ReferenceFn fn, SimulationCache::Draw* scratch) {
  auto same_kinds = [&](const std::vector<InputValues>& other) {
    if (other.size() != kinds.size()) return false;
    for (size_t i = 0; i < kinds.size(); ++i) {
      const InputValues& a = kinds[i];
      const InputValues& b = other[i];
      if (a.kind != b.kind || a.bound != b.bound || a.ones != b.ones || a.hit_begin != b.hit_begin ||
          a.hit_end != b.hit_end) {
        return false;
      }
    }
    return true;
  };
  if (c.cache != nullptr) {
    for (const SimulationCache::Draw& d : c.cache->draws) {
      if (d.seed == c.seed && d.negate == negate_reals && same_kinds(d.kinds)) return d;
    }
  }
  SimulationCache::Draw draw;
  draw.seed = c.seed;
  draw.negate = negate_reals;
  draw.kinds = kinds;
  Rng rng(c.seed);
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    draw.inputs.push_back(MakeInput(c.shapes[i], kinds[i], rng));
    if (negate_reals && kinds[i].kind == ValueKind::kReal) {
      for (double& v : draw.inputs.back().data) v = -v;
    }
  }
  try {
    draw.outputs = fn(draw.inputs, attrs);
  } catch (const SpmdError& e) {
    draw.refused = std::string("the reference refuses a request the declaration accepts: ") +
                   std::string(ToString(e.type())) + " " + e.what();
  }
  draw.rng = rng.gen();
  if (c.cache == nullptr) {
    *scratch = std::move(draw);
    return *scratch;
  }
  c.cache->draws.push_back(std::move(draw));
  return c.cache->draws.back();
}

// One draw of input values (from c.seed); sets *boolean when an output holds 0/1 values.
// `negate_reals`: every real-valued input (ValueKind::kReal) of the draw is negated, which
// keeps it a draw of the same distribution.
Outcome CheckClaimOnce(const Case& c, const std::vector<DistAttr>& required,
                       const std::vector<DistAttr>& claimed, bool* boolean, bool negate_reals = false) {
  Outcome outcome;
  outcome.required = required;
  outcome.outputs = claimed;
  const reference::ReferenceFn fn = c.reference ? c.reference : reference::FindReference(c.op->name);
  try {
    const Attrs attrs = c.op->NormalizeAttrs(c.attrs);
    // The declaration fixes the output shapes; a request it refuses is not applicable.
    std::vector<Shape> global_out_shapes;
    try {
      global_out_shapes = InferOutputShapes(*c.op, c.shapes, attrs);
    } catch (const SpmdError& e) {
      throw NotApplicable{std::string("the declaration refuses the request: ") + e.what()};
    }
    CheckSimulationSize(c.shapes, global_out_shapes, c.mesh);
    const RuleContext rule_context{c.shapes, attrs};
    std::vector<InputValues> kinds = c.op->InputValueKinds(rule_context);
    for (size_t i = 0; i < kinds.size() && i < required.size(); ++i) {
      int logical = 0;
      for (const auto& [axis, op] : required[i].partial) {
        logical += op == ReduceOp::kAny || op == ReduceOp::kAll;
      }
      // A logical partial is a value of 0/1: the global input must be boolean too; mixed
      // with an arithmetic partial (a sum of booleans) it has no consistent value.
      if (logical > 0) kinds[i] = {ValueKind::kBool};
      if (logical > 0 && logical < static_cast<int>(required[i].partial.size())) {
        throw NotApplicable{"input " + std::to_string(i) + " mixes logical and arithmetic partial ops"};
      }
    }
    SimulationCache::Draw scratch;
    const SimulationCache::Draw& draw = GlobalDraw(c, attrs, kinds, negate_reals, fn, &scratch);
    if (!draw.refused.empty()) {
      // The declaration accepted the request: the oracle refusing it is a disagreement
      // between the two (validation drift), not a case to skip.
      return Unsound({"reference refuses", -1, -1, {}, 0, 0, draw.refused});
    }
    const Tensors& global_inputs = draw.inputs;
    const Tensors& global_outputs = draw.outputs;
    Rng rng(draw.rng);  // the partial addends continue from the generator after the draw
    for (const Tensor& t : global_outputs) *boolean = *boolean || t.dtype == DType::kBool;
    if (global_outputs.size() != global_out_shapes.size()) {
      return Unsound({"shape", -1, -1, {}, 0, 0,
                      "the reference gives " + std::to_string(global_outputs.size()) +
                          " outputs, the declaration " + std::to_string(global_out_shapes.size())});
    }
    for (size_t o = 0; o < global_outputs.size(); ++o) {
      // A data-dependent dim (nonzero's count) takes the size the reference's run gave on
      // the global inputs; every static dim is the declaration's. Each rank's output is then
      // cut and assembled by that shape like any other.
      if (ShapeFits(global_out_shapes[o], global_outputs[o].shape)) {
        global_out_shapes[o] = global_outputs[o].shape;
      } else {
        return Unsound({"shape", static_cast<int>(o), -1, global_outputs[o].shape, 0, 0,
                        "the reference's output " + std::to_string(o) + " has shape " +
                            IndexText(global_outputs[o].shape) + ", the declaration gives " +
                            IndexText(global_out_shapes[o])});
      }
    }
    if (required.size() != c.shapes.size()) ThrowInvalid("inputs", "one required dist attr per input");
    if (claimed.size() != global_outputs.size()) {
      ThrowInvalid("claim_outputs", "the op has " + std::to_string(global_outputs.size()) + " outputs here");
    }
    for (size_t i = 0; i < required.size(); ++i) {
      Validate(required[i], c.mesh, static_cast<int>(c.shapes[i].size()), "inputs[" + std::to_string(i) + "]");
    }
    for (size_t o = 0; o < claimed.size(); ++o) {
      Validate(claimed[o], c.mesh, static_cast<int>(global_outputs[o].shape.size()),
               "claim_outputs[" + std::to_string(o) + "]");
    }
    std::vector<std::vector<Tensor>> partial_values;  // per input, per partial slot
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      partial_values.push_back(SplitPartialTensor(global_inputs[i], required[i].partial, c.mesh, rng));
    }
    const auto coords = MeshCoordinates(c.mesh);
    std::vector<Tensors> local(coords.size());
    // An op with an exchange inside runs its two phases around a simulated all-gather when
    // the exchanged dim is sharded (as Dispatch does; whole, the op's own reference runs).
    const int exchange_dim = ExchangedDim(*c.op, rule_context);
    const bool exchange =
        exchange_dim >= 0 && !required[c.op->exchange->input].dims[exchange_dim].empty() && c.reference == nullptr;
    std::vector<Tensors> rank_inputs(exchange ? coords.size() : 0);
    std::vector<Attrs> rank_attrs(exchange ? coords.size() : 0);
    for (size_t r = 0; r < coords.size(); ++r) {
      const std::vector<int64_t>& coord = coords[r];
      Tensors inputs;
      std::vector<Shape> local_shapes, offsets, local_out_shapes;
      for (size_t i = 0; i < c.shapes.size(); ++i) {
        std::vector<Range> ranges;
        for (int d = 0; d < required[i].rank(); ++d) {
          ranges.push_back(DimRangeAt(c.shapes[i][d], required[i].dims[d], c.mesh, coord));
        }
        inputs.push_back(SliceTensor(partial_values[i][PartialSlot(required[i].partial, c.mesh, coord)], ranges));
        local_shapes.push_back(inputs.back().shape);
        offsets.push_back(GlobalOffset(c.shapes[i], required[i], c.mesh, coord));
      }
      for (size_t o = 0; o < claimed.size(); ++o) {
        local_out_shapes.push_back(LocalShape(global_out_shapes[o], claimed[o], c.mesh, coord));
      }
      const LocalContext local_context{attrs, c.shapes, local_shapes, offsets, global_out_shapes, local_out_shapes};
      const Attrs local_attrs = c.op->localize ? c.op->localize(local_context) : attrs;
      if (exchange) {
        rank_inputs[r] = std::move(inputs);
        rank_attrs[r] = local_attrs;
        continue;
      }
      try {
        local[r] = fn(inputs, local_attrs);
      } catch (const SpmdError& e) {
        const int64_t pid = c.mesh.process_ids()[r];
        return Unsound({"local error", -1, pid, {}, 0, 0,
                        "the reference fails on rank " + std::to_string(pid) + "'s shards: " + e.what()});
      }
      if (local[r].size() != global_outputs.size()) {
        return Unsound({"local error", -1, c.mesh.process_ids()[r], {}, 0, 0, "wrong number of local outputs"});
      }
    }
    if (exchange) {
      if (auto failure = RunExchange(*c.op, rule_context, c.mesh, coords, required, rank_inputs, rank_attrs,
                                     global_outputs.size(), local)) {
        return Unsound(std::move(*failure));
      }
    }
    for (size_t o = 0; o < claimed.size(); ++o) {
      if (auto ce = CheckOutput(static_cast<int>(o), global_outputs[o], claimed[o], c.mesh, coords, local)) {
        Outcome bad = Unsound(std::move(*ce));
        bad.required = required;
        bad.outputs = claimed;
        return bad;
      }
    }
    outcome.verdict = Verdict::kSound;
    return outcome;
  } catch (const NotApplicable& e) {
    outcome.verdict = Verdict::kNotApplicable;
    outcome.note = e.why;
    return outcome;
  }
}

}  // namespace

namespace {

// The key of a (required, claimed) pair in SimulationCache::claims, written into `key`
// (AppendKey of the two lists: distinct pairs get distinct keys).
void ClaimKey(const std::vector<DistAttr>& required, const std::vector<DistAttr>& claimed, std::string& key) {
  key.clear();
  AppendKey(key, required);
  AppendKey(key, claimed);
}

// Binds the cache to c's family, or throws when c belongs to another.
void BindCache(SimulationCache& cache, const Case& c) {
  if (!cache.bound) {
    cache.bound = true;
    cache.op = c.op;
    cache.mesh = c.mesh;
    cache.shapes = c.shapes;
    cache.attrs = c.attrs;
    cache.seed = c.seed;
    cache.reference = c.reference;
    return;
  }
  if (cache.op != c.op || !(cache.mesh == c.mesh) || cache.shapes != c.shapes || !(cache.attrs == c.attrs) ||
      cache.seed != c.seed || cache.reference != c.reference) {
    throw std::logic_error("SimulationCache: a case of another family (op, mesh, shapes, attrs, seed or reference)");
  }
}

Outcome CheckClaimUncached(const Case& c, const std::vector<DistAttr>& required,
                           const std::vector<DistAttr>& claimed);

}  // namespace

// CheckClaim through a bound cache: the outcome is the cache's.
const Outcome& CheckClaimCached(const Case& c, const std::vector<DistAttr>& required,
                                const std::vector<DistAttr>& claimed) {
  SimulationCache& cache = *c.cache;
  ClaimKey(required, claimed, cache.key);
  if (auto it = cache.claims.find(cache.key); it != cache.claims.end()) {
    ++cache.reused;
    return it->second;
  }
  Outcome outcome = CheckClaimUncached(c, required, claimed);
  ++cache.simulated;
  return cache.claims.emplace(cache.key, std::move(outcome)).first->second;
}

Outcome CheckClaim(const Case& c, const std::vector<DistAttr>& required,
                   const std::vector<DistAttr>& claimed) {
  if (c.cache == nullptr) return CheckClaimUncached(c, required, claimed);
  BindCache(*c.cache, c);
  return CheckClaimCached(c, required, claimed);
}

namespace {

Outcome CheckClaimUncached(const Case& c, const std::vector<DistAttr>& required,
                           const std::vector<DistAttr>& claimed) {
  bool boolean = false;
  Outcome outcome = CheckClaimOnce(c, required, claimed, &boolean);
  // A 0/1 result carries one bit: a wrong claim on it (a dropped `all` partial on one
  // element) shows on a given draw with probability about 1/2, so cases with a boolean
  // output are drawn kBooleanDraws times (a miss is then about 2^-kBooleanDraws likely).
  Case next = c;
  for (int k = 1; boolean && k < kBooleanDraws && outcome.verdict == Verdict::kSound; ++k) {
    next.seed = c.seed + static_cast<uint64_t>(k) * 0x9E3779B97F4A7C15ull;
    outcome = CheckClaimOnce(next, required, claimed, &boolean);
  }
  // A claimed partial(max) or partial(min) over ranks that hold nothing (an uneven or empty
  // shard leaves them the sum's 0) agrees with the true sum whenever the one holder's value
  // is on the right side of 0: a mean_all of positive values "is" the max of itself and two
  // zeros. The same draw with its real inputs negated moves such a value across 0, so the
  // wrong claim shows on one of the two.
  bool extremum = false;
  for (const DistAttr& out : claimed) {
    for (const auto& [axis, op] : out.partial) extremum = extremum || op == ReduceOp::kMax || op == ReduceOp::kMin;
  }
  if (extremum && outcome.verdict == Verdict::kSound) {
    outcome = CheckClaimOnce(c, required, claimed, &boolean, /*negate_reals=*/true);
  }
  return outcome;
}

}  // namespace

const Outcome& CheckForwardCached(const Case& c) {
  if (c.cache == nullptr) throw std::logic_error("CheckForwardCached: the case has no cache");
  SimulationCache& cache = *c.cache;
  BindCache(cache, c);
  if (!cache.forward) cache.forward.emplace(*c.op, c.mesh, c.shapes, c.attrs);
  cache.dists.clear();
  for (const DistAttr& input : c.inputs) cache.dists.push_back(&input);
  InferResult rule;
  try {
    rule = cache.forward->Infer(cache.dists);
  } catch (const SpmdError& e) {
    cache.refused = Outcome{};
    cache.refused.note = std::string("the rule refuses: ") + e.what();
    return cache.refused;
  }
  return CheckClaimCached(c, rule.inputs, rule.outputs);
}

Outcome CheckForward(const Case& c) {
  if (c.cache != nullptr) return CheckForwardCached(c);
  std::vector<TensorArg> args;
  for (size_t i = 0; i < c.shapes.size(); ++i) args.push_back({c.shapes[i], c.inputs[i]});
  InferResult rule;
  try {
    rule = InferForward(*c.op, c.mesh, args, c.attrs);
  } catch (const SpmdError& e) {
    Outcome outcome;
    outcome.note = std::string("the rule refuses: ") + e.what();
    return outcome;
  }
  return CheckClaim(c, rule.inputs, rule.outputs);
}

}  // namespace spmd::checker
