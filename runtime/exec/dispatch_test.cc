// Dispatch on the thread backend: worked examples (partial outputs left pending, localized
// attrs, the shape probe of expand), errors, and ranks outside the mesh. Every op against
// the reference is property_tests/runtime_properties_test.cc.
#include "runtime/exec/dispatch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "rules/model/error.h"
#include "rules/model/attrs.h"
#include "rules/engine/registry.h"
#include "runtime/comm/thread_communicator.h"
#include "runtime/testing/runtime_test_util.h"

namespace spmd::runtime {
namespace {

using kernels::Tensor;
using testing::Iota;
using testing::Parse;
using testing::Quick;

Tensor Values(const Shape& shape, double scale = 0.25) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<double>((i * 7) % 11) - 1.0;
  return Tensor::FromVector<double>(shape, v);
}


void ExpectNear(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < got.numel(); ++i) {
    EXPECT_NEAR(got.data<double>()[i], want.data<double>()[i], 1e-12) << i;
  }
}

TEST(Dispatch, MatmulLeavesThePartialSumPending) {
  const Mesh mesh({2});
  const Tensor x = Values({3, 5}), y = Values({5, 4}, 0.5);
  const Tensor want = kernels::RunCpuKernel("matmul", {x, y}, FindOp("matmul")->NormalizeAttrs({}))[0];
  RunRanks(
      2,
      [&](Communicator& comm) {
        const DistTensor dx = DistTensor::ShardTensor(x, mesh, Parse("[S(1)]", 2), comm.rank());
        const DistTensor dy = DistTensor::ShardTensor(y, mesh, Parse("[S(0)]", 2), comm.rank());
        DispatchReport report;
        const std::vector<DistTensor> out = Dispatch("matmul", {dx, dy}, Attrs(), comm, &report);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out[0].dist_attr(), Parse("[P(sum)]", 2));
        EXPECT_EQ(out[0].shape(), (Shape{3, 4}));
        EXPECT_FALSE(report.resharded[0]);
        EXPECT_FALSE(report.resharded[1]);
        ExpectNear(*out[0].ToGlobal(comm), want);
      },
      Quick());
}

TEST(Dispatch, ReshardsInputsAndLocalizesAttrs) {
  // triu on a row-sharded input keeps the rows sharded and shifts the diagonal per shard;
  // mean over a sharded dim divides by the global count (local.count).
  const Mesh mesh({2, 2});
  const Tensor x = Values({5, 6});
  const Attrs triu_attrs = Attrs().With("diagonal", int64_t{1});
  const Tensor triu = kernels::RunCpuKernel("triu", {x}, FindOp("triu")->NormalizeAttrs(triu_attrs))[0];
  const Attrs mean_attrs = Attrs().With("axis", std::vector<int64_t>{0});
  const Tensor mean = kernels::RunCpuKernel("mean", {x}, FindOp("mean")->NormalizeAttrs(mean_attrs))[0];
  RunRanks(
      4,
      [&](Communicator& comm) {
        const DistTensor dx = DistTensor::ShardTensor(x, mesh, Parse("[S(0), S(1)]", 2), comm.rank());
        DispatchReport report;
        const DistTensor t = Dispatch("triu", {dx}, triu_attrs, comm, &report)[0];
        ExpectNear(*t.ToGlobal(comm), triu);
        const DistTensor m = Dispatch("mean", {dx}, mean_attrs, comm, &report)[0];
        EXPECT_TRUE(report.local_attrs.local().count.has_value());
        ExpectNear(*m.ToGlobal(comm), mean);
        // A partial input that the rule does not accept is reduced first.
        const DistTensor p = DistTensor::ShardTensor(x, mesh, Parse("[P(sum), R]", 2), comm.rank());
        const DistTensor e = Dispatch("exp", {p}, Attrs(), comm, &report)[0];
        EXPECT_TRUE(report.resharded[0]);
        EXPECT_FALSE(e.dist_attr().IsPartial());
      },
      Quick());
}

TEST(Dispatch, RefusesALocalizedPartFromTheCallerEvenAfterTheSameRequestWasCached) {
  // The rule cache compares whole Attrs (named attrs and localized part): the request
  // without a localized part, answered and cached, never answers the one with it, which
  // NormalizeAttrs refuses naming the field.
  const Mesh mesh({2});
  const Tensor x = Values({4, 6});
  const Attrs mean_attrs = Attrs().With("axis", std::vector<int64_t>{0});
  RunRanks(
      2,
      [&](Communicator& comm) {
        const DistTensor dx = DistTensor::ShardTensor(x, mesh, Parse("[S(0)]", 2), comm.rank());
        (void)Dispatch("mean", {dx}, mean_attrs, comm);
        (void)Dispatch("mean", {dx}, mean_attrs, comm);
        try {
          (void)Dispatch("mean", {dx}, mean_attrs.WithLocal({.count = 3}), comm);
          ADD_FAILURE() << "a caller's localized count was accepted";
        } catch (const SpmdError& e) {
          EXPECT_EQ(e.field(), "local.count") << e.what();
        }
      },
      Quick());
}

