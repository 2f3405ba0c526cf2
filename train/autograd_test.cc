// Autograd over Dispatch, proven against one device.
//
// Generated cases: small programs (an MLP with a broadcast bias, attention-like softmax
// contractions, a variable used several times, elementwise chains) at random sizes (uneven
// and size-1 dims included), on random meshes (1 to 4 thread ranks, 1-d and 2-d), with
// every leaf laid out at random (sharded dims, replicated, partial). For each case:
//   1. the loss and every leaf's gradient (resharded to replicated, then gathered) on the
//      sharded run equal those of the same program on a one-rank mesh, to 1e-12 relative
//      (float64: only the order of additions differs);
//   2. the one-rank gradients equal central finite differences of the one-rank loss
//      (forward only, under NoGradGuard), to 1e-6 relative.
// Then the contract's edges: no_grad, detach, accumulation, a spent graph, an op without a
// backward, and the partial(sum) gradient of a replicated weight (data parallelism).
#include "train/autograd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "runtime/comm/thread_communicator.h"

namespace spmd::train {
namespace {

using notation::Ints;
using notation::MakeAttrs;
using runtime::Communicator;
using runtime::DistTensor;

kernels::Tensor Random(const Shape& shape, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> values(n);
  for (double& v : values) v = dist(rng);
  return kernels::Tensor::FromVector(shape, values);
}

std::vector<double> Values(const kernels::Tensor& t) {
  return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
}

struct Leaf {
  kernels::Tensor global;  // float64
  bool requires_grad = true;
};

using Program = std::function<Variable(const std::vector<Variable>&, Communicator&)>;

struct Case {
  std::string name;
  std::vector<Leaf> leaves;
  Program program;
};

struct Outcome {
  double loss = 0;
  std::vector<std::vector<double>> grads;  // per leaf that requires grad, global, row-major
};

// A random valid dist attr for `shape` on `mesh`: each mesh axis shards one dim whose size
// it does not exceed... or any dim (uneven is fine), stays replicated, or (for leaves that
// allow it) is partial(sum).
DistAttr RandomAttr(const Shape& shape, const Mesh& mesh, std::mt19937_64& rng) {
  DistAttr attr = DistAttr::Replicated(static_cast<int>(shape.size()));
  for (int axis = 0; axis < mesh.ndim(); ++axis) {
    const int choice = std::uniform_int_distribution<int>(0, 3)(rng);
    if (choice <= 1 && !shape.empty()) {
      const int dim = std::uniform_int_distribution<int>(0, static_cast<int>(shape.size()) - 1)(rng);
      attr.dims[dim].push_back(axis);
    } else if (choice == 2) {
      attr.partial[axis] = ReduceOp::kSum;
    }
  }
  return attr;
}

// Runs `c` on `mesh` with the leaves laid out by `attrs`; rank 0's view of the results.
Outcome RunCase(const Case& c, const Mesh& mesh, const std::vector<DistAttr>& attrs) {
  Outcome outcome;
  std::mutex mutex;
  runtime::RunRanks(mesh.size(), [&](Communicator& comm) {
    std::vector<Variable> leaves;
    for (size_t i = 0; i < c.leaves.size(); ++i) {
      leaves.emplace_back(DistTensor::ShardTensor(c.leaves[i].global, mesh, attrs[i], comm.rank()),
                          c.leaves[i].requires_grad);
    }
    const Variable loss = c.program(leaves, comm);
    Backward(loss, comm);
    const kernels::Tensor loss_value = *loss.value().ToGlobal(comm);
    std::vector<std::vector<double>> grads;
    for (const Variable& leaf : leaves) {
      if (!leaf.requires_grad()) continue;
      const DistTensor g =
          Gradient(leaf, DistAttr::Replicated(static_cast<int>(leaf.value().shape().size())), comm);
      grads.push_back(Values(*g.ToGlobal(comm)));
    }
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      outcome.loss = loss_value.data<double>()[0];
      outcome.grads = std::move(grads);
    }
  });
  return outcome;
}

// The loss of `c` on one rank with `leaves` as the leaf values, no gradients recorded.
double LossOnOneRank(const Case& c, const std::vector<kernels::Tensor>& leaves) {
  double loss = 0;
  const Mesh one({1});
  runtime::RunRanks(1, [&](Communicator& comm) {
    NoGradGuard no_grad;
    std::vector<Variable> vars;
    for (const kernels::Tensor& t : leaves) {
      vars.emplace_back(DistTensor::ShardTensor(
          t, one, DistAttr::Replicated(static_cast<int>(t.shape().size())), 0));
    }
    loss = c.program(vars, comm).value().local().data<double>()[0];
  });
  return loss;
}

// ---- The programs -----------------------------------------------------------------------

Variable Call(const char* op, const std::vector<Variable>& in, Communicator& comm,
            const Attrs& attrs = {}) {
  return Apply1(op, in, attrs, comm);
}

Variable SumAll(const Variable& x, Communicator& comm) { return Call("sum", {x}, comm); }

Case MakeCase(int kind, std::mt19937_64& rng) {
  auto dim = [&](int lo, int hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Case c;
  switch (kind) {
    case 0: {  // an MLP: sum(tanh(x @ w1 + b1) @ w2 * c)
      const int64_t b = dim(1, 5), n = dim(1, 5), h = dim(1, 6), m = dim(1, 4);
      c.name = "mlp";
      c.leaves = {{Random({b, n}, rng), false}, {Random({n, h}, rng)}, {Random({h}, rng)},
                  {Random({h, m}, rng)}, {Random({b, m}, rng), false}};
      c.program = [](const std::vector<Variable>& v, Communicator& comm) {
        const Variable hidden = Call("tanh", {Call("add", {Call("matmul", {v[0], v[1]}, comm), v[2]}, comm)}, comm);
        return SumAll(Call("multiply", {Call("matmul", {hidden, v[3]}, comm), v[4]}, comm), comm);
      };
      break;
    }
    case 1: {  // attention-like: sum(softmax(q @ k^T) @ v * c)
      const int64_t s = dim(1, 5), d = dim(1, 4), t = dim(1, 5);
      c.name = "attention";
      c.leaves = {{Random({s, d}, rng)}, {Random({t, d}, rng)}, {Random({t, d}, rng)},
                  {Random({s, d}, rng), false}};
      c.program = [](const std::vector<Variable>& v, Communicator& comm) {
        const Variable scores =
            Call("matmul", {v[0], v[1]}, comm, MakeAttrs({{"trans_y", true}}));
        const Variable probs = Call("softmax", {scores}, comm);
        return SumAll(Call("multiply", {Call("matmul", {probs, v[2]}, comm), v[3]}, comm), comm);
      };
      break;
    }
    case 2: {  // reuse: x feeds three uses, one of them twice, and a non-leaf feeds two
      const int64_t r = dim(1, 4), k = dim(1, 6);
      c.name = "reuse";
      c.leaves = {{Random({r, k}, rng)}, {Random({r, k}, rng)}};
      c.program = [](const std::vector<Variable>& v, Communicator& comm) {
        const Variable xx = Call("multiply", {v[0], v[0]}, comm);
        const Variable e = Call("sigmoid", {Call("add", {xx, v[1]}, comm)}, comm);
        const Variable y = Call("subtract", {Call("multiply", {e, e}, comm), v[0]}, comm);
        return SumAll(Call("scale", {y}, comm, MakeAttrs({{"scale", 0.5}, {"bias", 0.25}})), comm);
      };
      break;
    }
    default: {  // elementwise and reductions: sum over an axis, exp, log, silu, softmax axis 0
      const int64_t r = dim(1, 4), k = dim(1, 5);
      c.name = "elementwise";
      c.leaves = {{Random({r, k}, rng)}, {Random({r, k}, rng, 0.5, 2.0)}};
      c.program = [](const std::vector<Variable>& v, Communicator& comm) {
        const Variable a = Call("silu", {v[0]}, comm);
        const Variable b = Call("log", {v[1]}, comm);
        const Variable s = Call("softmax", {Call("multiply", {a, b}, comm)}, comm,
                              MakeAttrs({{"axis", int64_t{0}}}));
        const Variable rows = Call("sum", {Call("exp", {s}, comm)}, comm, MakeAttrs({{"axis", Ints{1}}}));
        return SumAll(Call("multiply", {rows, rows}, comm), comm);
      };
      break;
    }
  }
  return c;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// ---- The property -----------------------------------------------------------------------

TEST(AutogradTest, ShardedGradientsEqualOneDeviceAndFiniteDifferences) {
  const std::vector<Mesh> meshes = {Mesh({2}), Mesh({3}), Mesh({2, 2}), Mesh({1, 2})};
  std::mt19937_64 rng(20261201);
  int cases = 0, partial_leaves = 0, sharded_leaves = 0;
  for (int iteration = 0; iteration < 96; ++iteration) {
    const Case c = MakeCase(iteration % 4, rng);
    const Mesh& mesh = meshes[std::uniform_int_distribution<size_t>(0, meshes.size() - 1)(rng)];
    std::vector<DistAttr> attrs, replicated;
    std::ostringstream label;
    label << c.name << " on mesh of " << mesh.size() << " ranks (" << mesh.ndim() << "-d), leaves";
    for (const Leaf& leaf : c.leaves) {
      attrs.push_back(RandomAttr(leaf.global.shape(), mesh, rng));
      replicated.push_back(DistAttr::Replicated(static_cast<int>(leaf.global.shape().size())));
      label << " " << kernels::ShapeToString(leaf.global.shape()) << " "
            << ToPlacementString(attrs.back(), mesh.ndim());
      partial_leaves += attrs.back().IsPartial();
      sharded_leaves += !attrs.back().IsReplicated() && !attrs.back().IsPartial();
    }
    SCOPED_TRACE(label.str());
    const Outcome sharded = RunCase(c, mesh, attrs);
    const Outcome single = RunCase(c, Mesh({1}), replicated);

    EXPECT_NEAR(sharded.loss, single.loss, 1e-12 * std::max(1.0, std::abs(single.loss)));
    ASSERT_EQ(sharded.grads.size(), single.grads.size());
    size_t g = 0;
    for (size_t i = 0; i < c.leaves.size(); ++i) {
      if (!c.leaves[i].requires_grad) continue;
      const std::vector<double>& got = sharded.grads[g];
      const std::vector<double>& want = single.grads[g];
      ASSERT_EQ(got.size(), want.size());
      const double scale = std::max(1.0, MaxAbs(want));
      for (size_t k = 0; k < want.size(); ++k) {
        ASSERT_NEAR(got[k], want[k], 1e-12 * scale) << "leaf " << i << " element " << k;
      }
      // Central finite differences of the one-rank loss.
      std::vector<kernels::Tensor> values;
      for (const Leaf& leaf : c.leaves) values.push_back(leaf.global);
      constexpr double h = 1e-5;
      for (size_t k = 0; k < want.size(); ++k) {
        double* element = values[i].data<double>() + k;
        const double saved = *element;
        *element = saved + h;
        const double up = LossOnOneRank(c, values);
        *element = saved - h;
        const double down = LossOnOneRank(c, values);
        *element = saved;
        ASSERT_NEAR(want[k], (up - down) / (2 * h), 1e-6 * scale)
            << "leaf " << i << " element " << k << " against finite differences";
      }
      ++g;
    }
    ++cases;
  }
  EXPECT_EQ(cases, 96);
  // The generator must reach the layouts the property is about.
  EXPECT_GT(partial_leaves, 5);
  EXPECT_GT(sharded_leaves, 20);
}

// ---- The contract's edges ---------------------------------------------------------------

kernels::Tensor Filled(const Shape& shape, double value) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return kernels::Tensor::FromVector(shape, std::vector<double>(n, value));
}

TEST(AutogradTest, ReplicatedWeightGradientIsPartialUntilReduced) {
  // x batch-sharded on 2 ranks, w replicated: dW = x^T g sums over the batch, so each rank
  // holds an addend; Gradient(w, [R]) is the all-reduce of data parallelism.
  const Mesh mesh({2});
  std::mt19937_64 rng(7);
  const kernels::Tensor x = Random({4, 3}, rng), w = Random({3, 2}, rng);
  runtime::RunRanks(2, [&](Communicator& comm) {
    Variable xv(DistTensor::ShardTensor(x, mesh, ParsePlacementString("[S(0)]", 2, "x"), comm.rank()));
    Variable wv(DistTensor::ShardTensor(w, mesh, DistAttr::Replicated(2), comm.rank()), true);
    Backward(SumAll(Call("matmul", {xv, wv}, comm), comm), comm);
    ASSERT_TRUE(wv.grad().has_value());
    EXPECT_TRUE(wv.grad()->dist_attr().IsPartial()) << ToPlacementString(wv.grad()->dist_attr(), 1);
    const DistTensor reduced = Gradient(wv, DistAttr::Replicated(2), comm);
    EXPECT_TRUE(reduced.dist_attr().IsReplicated());
    // dW[j][k] = sum_b x[b][j] (g = ones).
    for (int64_t j = 0; j < 3; ++j) {
      double column = 0;
      for (int64_t b = 0; b < 4; ++b) column += x.data<double>()[b * 3 + j];
      for (int64_t k = 0; k < 2; ++k) {
        EXPECT_NEAR(reduced.local().data<double>()[j * 2 + k], column, 1e-12);
      }
    }
  });
}

TEST(AutogradTest, NoGradDetachAccumulationAndASpentGraph) {
  const Mesh mesh({2});
  std::mt19937_64 rng(11);
  const kernels::Tensor x = Random({2, 3}, rng);
  runtime::RunRanks(2, [&](Communicator& comm) {
    const DistAttr attr = ParsePlacementString("[S(1)]", 2, "x");
    Variable xv(DistTensor::ShardTensor(x, mesh, attr, comm.rank()), true);

    // Under no_grad nothing is recorded: the result does not require grad.
    {
      NoGradGuard guard;
      EXPECT_FALSE(GradEnabled());
      const Variable y = SumAll(Call("exp", {xv}, comm), comm);
      EXPECT_FALSE(y.requires_grad());
      EXPECT_THROW(Backward(y, comm), SpmdError);
    }
    EXPECT_TRUE(GradEnabled());

    // Detach: gradients stop at the detached copy.
    const Variable through_detach = SumAll(Call("multiply", {xv, xv.Detach()}, comm), comm);
    Backward(through_detach, comm);  // d/dx (x * const) = const = x
    const kernels::Tensor once = *Gradient(xv, attr, comm).ToGlobal(comm);
    for (int64_t k = 0; k < x.numel(); ++k) EXPECT_NEAR(once.data<double>()[k], x.data<double>()[k], 1e-12);

    // Accumulation: a second recorded forward adds into the same gradient.
    Backward(SumAll(Call("multiply", {xv, xv.Detach()}, comm), comm), comm);
    const kernels::Tensor twice = *Gradient(xv, attr, comm).ToGlobal(comm);
    for (int64_t k = 0; k < x.numel(); ++k) EXPECT_NEAR(twice.data<double>()[k], 2 * x.data<double>()[k], 1e-12);

    // A spent graph is refused; ZeroGrad starts over (zeros when nothing reached the leaf).
    EXPECT_THROW(Backward(through_detach, comm), SpmdError);
    xv.ZeroGrad();
    EXPECT_FALSE(xv.grad().has_value());
    const kernels::Tensor zero = *Gradient(xv, attr, comm).ToGlobal(comm);
    for (int64_t k = 0; k < x.numel(); ++k) EXPECT_EQ(zero.data<double>()[k], 0.0);

    // A leaf that does not require grad has no gradient to ask for.
    EXPECT_THROW(Gradient(xv.Detach(), attr, comm), SpmdError);
  });
}

// The backward uses the values the forward saw: an optimizer step between the two (a
// SetValue on the leaf) does not change the gradient of the recorded forward.
TEST(AutogradTest, TheBackwardSeesTheForwardsValues) {
  const Mesh mesh({2});
  std::mt19937_64 rng(5);
  const kernels::Tensor x = Random({3, 2}, rng);
  runtime::RunRanks(2, [&](Communicator& comm) {
    const DistAttr attr = ParsePlacementString("[S(0)]", 2, "x");
    Variable xv(DistTensor::ShardTensor(x, mesh, attr, comm.rank()), true);
    const Variable loss = SumAll(Call("multiply", {xv, xv}, comm), comm);  // d/dx = 2x
    xv.SetValue(DistTensor::ShardTensor(Filled({3, 2}, 7.0), mesh, attr, comm.rank()));
    Backward(loss, comm);
    const kernels::Tensor g = *Gradient(xv, attr, comm).ToGlobal(comm);
    for (int64_t k = 0; k < x.numel(); ++k) EXPECT_NEAR(g.data<double>()[k], 2 * x.data<double>()[k], 1e-12);
  });
}

TEST(AutogradTest, BadUseGetsTypedErrors) {
  const Mesh mesh({1});
  runtime::RunRanks(1, [&](Communicator& comm) {
    Variable a(DistTensor::ShardTensor(Filled({2, 2}, 1.0), mesh, DistAttr::Replicated(2), 0), true);
    // An op whose backward is not declared cannot be recorded (matmul_grad is itself a
    // backward; second derivatives are out of scope).
    try {
      Apply("matmul_grad", {a, a, a}, {}, comm);
      ADD_FAILURE() << "expected Unsupported";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.type(), ErrorType::kUnsupported);
      EXPECT_EQ(e.field(), "op");
    }
    // ... but runs under no_grad.
    {
      NoGradGuard guard;
      EXPECT_EQ(Apply("matmul_grad", {a, a, a}, {}, comm).size(), 2u);
    }
    try {
      Apply1("relu", {Variable()}, {}, comm);
      ADD_FAILURE() << "expected InvalidArgument";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
      EXPECT_EQ(e.field(), "inputs[0]");
    }
    try {
      Apply1("no_such_op", {a}, {}, comm);
      ADD_FAILURE() << "expected UnknownOp";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.type(), ErrorType::kUnknownOp);
    }
    // A new value must keep the layout.
    EXPECT_THROW(a.SetValue(DistTensor::ShardTensor(Filled({2, 3}, 1.0), mesh, DistAttr::Replicated(2), 0)),
                 SpmdError);
    // Non-floating outputs carry no gradient and are not recorded.
    const Variable mask = Apply1("greater_than", {a, a}, {}, comm);
    EXPECT_FALSE(mask.requires_grad());
  });
}

}  // namespace
}  // namespace spmd::train
