// The checker has no blind spot for partial outputs: for every op and every shape class
// (divisible, uneven, smaller than the mesh axis, size 1), wherever the rule's answer has a
// partial output, the same answer with that partial dropped or its reduce op swapped is a
// wrong claim, and the checker must reject it (the generated values make every such error
// visible: products of values near 1, a relative tolerance).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "checker/simulate.h"
#include "checker/sweep.h"
#include "rules/model/error.h"
#include "rules/engine/registry.h"

namespace spmd::checker {
namespace {

struct ShapeClass {
  const char* name;
  std::vector<int64_t> mesh;
  SizePalette palette;
};

std::vector<ShapeClass> Classes() {
  return {
      {"divisible", {2}, {{4, 6, 8}}},
      {"uneven", {2}, {{5, 7, 3}}},
      {"smaller than the axis", {4}, {{2, 3}}},
      {"size 1", {2}, {{1}}},
  };
}

// A reduce op that differs from `op` on the generated values.
ReduceOp WrongOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ReduceOp::kProd;
    case ReduceOp::kAvg: return ReduceOp::kSum;
    case ReduceOp::kMax: return ReduceOp::kSum;
    case ReduceOp::kMin: return ReduceOp::kSum;
    case ReduceOp::kProd: return ReduceOp::kSum;
    case ReduceOp::kAny: return ReduceOp::kAll;
    case ReduceOp::kAll: return ReduceOp::kAny;
  }
  return ReduceOp::kSum;
}

// Every input dist attr combination without partials (each axis R or S(d)), at most `cap`.
std::vector<std::vector<DistAttr>> InputCombinations(const std::vector<Shape>& shapes, int mesh_ndim, size_t cap) {
  std::vector<std::vector<DistAttr>> result{{}};
  for (const Shape& shape : shapes) {
    std::vector<std::vector<DistAttr>> next;
    for (const DistAttr& d : EnumerateDistAttrs(static_cast<int>(shape.size()), mesh_ndim, {})) {
      for (const auto& prefix : result) {
        if (next.size() >= cap) break;
        next.push_back(prefix);
        next.back().push_back(d);
      }
    }
    result = std::move(next);
  }
  return result;
}

struct Tally {
  int64_t wrong_claims = 0;
  int64_t missed = 0;
  std::string first_miss;
};

// Checks every wrong claim derived from the rule's answers for `op` in shape class `sc`.
Tally CheckWrongClaims(const OpDecl& op, const ShapeClass& sc) {
  Tally tally;
  const Mesh mesh(sc.mesh);
  uint64_t seed = 1;
  for (const Example& example : op.examples(sc.palette)) {
    for (const std::vector<DistAttr>& inputs : InputCombinations(example.shapes, mesh.ndim(), 64)) {
      Case c{&op, mesh, example.shapes, inputs, example.attrs, ++seed, nullptr};
      const Outcome answer = CheckForward(c);
      if (answer.verdict != Verdict::kSound) continue;
      for (size_t o = 0; o < answer.outputs.size(); ++o) {
        for (const auto& [axis, reduce] : answer.outputs[o].partial) {
          for (int variant = 0; variant < 2; ++variant) {
            std::vector<DistAttr> claim = answer.outputs;
            if (variant == 0) {
              claim[o].partial.erase(axis);  // the partial dropped: claimed replicated
            } else {
              claim[o].partial[axis] = WrongOp(reduce);
            }
            ++tally.wrong_claims;
            const Outcome verdict = CheckClaim(c, answer.required, claim);
            if (verdict.verdict != Verdict::kUnsound) {
              ++tally.missed;
              if (tally.first_miss.empty()) {
                tally.first_miss = ToString(claim[o]) + " for output " + std::to_string(o) + " (the rule says " +
                                   ToString(answer.outputs[o]) + ") judged " +
                                   (verdict.verdict == Verdict::kSound ? "SOUND" : "not applicable: " + verdict.note);
                for (size_t i = 0; i < example.shapes.size(); ++i) {
                  tally.first_miss += "; input " + std::to_string(i) + " shape [";
                  for (size_t d = 0; d < example.shapes[i].size(); ++d) {
                    tally.first_miss += (d ? "," : "") + std::to_string(example.shapes[i][d]);
                  }
                  tally.first_miss += "] " + ToString(answer.required[i]);
                }
              }
            }
          }
        }
      }
    }
  }
  return tally;
}

TEST(WrongClaims, EveryWrongPartialClaimIsRejectedAtEveryShapeClass) {
  std::map<std::string, int64_t> per_class;
  for (const OpDecl& op : AllOps()) {
    for (const ShapeClass& sc : Classes()) {
      const Tally tally = CheckWrongClaims(op, sc);
      per_class[sc.name] += tally.wrong_claims;
      EXPECT_EQ(tally.missed, 0) << op.name << " (" << sc.name << "): " << tally.missed << " of "
                                 << tally.wrong_claims << " wrong claims accepted, first: " << tally.first_miss;
    }
  }
  // Every class has partial outputs to get wrong (reductions, contractions).
  for (const ShapeClass& sc : Classes()) EXPECT_GT(per_class[sc.name], 0) << sc.name;
}

// The reported blind spot: a product over many elements fell under the absolute tolerance,
// so a partial sum claimed for a partial product passed.
TEST(WrongClaims, APartialSumClaimedForAProductIsRejected) {
  Case c;
  c.op = FindOp("prod");
  c.mesh = Mesh({2});
  c.shapes = {{12, 12, 10}};
  c.inputs = {DistAttr::Replicated(3)};
  c.inputs[0].dims[0] = {0};
  const Outcome answer = CheckForward(c);
  ASSERT_EQ(answer.verdict, Verdict::kSound) << answer.note;
  ASSERT_EQ(answer.outputs[0].partial.count(0), 1u) << ToString(answer.outputs[0]);
  ASSERT_EQ(answer.outputs[0].partial.at(0), ReduceOp::kProd);
  std::vector<DistAttr> claim = answer.outputs;
  claim[0].partial[0] = ReduceOp::kSum;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    c.seed = seed;
    EXPECT_EQ(CheckClaim(c, answer.required, claim).verdict, Verdict::kUnsound) << "seed " << seed;
  }
}

}  // namespace
}  // namespace spmd::checker