TEST(Dispatch, PassesInputsThatNeedNoReshardWithoutCopying) {
  // The kernel reads an input already in the required layout from the caller's own buffer,
  // and a resharded one from the reshard's result, whether the inputs come as a vector or
  // as a braced list of the caller's tensors.
  const Mesh mesh({2});
  const Tensor x = Values({4, 6}), y = Values({6, 2}, 0.5);
  const Tensor want = kernels::RunCpuKernel("matmul", {x, y}, FindOp("matmul")->NormalizeAttrs({}))[0];
  const Tensor twice = kernels::RunCpuKernel("add", {x, x}, Attrs())[0];
  RunRanks(
      2,
      [&](Communicator& comm) {
        std::vector<DistTensor> in;
        in.push_back(DistTensor::ShardTensor(x, mesh, Parse("[S(1)]", 2), comm.rank()));
        in.push_back(DistTensor::ShardTensor(y, mesh, Parse("[S(0)]", 2), comm.rank()));
        DispatchReport report;
        const DistTensor out = Dispatch("matmul", in, Attrs(), comm, &report)[0];
        ASSERT_EQ(report.input_buffers.size(), 2u);
        EXPECT_FALSE(report.resharded[0]);
        EXPECT_FALSE(report.resharded[1]);
        EXPECT_EQ(report.input_buffers[0], in[0].local().bytes());
        EXPECT_EQ(report.input_buffers[1], in[1].local().bytes());
        ExpectNear(*out.ToGlobal(comm), want);
        const DistTensor& dx = in[0];
        const DistTensor& dy = in[1];
        Dispatch("matmul", {dx, dy}, Attrs(), comm, &report);
        ASSERT_EQ(report.input_buffers.size(), 2u);
        EXPECT_EQ(report.input_buffers[0], dx.local().bytes());
        EXPECT_EQ(report.input_buffers[1], dy.local().bytes());
        // x + x with x sharded and replicated: the rule keeps the shard, so only the
        // replicated x is resharded (sliced into a new buffer).
        in[1] = DistTensor::ShardTensor(x, mesh, Parse("[R]", 2), comm.rank());
        const DistTensor sum = Dispatch("add", in, Attrs(), comm, &report)[0];
        ASSERT_EQ(report.input_buffers.size(), 2u);
        EXPECT_FALSE(report.resharded[0]);
        EXPECT_TRUE(report.resharded[1]);
        EXPECT_EQ(report.input_buffers[0], in[0].local().bytes());
        EXPECT_NE(report.input_buffers[1], in[1].local().bytes());
        ExpectNear(*sum.ToGlobal(comm), twice);
        // A partial input that the rule does not accept is reduced into a new buffer.
        in.assign(1, DistTensor::ShardTensor(x, mesh, Parse("[P(sum)]", 2), comm.rank()));
        Dispatch("exp", in, Attrs(), comm, &report);
        ASSERT_TRUE(report.resharded[0]);
        ASSERT_EQ(report.input_buffers.size(), 1u);
        EXPECT_NE(report.input_buffers[0], in[0].local().bytes());
        EXPECT_NE(report.input_buffers[0], nullptr);
      },
      Quick());
}

TEST(Dispatch, ExpandTakesItsNewDimsFromTheDeclaration) {
  // x [4, 1] sharded on dim 0 expands to [2, 4, 3]: the declaration gives every output
  // size (new and expanded dims included) before the kernel runs on its shard.
  const Mesh mesh({2});
  const Tensor x = Values({4, 1});
  const Attrs attrs = Attrs().With("shape", std::vector<int64_t>{2, 4, 3});
  const Tensor want = kernels::RunCpuKernel("expand", {x}, FindOp("expand")->NormalizeAttrs(attrs))[0];
  EXPECT_EQ(InferOutputShapes(*FindOp("expand"), {{4, 1}}, FindOp("expand")->NormalizeAttrs(attrs)),
            (std::vector<Shape>{{2, 4, 3}}));
  RunRanks(
      2,
      [&](Communicator& comm) {
        const DistTensor dx = DistTensor::ShardTensor(x, mesh, Parse("[S(0)]", 2), comm.rank());
        const DistTensor out = Dispatch("expand", {dx}, attrs, comm)[0];
        EXPECT_EQ(out.shape(), (Shape{2, 4, 3}));
        ExpectNear(*out.ToGlobal(comm), want);
      },
      Quick());
}

TEST(Dispatch, RanksOutsideTheMeshGetMetadataOnly) {
  const Mesh mesh({2}, {2, 0});
  const Tensor x = Values({4, 3}), y = Values({3, 2});
  RunRanks(
      3,
      [&](Communicator& comm) {
        const DistTensor dx = DistTensor::ShardTensor(x, mesh, Parse("[S(1)]", 2), comm.rank());
        const DistTensor dy = DistTensor::ShardTensor(y, mesh, Parse("[R]", 2), comm.rank());
        const std::vector<DistTensor> out = Dispatch("matmul", {dx, dy}, Attrs(), comm);
        EXPECT_EQ(out[0].shape(), (Shape{4, 2}));
        EXPECT_EQ(out[0].has_local(), comm.rank() != 1);
        const std::vector<DistTensor> parts =
            Dispatch("split_with_num", {dx}, Attrs().With("num", int64_t{2}).With("axis", int64_t{0}), comm);
        ASSERT_EQ(parts.size(), 2u);
        // The declaration gives every output shape, on ranks outside the mesh too.
        EXPECT_EQ(parts[0].shape(), (Shape{2, 3}));
      },
      Quick());
}

