// Optimizers on sharded parameters against the textbook formulas run on the host.
//
// Generated cases: parameters of random shapes (uneven included) on meshes of 1 to 4
// thread ranks, each with a random parameter layout and a random state layout (replicated,
// sharded like the parameter, or sharded on another axis: ZeRO's layouts). The loss
// sum_p <p, c_p> + 0.5 sum_p a_p <p, p> has the gradient c_p + a_p p; the input x is
// batch-sharded so that gradients of replicated parameters come out partial and the step
// must reduce them. After K steps of SGD with momentum and weight decay, or AdamW, with
// and without clipping by global norm, every parameter equals the formula computed in
// float64 on the host, to 1e-12 relative.
#include "train/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "runtime/exec/dispatch.h"
#include "runtime/comm/thread_communicator.h"

namespace spmd::train {
namespace {

using notation::MakeAttrs;
using runtime::Communicator;
using runtime::DistTensor;

std::vector<double> RandomValues(int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

DistAttr RandomLayout(const Shape& shape, const Mesh& mesh, std::mt19937_64& rng) {
  DistAttr attr = DistAttr::Replicated(static_cast<int>(shape.size()));
  for (int axis = 0; axis < mesh.ndim(); ++axis) {
    if (std::uniform_int_distribution<int>(0, 1)(rng) == 0) continue;
    const int dim = std::uniform_int_distribution<int>(0, static_cast<int>(shape.size()) - 1)(rng);
    attr.dims[dim].push_back(axis);
  }
  return attr;
}

struct Param {
  Shape shape;
  std::vector<double> init, c;
  double a = 0;
  DistAttr layout, state_layout;
};

enum class Kind { kSgd, kAdamW };

// The host formula, float64, PyTorch's definitions.
std::vector<std::vector<double>> HostSteps(const std::vector<Param>& params, Kind kind, int steps,
                                           double clip) {
  const double lr = 0.1, momentum = 0.9, wd = 0.05, b1 = 0.9, b2 = 0.99, eps = 1e-8;
  std::vector<std::vector<double>> p, s1, s2;
  for (const Param& q : params) {
    p.push_back(q.init);
    s1.emplace_back(q.init.size(), 0.0);
    s2.emplace_back(q.init.size(), 0.0);
  }
  for (int t = 1; t <= steps; ++t) {
    std::vector<std::vector<double>> g(params.size());
    double squared = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      for (size_t k = 0; k < p[i].size(); ++k) {
        g[i].push_back(params[i].c[k] + params[i].a * p[i][k]);
        squared += g[i].back() * g[i].back();
      }
    }
    const double norm = std::sqrt(squared);
    const double coef = clip > 0 && norm > clip ? clip / (norm + 1e-6) : 1.0;
    for (size_t i = 0; i < params.size(); ++i) {
      for (size_t k = 0; k < p[i].size(); ++k) {
        const double gk = g[i][k] * coef;
        if (kind == Kind::kSgd) {
          const double d = gk + wd * p[i][k];
          s1[i][k] = t == 1 ? d : momentum * s1[i][k] + d;
          p[i][k] -= lr * s1[i][k];
        } else {
          p[i][k] *= 1 - lr * wd;
          s1[i][k] = b1 * s1[i][k] + (1 - b1) * gk;
          s2[i][k] = b2 * s2[i][k] + (1 - b2) * gk * gk;
          const double mhat = s1[i][k] / (1 - std::pow(b1, t));
          const double vhat = s2[i][k] / (1 - std::pow(b2, t));
          p[i][k] -= lr * mhat / (std::sqrt(vhat) + eps);
        }
      }
    }
  }
  return p;
}

// The same through the optimizer on `mesh`; rank 0's gathered parameters.
std::vector<std::vector<double>> ShardedSteps(const std::vector<Param>& params, const Mesh& mesh,
                                              Kind kind, int steps, double clip,
                                              int64_t* state_bytes_rank0) {
  std::vector<std::vector<double>> result(params.size());
  std::mutex mutex;
  runtime::RunRanks(mesh.size(), [&](Communicator& comm) {
    std::unique_ptr<Optimizer> opt;
    if (kind == Kind::kSgd) {
      opt = std::make_unique<Sgd>(0.1, 0.9, 0.05);
    } else {
      opt = std::make_unique<AdamW>(0.1, 0.9, 0.99, 1e-8, 0.05);
    }
    opt->set_max_grad_norm(clip);
    std::vector<Variable> vars;
    for (const Param& q : params) {
      vars.emplace_back(DistTensor::ShardTensor(kernels::Tensor::FromVector(q.shape, q.init), mesh,
                                                q.layout, comm.rank()),
                        true);
      opt->Add(vars.back(), q.state_layout);
    }
    for (int t = 0; t < steps; ++t) {
      // loss = sum_i sum(p_i * c_i) + 0.5 a_i sum(p_i * p_i), where c_i enters as a
      // partial(sum) constant on every mesh axis the parameter is not sharded on, so that
      // gradients come out partial, as under data parallelism.
      std::vector<Variable> terms;
      for (size_t i = 0; i < params.size(); ++i) {
        const Param& q = params[i];
        DistAttr partial = q.layout;
        for (int axis = 0; axis < mesh.ndim(); ++axis) {
          bool used = false;
          for (const auto& dim : partial.dims) used = used || std::count(dim.begin(), dim.end(), axis);
          if (!used) partial.partial[axis] = ReduceOp::kSum;
        }
        Variable c(DistTensor::ShardTensor(kernels::Tensor::FromVector(q.shape, q.c), mesh, partial,
                                           comm.rank()));
        terms.push_back(Apply1("sum", {Apply1("multiply", {vars[i], c}, {}, comm)}, {}, comm));
        const Variable sq = Apply1("sum", {Apply1("multiply", {vars[i], vars[i]}, {}, comm)}, {}, comm);
        terms.push_back(Apply1("scale", {sq}, MakeAttrs({{"scale", 0.5 * q.a}}), comm));
      }
      Variable loss = terms[0];
      for (size_t k = 1; k < terms.size(); ++k) loss = Apply1("add", {loss, terms[k]}, {}, comm);
      Backward(loss, comm);
      opt->Step(comm);
    }
    std::vector<std::vector<double>> mine;
    for (const Variable& v : vars) {
      EXPECT_EQ(v.value().dist_attr(), params[mine.size()].layout);
      const kernels::Tensor g = *v.value().ToGlobal(comm);
      mine.emplace_back(g.data<double>(), g.data<double>() + g.numel());
    }
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      result = std::move(mine);
      *state_bytes_rank0 = opt->StateBytes();
    }
  });
  return result;
}

TEST(OptimizerTest, ShardedStepsEqualTheHostFormula) {
  const std::vector<Mesh> meshes = {Mesh({1}), Mesh({2}), Mesh({3}), Mesh({2, 2})};
  std::mt19937_64 rng(99);
  int cases = 0, sharded_states = 0;
  for (int iteration = 0; iteration < 40; ++iteration) {
    const Mesh& mesh = meshes[iteration % meshes.size()];
    const Kind kind = iteration % 2 ? Kind::kAdamW : Kind::kSgd;
    const double clip = (iteration / 2) % 2 ? 0.5 : 0.0;
    std::vector<Param> params(std::uniform_int_distribution<int>(1, 3)(rng));
    std::ostringstream label;
    label << (kind == Kind::kSgd ? "sgd" : "adamw") << " clip " << clip << " mesh " << mesh.size();
    for (Param& q : params) {
      const int rank = std::uniform_int_distribution<int>(1, 2)(rng);
      for (int d = 0; d < rank; ++d) q.shape.push_back(std::uniform_int_distribution<int64_t>(1, 5)(rng));
      q.init = RandomValues(Numel(q.shape), rng);
      q.c = RandomValues(Numel(q.shape), rng);
      q.a = std::uniform_real_distribution<double>(0, 1)(rng);
      q.layout = RandomLayout(q.shape, mesh, rng);
      q.state_layout = RandomLayout(q.shape, mesh, rng);
      sharded_states += !q.state_layout.IsReplicated();
      label << " p" << kernels::ShapeToString(q.shape) << ToPlacementString(q.layout, mesh.ndim())
            << "/state" << ToPlacementString(q.state_layout, mesh.ndim());
    }
    SCOPED_TRACE(label.str());
    const int steps = 3;
    int64_t state_bytes = 0;
    const auto want = HostSteps(params, kind, steps, clip);
    const auto got = ShardedSteps(params, mesh, kind, steps, clip, &state_bytes);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size());
      for (size_t k = 0; k < want[i].size(); ++k) {
        ASSERT_NEAR(got[i][k], want[i][k], 1e-12 * std::max(1.0, std::abs(want[i][k])))
            << "param " << i << " element " << k;
      }
    }
    // The states rank 0 holds: its shards of the state layout (AdamW: two, SGD with
    // momentum: one), never the whole parameter when the layout shards it.
    int64_t expected = 0;
    for (const Param& q : params) {
      const auto coord = *mesh.CoordinateOf(0);
      expected += Numel(LocalShape(q.shape, q.state_layout, mesh, coord)) * 8;
    }
    EXPECT_EQ(state_bytes, kind == Kind::kAdamW ? 2 * expected : expected);
    ++cases;
  }
  EXPECT_EQ(cases, 40);
  EXPECT_GT(sharded_states, 10);
}

