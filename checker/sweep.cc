#include "checker/sweep.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "rules/model/error.h"
#include "rules/engine/registry.h"

namespace spmd::checker {
namespace {

std::string MeshName(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

// Calls fn(combination) for the cartesian product of `choices`, or for an evenly spread
// sample of at most `cap` of them.
template <typename Fn>
void ForEachCombination(const std::vector<std::vector<DistAttr>>& choices, int64_t cap, Fn&& fn) {
  int64_t total = 1;
  for (const auto& c : choices) total *= static_cast<int64_t>(c.size());
  const int64_t step = cap > 0 && total > cap ? (total + cap - 1) / cap : 1;
  std::vector<DistAttr> pick(choices.size());
  for (int64_t k = 0; k < total; k += step) {
    int64_t rest = k;
    for (int i = static_cast<int>(choices.size()) - 1; i >= 0; --i) {
      pick[i] = choices[i][rest % choices[i].size()];
      rest /= static_cast<int64_t>(choices[i].size());
    }
    fn(pick);
  }
}

void Record(const SweepOptions& options, SweepRow& row, const Case& c, const Outcome& outcome,
            const std::string& direction) {
  switch (outcome.verdict) {
    case Verdict::kNotApplicable: ++row.skipped; return;
    case Verdict::kSound: ++row.cases; ++row.passed; return;
    case Verdict::kUnsound:
      ++row.cases;
      ++row.failed;
      if (row.failures.size() < 3) {
        std::string failure = direction + " " + outcome.counterexample->message;
        if (options.replay) failure += "\n    replay: " + options.replay(c);
        row.failures.push_back(std::move(failure));
      }
      return;
  }
}

// Reverse: the inferred inputs, run forward, must give back the reverse's outputs, and
// the numerics must hold.
Outcome CheckReverse(const Case& base, const std::vector<Shape>& out_shapes,
                     const std::vector<DistAttr>& outs, Case& forward_case) {
  std::vector<TensorArg> args;
  for (size_t o = 0; o < outs.size(); ++o) args.push_back({out_shapes[o], outs[o]});
  InferResult reverse;
  try {
    reverse = InferReverse(*base.op, base.mesh, base.shapes, args, base.attrs);
  } catch (const SpmdError& e) {
    Outcome refused;
    refused.note = e.what();
    return refused;
  }
  forward_case = base;
  forward_case.inputs = reverse.inputs;
  Outcome outcome = CheckForward(forward_case);
  if (outcome.verdict == Verdict::kSound) {
    for (size_t o = 0; o < outcome.outputs.size(); ++o) {
      if (outcome.outputs[o].dims != reverse.outputs[o].dims) {
        outcome.verdict = Verdict::kUnsound;
        outcome.counterexample = Counterexample{
            "reverse", static_cast<int>(o), -1, {}, 0, 0,
            "reverse gives output " + std::to_string(o) + " " + ToString(reverse.outputs[o]) +
                " but forward from its inputs gives " + ToString(outcome.outputs[o])};
        break;
      }
    }
  }
  return outcome;
}

// The reverse cases of one family: every dist attr of the first output (the others
// replicated); `family` is the family's case (seed and cache), its inputs unused.
void SweepReverse(const OpDecl& op, const Mesh& mesh, const Example& example, const Attrs& normalized,
                  const SweepOptions& options, const Case& family, SweepRow& row) {
  std::vector<Shape> out_shapes;
  try {
    out_shapes = InferOutputShapes(op, example.shapes, normalized);
  } catch (const SpmdError&) {
    return;
  }
  // A data-dependent dim (nonzero's count) takes a size of 1 in the request: the reverse
  // accepts any size there (ShapeFits), and its answer reads only the ranks and static dims.
  for (Shape& shape : out_shapes) {
    for (int64_t& size : shape) size = size == kDataDependentDim ? 1 : size;
  }
  std::vector<std::vector<DistAttr>> out_choices;
  for (size_t o = 0; o < out_shapes.size(); ++o) {
    // Output 0 takes every sharding; the others stay replicated (the product grows fast).
    out_choices.push_back(o == 0 ? EnumerateDistAttrs(static_cast<int>(out_shapes[o].size()), mesh.ndim(), {})
                                 : std::vector<DistAttr>{DistAttr::Replicated(static_cast<int>(out_shapes[o].size()))});
  }
  Case base = family;
  base.inputs.clear();
  ForEachCombination(out_choices, options.max_combinations, [&](const std::vector<DistAttr>& outs) {
    Case forward_case;
    Outcome outcome = CheckReverse(base, out_shapes, outs, forward_case);
    Record(options, row, outcome.verdict == Verdict::kNotApplicable ? base : forward_case, outcome, "reverse");
  });
}

SweepRow SweepExhaustive(const OpDecl& op, const std::vector<int64_t>& mesh_shape,
                         const SweepOptions& options) {
  SweepRow row{op.name, MeshName(mesh_shape)};
  const Mesh mesh(mesh_shape);
  uint64_t seed = options.seed;
  for (const SizePalette& palette : DefaultPalettes()) {
    for (const Example& example : op.examples(palette)) {
      Attrs normalized;
      try {
        normalized = op.NormalizeAttrs(example.attrs);
      } catch (const SpmdError&) {
        ++row.skipped;
        continue;
      }
      std::vector<std::vector<DistAttr>> choices;
      std::vector<ReduceOp> partial_ops;
      try {
        partial_ops = PartialInputOps(op, example, normalized);
      } catch (const SpmdError&) {
        ++row.skipped;
        continue;
      }
      for (const Shape& shape : example.shapes) {
        choices.push_back(EnumerateDistAttrs(static_cast<int>(shape.size()), mesh.ndim(), partial_ops));
      }
      // One seed and one cache per (example, palette): every case of the family draws the
      // same global values, computed once, and a (required, claimed) pair already checked
      // is not simulated again (SimulationCache).
      SimulationCache cache;
      Case c{&op, mesh, example.shapes, {}, example.attrs, ++seed, options.reference, &cache};
      ForEachCombination(choices, options.max_combinations, [&](const std::vector<DistAttr>& inputs) {
        c.inputs = inputs;
        Record(options, row, c, CheckForwardCached(c), "forward");
      });
      if (options.reverse) SweepReverse(op, mesh, example, normalized, options, c, row);
      row.simulated += cache.simulated;
      row.reused += cache.reused;
    }
  }
  return row;
}

// Random mode: meshes of 1-4 axes up to 16 ranks, random examples and dist attrs.
SweepRow SweepRandom(const OpDecl& op, const SweepOptions& options) {
  SweepRow row{op.name, "random"};
  std::mt19937_64 rng(options.seed ^ std::hash<std::string>()(op.name));
  auto pick = [&](int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(rng); };
  const std::vector<SizePalette> palettes = {{{16, 12, 8}}, {{9, 13, 7}}, {{3, 5, 2}}, {{1, 4, 6}}};
  for (int64_t k = 0; k < options.random_cases; ++k) {
    std::vector<int64_t> shape;
    int64_t ranks = 1;
    const int axes = 1 + static_cast<int>(pick(4));
    for (int a = 0; a < axes; ++a) {
      int64_t s = 1 + pick(4);
      while (ranks * s > 16) --s;
      shape.push_back(s);
      ranks *= s;
    }
    std::vector<int64_t> ids(ranks);
    for (int64_t i = 0; i < ranks; ++i) ids[i] = i;
    if (pick(2)) std::shuffle(ids.begin(), ids.end(), rng);
    const Mesh mesh(shape, ids);
    const std::vector<Example> examples = op.examples(palettes[pick(palettes.size())]);
    const Example& example = examples[pick(examples.size())];
    Attrs normalized;
    std::vector<ReduceOp> partial_ops;
    try {
      normalized = op.NormalizeAttrs(example.attrs);
      partial_ops = PartialInputOps(op, example, normalized);
    } catch (const SpmdError&) {
      ++row.skipped;
      continue;
    }
    Case c{&op, mesh, example.shapes, {}, example.attrs, rng(), options.reference};
    for (const Shape& s : example.shapes) {
      auto all = EnumerateDistAttrs(static_cast<int>(s.size()), mesh.ndim(), partial_ops);
      c.inputs.push_back(all[pick(all.size())]);
    }
    Record(options, row, c, CheckForward(c), "forward");
  }
  return row;
}

}  // namespace

std::vector<ReduceOp> PartialInputOps(const OpDecl& op, const Example& example, const Attrs& normalized) {
  if (op.dimtrans || op.forward_override) return {ReduceOp::kSum, ReduceOp::kMax};
  const auto spec = BuildEinsumSpec(op, example.shapes, normalized);
  // An unread input is required as given, partial too: every partial kind is tried so
  // that the proof covers keeping it.
  if (!spec->unread_inputs.empty()) return {ReduceOp::kSum, ReduceOp::kMax};
  switch (spec->accept) {
    // kNone: a partial(sum) input is reduced, or reduce-scattered onto a free factor
    // (SEMANTICS.md §4 step 4b), which the sweep must see.
    case PartialAcceptance::kNone:
    case PartialAcceptance::kSumOfAll:
    case PartialAcceptance::kLinearFirst:
    case PartialAcceptance::kMultilinear: return {ReduceOp::kSum};
    case PartialAcceptance::kSameOp: return {spec->accepted_op};
    case PartialAcceptance::kAnyOp: return {ReduceOp::kSum, ReduceOp::kMax};
  }
  return {};
}

std::vector<std::vector<int64_t>> DefaultMeshes() { return {{2}, {3}, {4}, {2, 2}, {2, 3}, {2, 2, 2}}; }

std::vector<SizePalette> DefaultPalettes() {
  return {
      {{4, 6, 8}},  // divisible by 2 (and 4, 8 for co-shards; 6 by 3)
      {{5, 7, 3}},  // uneven on every mesh axis
      {{1, 2, 3}},  // size-1 dims and sizes smaller than the mesh axis (empty shards)
  };
}

std::vector<DistAttr> EnumerateDistAttrs(int rank, int mesh_ndim, const std::vector<ReduceOp>& partial_ops) {
  // choice per axis: 0 = R, 1..rank = S(choice-1), rank+1.. = P(partial_ops[...])
  const int options = 1 + rank + static_cast<int>(partial_ops.size());
  std::vector<DistAttr> result;
  std::vector<int> choice(mesh_ndim, 0);
  while (true) {
    DistAttr base = DistAttr::Replicated(rank);
    for (int a = 0; a < mesh_ndim; ++a) {
      if (choice[a] >= 1 && choice[a] <= rank) base.dims[choice[a] - 1].push_back(a);
      if (choice[a] > rank) base.partial[a] = partial_ops[choice[a] - rank - 1];
    }
    // Every co-shard order: permute each dim's axis list.
    std::vector<DistAttr> orders{base};
    for (int d = 0; d < rank; ++d) {
      if (base.dims[d].size() < 2) continue;
      std::vector<DistAttr> next;
      for (const DistAttr& o : orders) {
        AxisList axes = o.dims[d];
        std::sort(axes.begin(), axes.end());
        do {
          DistAttr permuted = o;
          permuted.dims[d] = axes;
          next.push_back(permuted);
        } while (std::next_permutation(axes.begin(), axes.end()));
      }
      orders = std::move(next);
    }
    result.insert(result.end(), orders.begin(), orders.end());
    int a = 0;
    for (; a < mesh_ndim; ++a) {
      if (++choice[a] < options) break;
      choice[a] = 0;
    }
    if (a == mesh_ndim) break;
  }
  return result;
}

std::vector<const OpDecl*> SelectOps(const std::vector<std::string>& names) {
  std::vector<const OpDecl*> ops;
  if (names.empty()) {
    for (const OpDecl& op : AllOps()) ops.push_back(&op);
    return ops;
  }
  for (const std::string& name : names) {
    const OpDecl* op = FindOp(name);
    if (op == nullptr) throw SpmdError(ErrorType::kUnknownOp, "--op", "unknown op '" + name + "'");
    ops.push_back(op);
  }
  return ops;
}

std::vector<SweepRow> RunSweep(const SweepOptions& options,
                               const std::function<void(const SweepRow&, size_t, size_t)>& progress) {
  const std::vector<const OpDecl*> ops = SelectOps(options.ops);
  const auto meshes = options.meshes.empty() ? DefaultMeshes() : options.meshes;
  struct Task {
    const OpDecl* op;
    std::vector<int64_t> mesh;
  };
  std::vector<Task> tasks;
  for (const OpDecl* op : ops) {
    if (!options.exhaustive) {
      tasks.push_back({op, {}});
      continue;
    }
    for (const auto& mesh : meshes) tasks.push_back({op, mesh});
  }
  std::vector<SweepRow> rows(tasks.size());
  std::atomic<size_t> next{0};
  size_t done = 0;
  std::mutex mutex;
  auto worker = [&]() {
    for (size_t t = next++; t < tasks.size(); t = next++) {
      const auto start = std::chrono::steady_clock::now();
      SweepRow row = options.exhaustive ? SweepExhaustive(*tasks[t].op, tasks[t].mesh, options)
                                        : SweepRandom(*tasks[t].op, options);
      row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::lock_guard<std::mutex> lock(mutex);
      rows[t] = std::move(row);
      if (progress) progress(rows[t], ++done, tasks.size());
    }
  };
  std::vector<std::thread> threads;
  for (int j = 1; j < std::max(1, options.jobs); ++j) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  return rows;
}

}  // namespace spmd::checker