// nonzero's count is a data-dependent dim (SEMANTICS.md §3.1): the sharded x is gathered,
// the kernel's count is the output's, on every rank, and a rank outside the mesh keeps
// kDataDependentDim.
TEST(Dispatch, NonzeroTakesItsCountFromTheKernel) {
  const Mesh mesh({2}, {0, 1});
  const Tensor x = Tensor::FromVector<double>({3, 4}, {0, 1, 0, -2, 0, 0, 3, 0, 0.5, 0, 0, 0});
  const Tensor want = kernels::RunCpuKernel("nonzero", {x}, Attrs())[0];
  ASSERT_EQ(want.shape(), (Shape{4, 2}));
  RunRanks(
      3,
      [&](Communicator& comm) {
        const DistTensor dx = DistTensor::ShardTensor(x, mesh, Parse("[S(0)]", 2), comm.rank());
        DispatchReport report;
        const std::vector<DistTensor> out = Dispatch("nonzero", {dx}, Attrs(), comm, &report);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out[0].dist_attr(), Parse("[R]", 2));
        if (comm.rank() == 2) {
          EXPECT_FALSE(out[0].has_local());
          EXPECT_EQ(out[0].shape(), (Shape{kDataDependentDim, 2}));
          return;
        }
        EXPECT_TRUE(report.resharded[0]);
        EXPECT_EQ(out[0].shape(), (Shape{4, 2}));
        const std::optional<Tensor> global = out[0].ToGlobal(comm);
        ASSERT_TRUE(global.has_value());
        ASSERT_EQ(global->shape(), want.shape());
        for (int64_t i = 0; i < want.numel(); ++i) EXPECT_EQ(global->data<int64_t>()[i], want.data<int64_t>()[i]);
      },
      Quick());
}

// Ranks holding different values under a replicated layout (a caller's error) get
// different counts: every rank throws the same typed error instead of a silent mismatch.
TEST(Dispatch, DataDependentSizesThatDifferBetweenRanksAreAnErrorOnEveryRank) {
  const Mesh mesh({2});
  RunRanks(
      2,
      [&](Communicator& comm) {
        const std::vector<double> values = comm.rank() == 0 ? std::vector<double>{1, 0, 2, 0}
                                                            : std::vector<double>{1, 1, 1, 0};
        const DistTensor dx = DistTensor::FromLocal(Tensor::FromVector<double>({4}, values), {4}, DType::kFloat64,
                                                    mesh, Parse("[R]", 1), comm.rank());
        try {
          Dispatch("unique", {dx}, Attrs().With("return_counts", true), comm);
          ADD_FAILURE() << "no error";
        } catch (const SpmdError& e) {
          EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
          EXPECT_EQ(e.field(), "outputs[0].shape");
          EXPECT_NE(std::string(e.what()).find("differ between the ranks"), std::string::npos) << e.what();
        }
        // The same values everywhere agree (the check passes and the shapes are the run's).
        const DistTensor same = DistTensor::FromLocal(Tensor::FromVector<double>({4}, {1, 0, 2, 0}), {4},
                                                      DType::kFloat64, mesh, Parse("[R]", 1), comm.rank());
        const std::vector<DistTensor> out = Dispatch("unique", {same}, Attrs().With("return_counts", true), comm);
        ASSERT_EQ(out.size(), 4u);
        EXPECT_EQ(out[0].shape(), (Shape{3}));
        EXPECT_EQ(out[1].shape(), (Shape{}));
        EXPECT_EQ(out[3].shape(), (Shape{3}));
      },
      Quick());
}

TEST(Dispatch, Errors) {
  const Mesh a({2}), b({2}, {1, 0});
  const Tensor x = Values({2, 2});
  RunRanks(
      2,
      [&](Communicator& comm) {
        const DistTensor dx = DistTensor::ShardTensor(x, a, Parse("[R]", 2), comm.rank());
        const DistTensor dy = DistTensor::ShardTensor(x, b, Parse("[R]", 2), comm.rank());
        try {
          Dispatch("no_such_op", {dx}, Attrs(), comm);
          ADD_FAILURE() << "no error";
        } catch (const SpmdError& e) {
          EXPECT_EQ(e.type(), ErrorType::kUnknownOp);
        }
        try {
          Dispatch("add", {dx, dy}, Attrs(), comm);
          ADD_FAILURE() << "no error";
        } catch (const SpmdError& e) {
          EXPECT_EQ(e.field(), "inputs[1].mesh");
        }
        try {
          Dispatch("add", {dx}, Attrs(), comm);
          ADD_FAILURE() << "no error";
        } catch (const SpmdError& e) {
          EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
        }
      },
      Quick());
}

}  // namespace
}  // namespace spmd::runtime