std::vector<double> Global(const Variable& p, Communicator& comm) {
  const kernels::Tensor t = *p.value().ToGlobal(comm);
  return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
}

// A gradient with a NaN or an infinity anywhere (on one rank's shard) makes the global norm
// non-finite on every rank, and Step then changes no parameter or state, for both optimizers.
TEST(OptimizerTest, ANonFiniteGradientAppliesNoUpdate) {
  const Mesh mesh({2});
  for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    for (Kind kind : {Kind::kSgd, Kind::kAdamW}) {
      runtime::RunRanks(2, [&](Communicator& comm) {
        std::unique_ptr<Optimizer> opt;
        if (kind == Kind::kAdamW) {
          opt = std::make_unique<AdamW>(0.1);
        } else {
          opt = std::make_unique<Sgd>(0.1);
        }
        const std::vector<double> start = {1, 2, 3, 4};
        const DistAttr sharded{{{0}}, {}};
        const Variable p(DistTensor::ShardTensor(kernels::Tensor::FromVector<double>({4}, start), mesh,
                                                 sharded, comm.rank()), true);
        opt->Add(p);
        // One finite step first, so AdamW holds moments that a bad step could spoil.
        p.SetGrad(DistTensor::ShardTensor(kernels::Tensor::FromVector<double>({4}, {1, 1, 1, 1}), mesh,
                                          sharded, comm.rank()));
        opt->Step(comm);
        const std::vector<double> before = Global(p, comm);
        std::vector<double> g = {0.5, 0.5, 0.5, 0.5};
        g[3] = bad;  // on rank 1's shard only
        p.SetGrad(DistTensor::ShardTensor(kernels::Tensor::FromVector<double>({4}, g), mesh, sharded,
                                          comm.rank()));
        opt->Step(comm);
        EXPECT_FALSE(std::isfinite(opt->last_grad_norm()));
        EXPECT_EQ(Global(p, comm), before) << "rank " << comm.rank();
        // The next finite step moves the parameters again, from finite states.
        p.SetGrad(DistTensor::ShardTensor(kernels::Tensor::FromVector<double>({4}, {1, 1, 1, 1}), mesh,
                                          sharded, comm.rank()));
        opt->Step(comm);
        for (double v : Global(p, comm)) EXPECT_TRUE(std::isfinite(v));
        EXPECT_NE(Global(p, comm), before);
      });
    }
  }
}

