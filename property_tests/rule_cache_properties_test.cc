// Dispatch's rule cache (runtime/exec/rule_cache.h) never gives an answer the rule would not:
// over every registered op, accepted and arbitrary requests and near-copies of them that
// differ in one part of the key (one size, one dims-mapping entry, one partial axis or
// reduce op, one attr, the mesh's shape, process ids or axis names), each asked after the
// others so that cached answers of near-copies sit in the table, the cached answer equals
// InferForwardWithShapes' (rule, normalised attrs, output shapes) and a refusal is the same
// refusal (type and message).
#include "runtime/exec/rule_cache.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "property_tests/generators.h"
#include "rules/model/error.h"
#include "rules/engine/registry.h"

namespace spmd::prop {
namespace {

using runtime::CachedInferForward;

struct Outcome {
  std::optional<ForwardInference> answer;
  std::string error;  // "Type: message" of a refusal
};

bool Same(const Outcome& a, const Outcome& b) {
  if (a.answer.has_value() != b.answer.has_value()) return false;
  if (!a.answer) return a.error == b.error;
  return a.answer->rule == b.answer->rule && a.answer->normalized == b.answer->normalized &&
         a.answer->output_shapes == b.answer->output_shapes;
}

template <typename Fn>
Outcome Run(Fn fn) {
  Outcome out;
  try {
    out.answer = fn();
  } catch (const SpmdError& e) {
    out.error = std::string(ToString(e.type())) + ": " + e.what();
  }
  return out;
}

// A copy of `request` with one part of the cache key changed (which part: drawn).
ForwardRequest Mutate(const ForwardRequest& request) {
  ForwardRequest m = request;
  const int what = *rc::gen::inRange(0, 7);
  const size_t n = m.inputs.size();
  switch (what) {
    case 0:  // one size
      if (n > 0 && !m.inputs[0].shape.empty()) {
        const size_t i = *rc::gen::inRange<size_t>(0, n);
        if (!m.inputs[i].shape.empty()) {
          const size_t d = *rc::gen::inRange<size_t>(0, m.inputs[i].shape.size());
          m.inputs[i].shape[d] += *rc::gen::element<int64_t>(-1, 1, 2);
        }
      }
      break;
    case 1:  // one dims-mapping entry
      if (n > 0) {
        const size_t i = *rc::gen::inRange<size_t>(0, n);
        if (!m.inputs[i].dist.dims.empty()) {
          const size_t d = *rc::gen::inRange<size_t>(0, m.inputs[i].dist.dims.size());
          AxisList& axes = m.inputs[i].dist.dims[d];
          if (axes.empty()) {
            axes.push_back(*rc::gen::inRange<int>(0, static_cast<int>(m.mesh.ndim())));
          } else {
            axes.pop_back();
          }
        }
      }
      break;
    case 2:  // one partial axis or reduce op
      if (n > 0) {
        const size_t i = *rc::gen::inRange<size_t>(0, n);
        PartialMap& partial = m.inputs[i].dist.partial;
        const int axis = *rc::gen::inRange<int>(0, static_cast<int>(m.mesh.ndim()));
        auto it = partial.find(axis);
        if (it == partial.end()) {
          partial[axis] = ReduceOp::kSum;
        } else if (it->second == ReduceOp::kSum) {
          it->second = ReduceOp::kMax;
        } else {
          partial.erase(it);
        }
      }
      break;
    case 3:  // the attrs, drawn again
      m.attrs = *GenAttrs(*request.op);
      break;
    case 4: {  // the mesh's process ids, reversed
      std::vector<int64_t> ids(m.mesh.process_ids().rbegin(), m.mesh.process_ids().rend());
      m.mesh = Mesh(m.mesh.shape(), ids, m.mesh.axis_names());
      break;
    }
    case 5: {  // the mesh's axis names
      std::vector<std::string> names;
      for (int a = 0; a < m.mesh.ndim(); ++a) names.push_back("ax" + std::to_string(a));
      if (m.mesh.axis_names() == names) names.clear();
      m.mesh = Mesh(m.mesh.shape(), m.mesh.process_ids(), names);
      break;
    }
    default: {  // the mesh's shape (the same number of devices, transposed)
      std::vector<int64_t> shape(m.mesh.shape().rbegin(), m.mesh.shape().rend());
      m.mesh = Mesh(shape);
      break;
    }
  }
  return m;
}

void CheckAgainstTheRule(const ForwardRequest& r) {
  NoteRequest(ToJsonLine(r));
  const Outcome direct = Run([&] { return InferForwardWithShapes(*r.op, r.mesh, r.inputs, r.attrs); });
  const Outcome cached = Run([&] { return *CachedInferForward(*r.op, r.mesh, r.inputs, r.attrs); });
  if (!Same(direct, cached)) {
    RC_FAIL("the cache answered otherwise than the rule for " + ToJsonLine(r) + "\n  rule: " +
            (direct.answer ? ToString(direct.answer->rule) : direct.error) + "\n  cache: " +
            (cached.answer ? ToString(cached.answer->rule) : cached.error));
  }
}

RC_GTEST_PROP(RuleCache, NeverAnswersOtherwiseThanTheRule, ()) {
  const OpDecl* op = *rc::gen::elementOf(OpsUnderTest());
  std::vector<ForwardRequest> requests;
  if (const std::optional<ForwardRequest> accepted = *GenAccepted(*op, DistMode::kAny)) {
    requests.push_back(*accepted);
  } else {
    requests.push_back(*GenArbitraryForward(*op));
  }
  const int mutations = *rc::gen::inRange(1, 6);
  for (int k = 0; k < mutations; ++k) requests.push_back(Mutate(requests[*rc::gen::inRange<size_t>(0, requests.size())]));
  // Each twice, in an order that puts near-copies' answers in the table first.
  const std::vector<size_t> order = *rc::gen::container<std::vector<size_t>>(
      2 * requests.size(), rc::gen::inRange<size_t>(0, requests.size()));
  for (size_t i : order) CheckAgainstTheRule(requests[i]);
  for (const ForwardRequest& r : requests) CheckAgainstTheRule(r);
}

TEST(RuleCache, RepeatsAreHitsAndAnOpOutsideTheRegistryIsNeverCached) {
  runtime::ResetThisThreadRuleCache();
  const OpDecl& matmul = *FindOp("matmul");
  const Mesh mesh({2, 2});
  const std::vector<TensorArg> inputs = {
      {{8, 4}, DistAttr{{{0}, {1}}, {}}},
      {{4, 6}, DistAttr{{{1}, {}}, {}}},
  };
  const auto first = CachedInferForward(matmul, mesh, inputs, {});
  const auto second = CachedInferForward(matmul, mesh, inputs, {});
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(runtime::ThisThreadRuleCacheStats().hits, 1);
  EXPECT_EQ(runtime::ThisThreadRuleCacheStats().misses, 1);

  // A caller's own declaration (a copy at another address) always runs the rule.
  const OpDecl own = matmul;
  CachedInferForward(own, mesh, inputs, {});
  CachedInferForward(own, mesh, inputs, {});
  EXPECT_EQ(runtime::ThisThreadRuleCacheStats().bypassed, 2);
  EXPECT_EQ(runtime::ThisThreadRuleCacheStats().hits, 1);

  // A refusal is not stored: it throws again, and the slot keeps nothing new.
  const std::vector<TensorArg> bad = {{{8, 4}, DistAttr{{{0}, {1}}, {}}}, {{5, 6}, DistAttr{{{}, {}}, {}}}};
  EXPECT_THROW(CachedInferForward(matmul, mesh, bad, {}), SpmdError);
  EXPECT_THROW(CachedInferForward(matmul, mesh, bad, {}), SpmdError);
  EXPECT_EQ(runtime::ThisThreadRuleCacheStats().misses, 1);
}

}  // namespace
}  // namespace spmd::prop
