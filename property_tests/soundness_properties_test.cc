// Level 2 at random (the random mode of `spmd check`): RapidCheck draws an op, a mesh of 1-4 axes
// and up to 16 ranks (permuted process ids included), sizes for the op's example, and
// input dist attrs (co-shard, partial); the rule's answer must be sound on the simulated
// mesh. Shrinking gives a minimal case; a failure prints one replay command.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "checker/simulate.h"
#include "checker/sweep.h"
#include "io/case_json.h"
#include "property_tests/generators.h"
#include "rules/registry.h"

namespace spmd::prop {
namespace {

rc::Gen<SizePalette> GenPalette() {
  return rc::gen::map(rc::gen::container<std::vector<int64_t>>(3, rc::gen::inRange<int64_t>(0, 10)),
                      [](std::vector<int64_t> sizes) { return SizePalette{std::move(sizes)}; });
}

// One case of `op`; fails with the counterexample and its replay command when unsound.
void CheckOne(const OpDecl& op) {
  const Mesh mesh = *GenMesh();
  const SizePalette palette = *GenPalette();
  const std::vector<Example> examples = op.examples(palette);
  const Example& example = examples[*rc::gen::inRange<size_t>(0, examples.size())];
  checker::Case c{&op, mesh, example.shapes, {}, example.attrs, *rc::gen::arbitrary<uint32_t>()};
  for (const Shape& shape : example.shapes) {
    c.inputs.push_back(*GenDistAttr(mesh, static_cast<int>(shape.size()), /*allow_partial=*/true));
  }
  const checker::Outcome outcome = checker::CheckForward(c);
  if (outcome.verdict == checker::Verdict::kUnsound) {
    RC_FAIL(op.name + ": " + outcome.counterexample->message + "\n  replay: " + io::ReplayCommand(c));
  }
}

RC_GTEST_PROP(SoundnessProperties, EveryRuleIsSoundOnRandomMeshes, ()) {
  const auto& ops = AllOps();
  const OpDecl& op = ops[*rc::gen::inRange<size_t>(0, ops.size())];
  RC_TAG(op.name);
  CheckOne(op);
}

// The contractions and shape ops carry most of the rule logic: more cases for them.
RC_GTEST_PROP(SoundnessProperties, ContractionsAndReshapes, ()) {
  const std::vector<std::string> names = {"matmul", "einsum", "matmul_grad", "reshape", "flatten",
                                          "concat", "layer_norm", "lookup_table_v2"};
  const OpDecl& op = *FindOp(*rc::gen::elementOf(names));
  CheckOne(op);
}

}  // namespace
}  // namespace spmd::prop
