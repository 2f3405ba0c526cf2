// Test helpers shared by the rules/ tests (mesh, dist attr, layout, reshard).
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <functional>
#include <string>
#include <vector>

#include "rules/model/dist_attr.h"
#include "rules/model/error.h"

namespace spmd::testing {

// Expects `call` to throw SpmdError(kInvalidArgument) naming exactly `field`.
inline void ExpectInvalid(const std::function<void()>& call, const std::string& field) {
  try {
    call();
    ADD_FAILURE() << "expected SpmdError on field " << field;
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument) << e.what();
    EXPECT_EQ(e.field(), field) << e.what();
  }
}

// Returns `values` in a random order (this RapidCheck has no gen::shuffle); shrinks
// towards the given order.
template <class T>
std::vector<T> Shuffled(std::vector<T> values) {
  for (size_t i = 0; i < values.size(); ++i) {
    const size_t j = *rc::gen::inRange(i, values.size());
    std::swap(values[i], values[j]);
  }
  return values;
}

// A valid dist attr of `rank` dims over `mesh_ndim` axes: each axis is replicated,
// partial (an op of `partial_ops`; none when empty), or appended to a dim's list, axes
// visited in random order so that co-shard orders are random too.
inline DistAttr GenDistAttr(int mesh_ndim, int rank, const std::vector<ReduceOp>& partial_ops) {
  DistAttr attr = DistAttr::Replicated(rank);
  std::vector<int> axes(mesh_ndim);
  for (int a = 0; a < mesh_ndim; ++a) axes[a] = a;
  for (int axis : Shuffled(axes)) {
    const int role = *rc::gen::inRange(0, 3);
    if (role == 1 && rank > 0) {
      attr.dims[*rc::gen::inRange(0, rank)].push_back(axis);
    } else if (role == 2 && !partial_ops.empty()) {
      attr.partial[axis] = *rc::gen::elementOf(partial_ops);
    }
  }
  return attr;
}

}  // namespace spmd::testing