TEST(OptimizerTest, BadRegistrationGetsTypedErrors) {
  const Mesh mesh({2});
  runtime::RunRanks(2, [&](Communicator& comm) {
    Sgd sgd(0.1);
    const DistTensor t = DistTensor::ShardTensor(kernels::Tensor::FromVector<double>({2}, {1, 2}), mesh,
                                                 DistAttr::Replicated(1), comm.rank());
    try {
      sgd.Add(Variable(t, /*requires_grad=*/false));
      ADD_FAILURE();
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field(), "param");
    }
    DistAttr partial = DistAttr::Replicated(1);
    partial.partial[0] = ReduceOp::kSum;
    try {
      sgd.Add(Variable(t, true), partial);
      ADD_FAILURE();
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field(), "state_layout");
    }
    try {
      sgd.Add(Variable(t, true), DistAttr::Replicated(2));
      ADD_FAILURE();
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field().rfind("state_layout", 0), 0u) << e.field();
    }
  });
}

// The fused adamw op against the chain of elementwise ops train::AdamW ran before it (scale,
// add, multiply, sqrt, divide, subtract), in float64 on a sharded layout, over generated
// values, steps and hyperparameters: equal to float64 rounding (1e-15 relative).
TEST(OptimizerTest, FusedAdamWEqualsTheChainOfOps) {
  const Mesh mesh({2});
  std::mt19937_64 rng(7);
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  for (int iteration = 0; iteration < 20; ++iteration) {
    const Shape shape = {2 * std::uniform_int_distribution<int64_t>(1, 6)(rng), 3};
    const int64_t n = Numel(shape);
    std::vector<double> p = RandomValues(n, rng), g = RandomValues(n, rng), m = RandomValues(n, rng), v(n);
    for (double& x : v) x = uniform(0, 1);
    const double lr = uniform(0, 0.5), beta1 = uniform(0, 0.99), beta2 = uniform(0, 0.9999);
    const double eps = uniform(1e-9, 1e-3), wd = uniform(0, 0.2);
    const int64_t t = std::uniform_int_distribution<int64_t>(1, 1000)(rng);
    runtime::RunRanks(2, [&](Communicator& comm) {
      const DistAttr sharded{{{0}, {}}, {}};
      auto dist = [&](const std::vector<double>& x) {
        return DistTensor::ShardTensor(kernels::Tensor::FromVector<double>(shape, x), mesh, sharded, comm.rank());
      };
      const DistTensor dp = dist(p), dg = dist(g), dm = dist(m), dv = dist(v);
      auto run = [&](const char* op, const Attrs& attrs, std::vector<const DistTensor*> in) {
        return runtime::Dispatch(*FindOp(op), in, attrs, comm);
      };
      auto scale = [&](const DistTensor& x, double a, double b = 0) {
        return run("scale", MakeAttrs({{"scale", a}, {"bias", b}}), {&x})[0];
      };
      auto binary = [&](const char* op, const DistTensor& x, const DistTensor& y) { return run(op, {}, {&x, &y})[0]; };
      const DistTensor m2 = binary("add", scale(dm, beta1), scale(dg, 1 - beta1));
      const DistTensor v2 = binary("add", scale(dv, beta2), scale(binary("multiply", dg, dg), 1 - beta2));
      const double c1 = 1 - std::pow(beta1, static_cast<double>(t));
      const double c2 = 1 - std::pow(beta2, static_cast<double>(t));
      const DistTensor v_hat = scale(v2, 1 / c2);
      const DistTensor denominator = scale(run("sqrt", {}, {&v_hat})[0], 1, eps);
      const DistTensor step = scale(binary("divide", m2, denominator), lr / c1);
      const DistTensor p2 = binary("subtract", scale(dp, 1 - lr * wd), step);
      const std::vector<DistTensor> fused =
          run("adamw",
              MakeAttrs({{"lr", lr}, {"beta1", beta1}, {"beta2", beta2}, {"epsilon", eps}, {"weight_decay", wd},
                         {"step", t}}),
              {&dp, &dg, &dm, &dv});
      const DistTensor* chain[] = {&p2, &m2, &v2};
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(fused[k].dist_attr(), sharded) << "output " << k;
        const kernels::Tensor a = *fused[k].ToGlobal(comm), b = *chain[k]->ToGlobal(comm);
        for (int64_t e = 0; e < n; ++e) {
          const double x = a.data<double>()[e], y = b.data<double>()[e];
          EXPECT_LE(std::fabs(x - y), 1e-15 * std::max(1.0, std::fabs(y)))
              << "output " << k << " element " << e << " step " << t << " rank " << comm.rank();
        }
      }
    });
  }
}

}  // namespace
}  // namespace spmd::train
