#include "checker/completeness.h"

#include <atomic>
#include <mutex>
#include <thread>

#include "checker/simulate.h"
#include "checker/sweep.h"
#include "rules/model/error.h"
#include "rules/engine/registry.h"

namespace spmd::checker {
namespace {

const std::vector<ReduceOp> kPartialOps = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};

std::string MeshName(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

// Tries every output combination (odometer over the candidate lists); returns the first
// sound one, or an empty vector.
std::vector<DistAttr> FindSoundOutputs(const Case& c, const std::vector<std::vector<DistAttr>>& candidates) {
  std::vector<size_t> at(candidates.size(), 0);
  std::vector<DistAttr> outputs(candidates.size());
  while (true) {
    for (size_t o = 0; o < candidates.size(); ++o) outputs[o] = candidates[o][at[o]];
    Case probe = c;
    bool sound = true;
    for (int k = 0; k < 2 && sound; ++k, ++probe.seed) {  // two seeds: a lucky pass is unlikely
      sound = CheckClaim(probe, c.inputs, outputs).verdict == Verdict::kSound;
    }
    if (sound) return outputs;
    size_t o = 0;
    for (; o < candidates.size(); ++o) {
      if (++at[o] < candidates[o].size()) break;
      at[o] = 0;
    }
    if (o == candidates.size()) return {};
  }
}

CompletenessRow Examine(const OpDecl& op, const std::vector<int64_t>& mesh_shape,
                        const CompletenessOptions& options) {
  CompletenessRow row{op.name, MeshName(mesh_shape)};
  const Mesh mesh(mesh_shape);
  const SizePalette palette = DefaultPalettes()[0];
  uint64_t seed = 7;
  for (const Example& example : op.examples(palette)) {
    std::vector<std::vector<DistAttr>> choices;
    for (const Shape& s : example.shapes) {
      choices.push_back(EnumerateDistAttrs(static_cast<int>(s.size()), mesh.ndim(), kPartialOps));
    }
    std::vector<size_t> at(choices.size(), 0);
    while (row.resharding < options.max_cases) {
      Case c{&op, mesh, example.shapes, {}, example.attrs, ++seed};
      for (size_t i = 0; i < choices.size(); ++i) c.inputs.push_back(choices[i][at[i]]);
      std::vector<TensorArg> args;
      for (size_t i = 0; i < c.shapes.size(); ++i) args.push_back({c.shapes[i], c.inputs[i]});
      try {
        const InferResult rule = InferForward(op, mesh, args, c.attrs);
        if (rule.inputs != c.inputs) {
          ++row.resharding;
          // The outputs' ranks come from the rule's answer.
          std::vector<std::vector<DistAttr>> candidates;
          int64_t total = 1;
          for (const DistAttr& out : rule.outputs) {
            candidates.push_back(EnumerateDistAttrs(out.rank(), mesh.ndim(), kPartialOps));
            total *= static_cast<int64_t>(candidates.back().size());
          }
          if (total > options.max_candidates) {
            ++row.unsearched;
          } else if (auto found = FindSoundOutputs(c, candidates); !found.empty()) {
            ++row.missed;
            if (row.example.empty()) {
              row.example = "inputs";
              for (const DistAttr& in : c.inputs) row.example += " " + ToPlacementString(in, mesh.ndim());
              row.example += " (shapes";
              for (const Shape& s : c.shapes) {
                row.example += " [";
                for (size_t d = 0; d < s.size(); ++d) row.example += (d ? "," : "") + std::to_string(s[d]);
                row.example += "]";
              }
              row.example += "): the rule reshards to";
              for (const DistAttr& in : rule.inputs) row.example += " " + ToPlacementString(in, mesh.ndim());
              row.example += "; sound without reshard: outputs";
              for (const DistAttr& out : found) row.example += " " + ToPlacementString(out, mesh.ndim());
            }
          }
        }
      } catch (const SpmdError&) {
        // the rule refuses this input: nothing to compare
      }
      size_t i = 0;
      for (; i < choices.size(); ++i) {
        if (++at[i] < choices[i].size()) break;
        at[i] = 0;
      }
      if (i == choices.size()) break;
    }
  }
  return row;
}

}  // namespace

std::vector<CompletenessRow> RunCompleteness(const CompletenessOptions& options) {
  const std::vector<const OpDecl*> ops = SelectOps(options.ops);
  const std::vector<std::vector<int64_t>> meshes =
      options.meshes.empty() ? std::vector<std::vector<int64_t>>{{2}, {2, 2}} : options.meshes;
  std::vector<std::pair<const OpDecl*, std::vector<int64_t>>> tasks;
  for (const OpDecl* op : ops) {
    for (const auto& m : meshes) tasks.push_back({op, m});
  }
  std::vector<CompletenessRow> rows(tasks.size());
  std::atomic<size_t> next{0};
  auto worker = [&]() {
    for (size_t t = next++; t < tasks.size(); t = next++) rows[t] = Examine(*tasks[t].first, tasks[t].second, options);
  };
  std::vector<std::thread> threads;
  for (int j = 1; j < std::max(1, options.jobs); ++j) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  return rows;
}

}  // namespace spmd::checker
