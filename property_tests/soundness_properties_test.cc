// Level 2 at random (the random mode of `spmd check`): RapidCheck draws an op, a mesh of
// 1-4 axes and up to 16 ranks (permuted process ids included), sizes for the op's
// example, and input dist attrs (co-shard, partial); the rule's answer must be sound on
// the simulated mesh. Shrinking gives a minimal case; a failure prints one replay command.
//
// A case the rule or the global reference refuses is NotApplicable and proves nothing, so
// a generator gone wrong (every case refused) would pass unnoticed. Each property
// therefore also bounds the NotApplicable fraction of every op drawn at least
// kMinCasesForBound times (below, with the measured fractions).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <iostream>
#include <map>
#include <string>

#include "checker/simulate.h"
#include "checker/sweep.h"
#include "io/case_json.h"
#include "property_tests/generators.h"
#include "rules/engine/registry.h"

namespace spmd::prop {
namespace {

// The bound on the NotApplicable fraction of each op, from fractions measured over
// 200,000 cases of each property (RC_PARAMS="max_success=200000", SPMD_SOUNDNESS_TALLY=1
// prints the table) plus a margin of 0.15 (about 5 standard deviations at the ~120 cases
// per op of a default run over 170 ops). Most ops measure at most 0.035: inputs whose
// generated partial mixes logical and arithmetic reduce ops. The ops listed refuse more:
// expand_as draws that mix for two inputs; the others from the palette's sizes (0
// included): an empty reduction or normalisation, no valid label below a class count of 0,
// a reshape target of another size, a vocabulary sharded with padding_idx, or slice's
// decrease_axis on a dim sliced to nothing. (Unlisted, slice and expand_as failed the 0.10
// bound in about 1 run in 20 once the op count had grown.)
constexpr double kMaxNotApplicable = 0.10;
const std::map<std::string, double>& RefusingOps() {
  static const std::map<std::string, double> kBounds = {
      {"argmax", 0.45},                      // measured 0.289: argmax over an empty dim
      {"argmin", 0.45},                      // 0.315: as argmax
      {"c_softmax_with_cross_entropy", 0.25},       // 0.113: no label below 0 classes
      {"c_softmax_with_cross_entropy_grad", 0.25},  // 0.126: no label below 0 classes
      {"c_softmax_with_multi_label_cross_entropy", 0.30},       // 0.133: no label below 0 classes
      {"c_softmax_with_multi_label_cross_entropy_grad", 0.30},  // 0.125: as the forward
      {"cross_entropy_with_softmax", 0.25},  // 0.101: no label below 0 classes
      {"cross_entropy_with_softmax_grad", 0.30},  // 0.137: no label below 0 classes
      {"expand_as", 0.20},                   // 0.054: partial kinds mixed over two inputs
      {"index_put", 0.30},                   // 0.144: no valid index below an empty indexed dim
      {"layer_norm", 0.55},                  // 0.379 (0.388 in ContractionsAndReshapes)
      {"layer_norm_grad", 0.55},             // 0.374: as layer_norm
      {"lookup_table_v2", 0.40},             // 0.214: vocabulary sharded with padding_idx
      {"mean", 0.35},                        // 0.167: mean over 0 elements
      {"mean_all", 0.65},                    // 0.461
      {"reshape", 0.50},                     // 0.345 (0.353)
      {"rms_norm", 0.55},                    // 0.381
      {"rms_norm_grad", 0.55},               // 0.377
      {"slice", 0.20},                       // 0.059: decrease_axis on a dim sliced to 0
  };
  return kBounds;
}
constexpr int kMinCasesForBound = 100;  // fewer cases (a replay): too noisy to bound
constexpr int kFullSize = 100;  // RapidCheck's largest default size: a uniform inRange

struct Tally {
  int cases = 0;
  int not_applicable = 0;
  std::string last_note;
};

rc::Gen<SizePalette> GenPalette() {
  return rc::gen::map(rc::gen::container<std::vector<int64_t>>(3, rc::gen::inRange<int64_t>(0, 10)),
                      [](std::vector<int64_t> sizes) { return SizePalette{std::move(sizes)}; });
}

// One case of `op`; fails with the counterexample and its replay command when unsound.
void CheckOne(const OpDecl& op, std::map<std::string, Tally>& tally) {
  const Mesh mesh = *GenMesh();
  const SizePalette palette = *GenPalette();
  const std::vector<Example> examples = op.examples(palette);
  const Example& example = examples[*rc::gen::inRange<size_t>(0, examples.size())];
  checker::Case c{&op, mesh, example.shapes, {}, example.attrs, *rc::gen::arbitrary<uint32_t>()};
  for (const Shape& shape : example.shapes) {
    c.inputs.push_back(*GenDistAttr(mesh, static_cast<int>(shape.size()), /*allow_partial=*/true));
  }
  const checker::Outcome outcome = checker::CheckForward(c);
  Tally& t = tally[op.name];
  ++t.cases;
  if (outcome.verdict == checker::Verdict::kNotApplicable) {
    ++t.not_applicable;
    t.last_note = outcome.note;
  }
  if (outcome.verdict == checker::Verdict::kUnsound) {
    RC_FAIL(op.name + ": " + outcome.counterexample->message + "\n  replay: " + io::ReplayCommand(c));
  }
}

// Fails for every op drawn often enough whose NotApplicable fraction exceeds the bound.
void ExpectFewNotApplicable(const std::map<std::string, Tally>& tally) {
  const bool print = std::getenv("SPMD_SOUNDNESS_TALLY") != nullptr;
  for (const auto& [name, t] : tally) {
    const double fraction = static_cast<double>(t.not_applicable) / t.cases;
    if (print) {
      std::cout << name << " " << t.cases << " " << t.not_applicable << " " << fraction << " "
                << t.last_note << "\n";
    }
    if (t.cases < kMinCasesForBound) continue;
    const auto listed = RefusingOps().find(name);
    EXPECT_LE(fraction, listed == RefusingOps().end() ? kMaxNotApplicable : listed->second)
        << name << ": " << t.not_applicable << " of " << t.cases
        << " cases not applicable (the generator or the examples refuse too often); last: "
        << t.last_note;
  }
}

TEST(SoundnessProperties, EveryRuleIsSoundOnRandomMeshes) {
  std::map<std::string, Tally> tally;
  EXPECT_TRUE(rc::check("every rule is sound on random meshes", [&] {
    const auto& ops = AllOps();
    // Every op equally often: inRange scales with RapidCheck's size, which would draw the
    // ops late in the list (the shape ops, triu) a few times in a thousand.
    const OpDecl& op = ops[*rc::gen::resize(kFullSize, rc::gen::inRange<size_t>(0, ops.size()))];
    RC_TAG(op.name);
    CheckOne(op, tally);
  }));
  ExpectFewNotApplicable(tally);
}

// The contractions and shape ops carry most of the rule logic: more cases for them.
TEST(SoundnessProperties, ContractionsAndReshapes) {
  std::map<std::string, Tally> tally;
  EXPECT_TRUE(rc::check("contractions and reshapes are sound", [&] {
    const std::vector<std::string> names = {"matmul", "einsum", "matmul_grad", "reshape", "flatten",
                                            "concat", "layer_norm", "lookup_table_v2"};
    CheckOne(*FindOp(names[*rc::gen::resize(kFullSize, rc::gen::inRange<size_t>(0, names.size()))]), tally);
  }));
  ExpectFewNotApplicable(tally);
}

}  // namespace
}  // namespace spmd::prop
