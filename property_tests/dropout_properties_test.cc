// dropout's mask does not depend on the layout, on the CPU kernels: for random shapes,
// meshes and shardings, the per-rank masks (and outputs) assembled into the global tensor
// equal the kernel's run on the whole tensor, bit for bit. (The checker's sweep proves the
// same of the float64 reference through soundness: every sharding it generates must
// assemble into the unsharded reference's mask, a bool output, exactly.) And the
// counter-based uniform keeps 1 - p of the elements: over 10^5 elements, within 4
// standard deviations, for fixed seeds and probabilities (deterministic: it cannot flake);
// poisson's counts drawn from it have the Poisson distribution's mean, variance and zeros.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "checker/shards.h"
#include "kernels/cpu/kernels.h"
#include "property_tests/generators.h"
#include "rules/ops/counter_rng.h"
#include "rules/model/layout.h"
#include "rules/engine/registry.h"

namespace spmd::prop {
namespace {

namespace ref = spmd::reference;

kernels::Tensor ToKernel(const ref::Tensor& t) {
  kernels::Tensor k(t.shape, DType::kFloat64);
  std::copy(t.data.begin(), t.data.end(), k.data<double>());
  return k;
}

ref::Tensor ToReference(const kernels::Tensor& k) {
  ref::Tensor t;
  t.shape = k.shape();
  t.dtype = k.dtype();
  for (int64_t i = 0; i < k.numel(); ++i) {
    t.data.push_back(k.dtype() == DType::kBool ? (k.data<bool>()[i] ? 1.0 : 0.0) : k.data<double>()[i]);
  }
  return t;
}

RC_GTEST_PROP(DropoutLayout, ShardedMasksAssembleIntoTheUnshardedMask, ()) {
  const Mesh mesh = *GenMesh();
  const Shape shape = *GenShape();
  const DistAttr attr = *GenDistAttr(mesh, static_cast<int>(shape.size()), /*allow_partial=*/false);
  const OpDecl& op = *FindOp("dropout");
  const bool downscale = *rc::gen::arbitrary<bool>();
  const Attrs attrs = op.NormalizeAttrs(
      Attrs()
          .With("p", *rc::gen::element(0.0, 0.1, 0.5, 0.9, 1.0))
          .With("seed", *rc::gen::arbitrary<int64_t>())
          .With("mode", std::string(downscale ? "downscale_in_infer" : "upscale_in_train")));
  std::mt19937_64 rng(*rc::gen::arbitrary<uint64_t>());
  ref::Tensor x = ref::Tensor{shape, {}, DType::kFloat64};
  std::uniform_real_distribution<double> value(-2.0, 2.0);
  for (int64_t i = 0; i < ref::NumElements(shape); ++i) x.data.push_back(value(rng));

  const kernels::Tensor x_kernel = ToKernel(x);
  const kernels::Tensors whole = kernels::RunCpuKernel("dropout", {x_kernel}, attrs);
  const checker::ShardedTensor sharded = checker::ShardTensor(x, attr, mesh, rng);
  checker::ShardedTensor out{shape, attr, DType::kFloat64, {}}, mask{shape, attr, DType::kBool, {}};
  const std::vector<std::vector<int64_t>> coords = checker::MeshCoordinates(mesh);
  for (size_t r = 0; r < coords.size(); ++r) {
    const ref::Tensor& local = sharded.locals[r];
    const std::vector<Shape> global_shapes{shape}, local_shapes{local.shape};
    const std::vector<Shape> offsets{GlobalOffset(shape, attr, mesh, coords[r])};
    const std::vector<Shape> global_outs{shape, shape}, local_outs{local.shape, local.shape};
    const Attrs local_attrs =
        op.localize({attrs, global_shapes, local_shapes, offsets, global_outs, local_outs});
    const kernels::Tensor local_kernel = ToKernel(local);
    const kernels::Tensors got = kernels::RunCpuKernel("dropout", {local_kernel}, local_attrs);
    RC_ASSERT(got.size() == 2u);
    out.locals.push_back(ToReference(got[0]));
    mask.locals.push_back(ToReference(got[1]));
  }
  for (const auto& [name, tensor, expected] :
       {std::tuple{"mask", &mask, ToReference(whole[1])}, std::tuple{"out", &out, ToReference(whole[0])}}) {
    ref::Tensor assembled;
    std::string error;
    RC_ASSERT(checker::AssembleTensor(*tensor, mesh, 0.0, 0.0, &assembled, &error));
    RC_ASSERT(assembled.shape == expected.shape);
    for (size_t i = 0; i < expected.data.size(); ++i) {
      if (assembled.data[i] != expected.data[i]) {
        RC_FAIL(std::string(name) + " differs at flat index " + std::to_string(i) + " under " +
                ToString(attr) + " on " + ToString(mesh));
      }
    }
  }
}

// The fraction kept is 1 - p: a binomial count over n = 10^5 draws within 4 standard
// deviations, for seeds 0..9 (and one negative) at five probabilities.
TEST(DropoutKeepFraction, WithinFourSigmaOfOneMinusP) {
  constexpr int64_t n = 100000;
  for (int64_t seed : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, -12345}) {
    for (double p : {0.01, 0.1, 0.3, 0.5, 0.9}) {
      int64_t kept = 0;
      for (int64_t i = 0; i < n; ++i) kept += counter_rng::Uniform(seed, i) >= p ? 1 : 0;
      const double mean = n * (1.0 - p), sigma = std::sqrt(n * p * (1.0 - p));
      EXPECT_LE(std::abs(static_cast<double>(kept) - mean), 4 * sigma)
          << "seed " << seed << " p " << p << ": kept " << kept << " of " << n;
    }
  }
}

// Consecutive seeds (the training loop's steps and sites) give independent masks: two
// masks agree on p^2 + (1-p)^2 of the elements, within 4 standard deviations.
TEST(DropoutKeepFraction, NeighbouringSeedsAreIndependent) {
  constexpr int64_t n = 100000;
  const double p = 0.5, agree_p = p * p + (1 - p) * (1 - p);
  for (int64_t seed = 0; seed < 10; ++seed) {
    int64_t agree = 0;
    for (int64_t i = 0; i < n; ++i) {
      agree += (counter_rng::Uniform(seed, i) >= p) == (counter_rng::Uniform(seed + 1, i) >= p) ? 1 : 0;
    }
    const double sigma = std::sqrt(n * agree_p * (1 - agree_p));
    EXPECT_LE(std::abs(static_cast<double>(agree) - n * agree_p), 4 * sigma) << "seed " << seed;
  }
}

// poisson's counts (counter_rng::PoissonCount of each index's uniform) have the Poisson
// distribution's moments: over n = 20,000 draws per seed and rate, the sample mean within 5
// standard errors of the rate (rate / n), the sample variance within 5 of its own
// ((rate + 2 rate^2) / n), and the share of zeros within 5 binomial deviations of exp(-rate).
// Fixed seeds: deterministic, it cannot flake.
TEST(PoissonCounts, MomentsAndZerosMatchTheRate) {
  constexpr int64_t n = 20000;
  for (int64_t seed : {0, 1, -7}) {
    for (double rate : {0.0, 0.3, 2.0, 17.5, 120.0, 650.0}) {
      double sum = 0, sum_sq = 0;
      int64_t zeros = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double k = counter_rng::PoissonCount(rate, counter_rng::Uniform(seed, i));
        ASSERT_EQ(k, std::floor(k)) << "a count is an integer";
        ASSERT_GE(k, 0.0);
        sum += k;
        sum_sq += k * k;
        zeros += k == 0.0 ? 1 : 0;
      }
      const double mean = sum / n, variance = (sum_sq - n * mean * mean) / (n - 1);
      const std::string where = "seed " + std::to_string(seed) + " rate " + std::to_string(rate);
      EXPECT_LE(std::abs(mean - rate), 5 * std::sqrt(rate / n) + 1e-12) << where << ": mean " << mean;
      EXPECT_LE(std::abs(variance - rate), 5 * std::sqrt((rate + 2 * rate * rate) / n) + 1e-12)
          << where << ": variance " << variance;
      const double p0 = std::exp(-rate);
      EXPECT_LE(std::abs(static_cast<double>(zeros) - n * p0), 5 * std::sqrt(n * p0 * (1 - p0)) + 1e-9)
          << where << ": " << zeros << " zeros";
    }
  }
}

}  // namespace
}  // namespace spmd::prop
