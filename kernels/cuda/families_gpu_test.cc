// The CUDA kernels of the shape, indexing, scatter, sort, fused and random families against
// the CPU kernels, on a GPU: random requests per op (shapes with empty and odd dims, every
// dtype the op takes, valid and invalid attrs, ids in and out of range), run by
// RunCpuKernel and by RunCudaKernel on device copies of the inputs. The CUDA kernel must
// give the CPU kernel's outputs (same shapes and dtypes; the same bytes for the ops that
// move bytes, the same values for the computing ops, NaN matching any NaN, and swiglu
// within the bound below) or refuse with the same error type and field; where
// the CPU refuses an id on inputs[i].data, the CUDA kernel records an index fault that
// CheckIndexFaults turns into that error. Skipped without a GPU.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/family_test_util.h"
#include "kernels/cuda/index_fault.h"
#include "kernels/cuda/registry.h"
#include "rules/model/attrs.h"

namespace spmd::kernels::cuda {
namespace {

using namespace family_test;

struct Request {
  std::string op;
  Tensors inputs;
  Attrs attrs;  // normalised, plus localized attrs
  double tol = 0;  // computed ops: 0 equal values, else |gpu - cpu| <= tol * (1 + |cpu|)
};

// Values with few mantissa bits: products and short sums are exact in float32, so every
// summation order (cuBLAS's, the CPU's) gives the same bits.
Tensor GenExact(const Shape& shape, DType dtype) {
  Tensor t = Tensor::Uninitialized(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = *rc::gen::element(0.5, -1.25, 2.0, 0.75, -0.125, 0.0, 3.0);
    if (dtype == DType::kFloat64) t.data<double>()[i] = v; else t.data<float>()[i] = static_cast<float>(v);
  }
  return t;
}

// An axis in range most of the time, out of range sometimes.
int64_t GenAxis(int64_t rank) { return *rc::gen::inRange<int64_t>(-rank - 1, rank + 1); }

DType GenFloat() { return *rc::gen::element(DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16); }

Request GenRequest(const std::string& op) {
  Request r;
  r.op = op;
  Attrs a;
  const DType dt = GenDType();
  if (op == "reshape") {
    const Tensor x = RandomTensor(GenShape(0, 3), dt);
    std::vector<int64_t> target = *rc::gen::element(std::vector<int64_t>{-1}, std::vector<int64_t>{x.numel()},
                                                    std::vector<int64_t>{1, -1}, std::vector<int64_t>{0, -1},
                                                    std::vector<int64_t>{x.numel() + 1}, std::vector<int64_t>{-1, -1});
    a.Set("shape", target);
    r.inputs = {x};
  } else if (op == "flatten") {
    const Tensor x = RandomTensor(GenShape(0, 4), dt);
    a.Set("start_axis", GenAxis(x.rank()));
    a.Set("stop_axis", GenAxis(x.rank()));
    r.inputs = {x};
  } else if (op == "squeeze" || op == "unsqueeze") {
    Shape s = GenShape(0, 4, 3);
    const Tensor x = RandomTensor(s, dt);
    std::vector<int64_t> axis;
    const int n = *rc::gen::inRange(0, 3);
    for (int i = 0; i < n; ++i) axis.push_back(GenAxis(x.rank() + (op == "unsqueeze" ? n : 0)));
    a.Set("axis", axis);
    r.inputs = {x};
  } else if (op == "transpose") {
    const Tensor x = RandomTensor(GenShape(0, 4), dt);
    std::vector<int64_t> perm(static_cast<size_t>(x.rank()));
    std::iota(perm.begin(), perm.end(), 0);
    perm = *rc::gen::elementOf(std::vector<std::vector<int64_t>>{perm, std::vector<int64_t>(perm.rbegin(), perm.rend())});
    if (*rc::gen::inRange(0, 8) == 0) perm.push_back(0);
    a.Set("perm", perm);
    r.inputs = {x};
  } else if (op == "split" || op == "split_with_num" || op == "unbind") {
    const Tensor x = RandomTensor(GenShape(1, 3), dt);
    const int64_t axis = GenAxis(x.rank());
    a.Set("axis", axis);
    if (op == "split") {
      std::vector<int64_t> sections;
      const int n = *rc::gen::inRange(1, 4);
      for (int i = 0; i < n; ++i) sections.push_back(*rc::gen::inRange<int64_t>(-1, 4));
      a.Set("sections", sections);
    } else if (op == "split_with_num") {
      a.Set("num", *rc::gen::inRange<int64_t>(0, 4));
    }
    r.inputs = {x};
  } else if (op == "concat" || op == "stack") {
    const Shape base = GenShape(1, 3, 4);
    const int64_t axis = GenAxis(static_cast<int64_t>(base.size()));
    const int n = *rc::gen::inRange(1, 4);
    for (int i = 0; i < n; ++i) {
      Shape s = base;
      if (op == "concat" && axis >= 0 && axis < static_cast<int64_t>(s.size())) s[axis] = *rc::gen::inRange<int64_t>(0, 4);
      if (*rc::gen::inRange(0, 10) == 0) s.push_back(2);  // a mismatch
      r.inputs.push_back(RandomTensor(s, *rc::gen::inRange(0, 10) == 0 ? GenDType() : dt));
    }
    a.Set("axis", axis);
  } else if (op == "slice") {
    const Tensor x = RandomTensor(GenShape(1, 4), dt);
    std::vector<int64_t> axes, starts, ends;
    for (int64_t d = 0; d < x.rank(); ++d) {
      if (!*rc::gen::arbitrary<bool>()) continue;
      axes.push_back(d);
      starts.push_back(*rc::gen::inRange<int64_t>(-7, 8));
      ends.push_back(*rc::gen::inRange<int64_t>(-7, 8));
    }
    a.Set("axes", axes);
    a.Set("starts", starts);
    a.Set("ends", ends);
    if (!axes.empty() && *rc::gen::arbitrary<bool>()) a.Set("decrease_axis", std::vector<int64_t>{axes[0]});
    r.inputs = {x};
  } else if (op == "strided_slice") {
    const Tensor x = RandomTensor(GenShape(1, 4), dt);
    std::vector<int64_t> axes, starts, ends, strides;
    for (int64_t d = 0; d < x.rank(); ++d) {
      if (!*rc::gen::arbitrary<bool>()) continue;
      axes.push_back(d);
      starts.push_back(*rc::gen::inRange<int64_t>(-7, 8));
      ends.push_back(*rc::gen::inRange<int64_t>(-7, 8));
      strides.push_back(*rc::gen::inRange<int64_t>(-3, 4));  // 0 now and then: refused alike
    }
    a.Set("axes", axes);
    a.Set("starts", starts);
    a.Set("ends", ends);
    a.Set("strides", strides);
    r.inputs = {x};
  } else if (op == "tile") {
    const Tensor x = RandomTensor(GenShape(0, 3, 4), dt);
    std::vector<int64_t> reps;
    const int n = *rc::gen::inRange(0, static_cast<int>(x.rank()) + 2);
    for (int i = 0; i < n; ++i) reps.push_back(*rc::gen::inRange<int64_t>(-1, 4));
    a.Set("repeat_times", reps);
    r.inputs = {x};
  } else if (op == "expand" || op == "expand_as") {
    Shape s = GenShape(0, 3, 3);
    for (int64_t& d : s) {
      if (*rc::gen::arbitrary<bool>()) d = 1;
    }
    const Tensor x = RandomTensor(s, dt);
    std::vector<int64_t> target;
    const int lead = *rc::gen::inRange(0, 3);
    for (int i = 0; i < lead; ++i) target.push_back(*rc::gen::inRange<int64_t>(0, 4));
    for (int64_t d : s) target.push_back(d == 1 ? *rc::gen::inRange<int64_t>(-1, 4) : *rc::gen::element(d + 0, int64_t{-1}, d + 1));
    r.inputs = {x};
    if (op == "expand") {
      a.Set("shape", target);
    } else {
      for (int64_t& t : target) t = std::max<int64_t>(t, 0);
      r.inputs.push_back(RandomTensor(target, DType::kBool));
      if (*rc::gen::arbitrary<bool>()) a.Set("target_shape", target);
    }
  } else if (op == "triu" || op == "tril" || op == "tril_triu") {
    const Tensor x = RandomTensor(GenShape(1, 4), dt);
    a.Set("diagonal", *rc::gen::inRange<int64_t>(-8, 9));
    if (op == "tril_triu") a.Set("lower", *rc::gen::arbitrary<bool>());
    r.inputs = {x};
  } else if (op == "one_hot") {
    const int64_t classes = *rc::gen::inRange<int64_t>(0, 6);
    a.Set("num_classes", classes);
    r.inputs = {GenIds(GenShape(0, 2, 5), -1, classes + 1)};
  } else if (op == "roll") {
    const Tensor x = RandomTensor(GenShape(0, 4), dt);
    std::vector<int64_t> shifts, axes;
    const int n = *rc::gen::inRange(0, 3);
    for (int i = 0; i < n; ++i) axes.push_back(GenAxis(x.rank()));
    for (int i = 0; i < std::max(n, 1); ++i) shifts.push_back(*rc::gen::inRange<int64_t>(-30, 31));
    a.Set("shifts", shifts);
    a.Set("axis", axes);
    r.inputs = {x};
  } else if (op == "pad") {
    const Tensor x = RandomTensor(GenShape(0, 3, 4), dt);
    std::vector<int64_t> paddings;
    for (int64_t i = 0; i < 2 * x.rank(); ++i) paddings.push_back(*rc::gen::inRange<int64_t>(-1, 3));
    a.Set("paddings", paddings);
    a.Set("pad_value", *rc::gen::element(0.0, 1.5, -2.0, 1e39, -7.0e18, 1e19));
    r.inputs = {x};
  } else if (op == "swiglu") {
    const DType f = GenFloat();
    const Shape s = GenShape(0, 3);
    r.inputs = {GenValues(s, f == DType::kFloat64 ? f : DType::kFloat32), GenValues(s, f == DType::kFloat64 ? f : DType::kFloat32)};
    r.tol = f == DType::kFloat64 ? 1e-14 : 1e-6;
  } else if (op == "index_select" || op == "gather") {
    const Tensor x = RandomTensor(GenShape(1, 3, 4), dt);
    const int64_t axis = GenAxis(x.rank());
    const int64_t d = x.shape()[axis < 0 ? std::max<int64_t>(0, axis + x.rank()) : std::min(axis, x.rank() - 1)];
    const bool zero_d = *rc::gen::inRange(0, 4) == 0;
    r.inputs = {x, GenIds(zero_d ? Shape{} : Shape{*rc::gen::inRange<int64_t>(0, 6)}, -1, d + 2)};
    a.Set("axis", axis);
    if (*rc::gen::arbitrary<bool>()) r.attrs.mutable_local().vocab_start = *rc::gen::inRange<int64_t>(0, 3);
  } else if (op == "gather_nd") {
    const Tensor x = RandomTensor(GenShape(0, 3, 4), dt);
    Shape is = GenShape(0, 2, 3);
    is.push_back(*rc::gen::inRange<int64_t>(0, x.rank() + 2));
    r.inputs = {x, GenIds(is, -1, 5)};
  } else if (op == "scatter") {
    Shape s = GenShape(1, 3, 4);
    const DType f = GenFloat();
    const Tensor x = RandomTensor(s, f);
    s[0] = *rc::gen::inRange<int64_t>(0, 7);
    r.inputs = {x, GenIds({s[0]}, -1, x.shape()[0] + 2), RandomTensor(s, f)};
    a.Set("overwrite", *rc::gen::arbitrary<bool>());
    if (*rc::gen::arbitrary<bool>()) r.attrs.mutable_local().vocab_start = *rc::gen::inRange<int64_t>(0, 3);
  } else if (op == "scatter_nd_add") {
    const DType f = GenFloat();
    const Tensor x = RandomTensor(GenShape(0, 3, 3), f);
    const int64_t depth = *rc::gen::inRange<int64_t>(0, x.rank() + 1);
    Shape is = GenShape(1, 2, 6);
    is.push_back(depth);
    Shape us(is.begin(), is.end() - 1);
    us.insert(us.end(), x.shape().begin() + depth, x.shape().end());
    r.inputs = {x, GenIds(is, -1, 4), RandomTensor(us, f)};
  } else if (op == "argsort" || op == "topk") {
    const Tensor x = RandomTensor(GenShape(0, 3, 6), dt);
    a.Set("axis", GenAxis(x.rank()));
    if (op == "topk") {
      a.Set("k", *rc::gen::inRange<int64_t>(-1, 7));
      a.Set("largest", *rc::gen::arbitrary<bool>());
    } else {
      a.Set("descending", *rc::gen::arbitrary<bool>());
    }
    r.inputs = {x};
  } else if (op == "fused_rotary_position_embedding") {
    const DType f = GenFloat();
    const bool time_major = *rc::gen::arbitrary<bool>();
    const int64_t d0 = *rc::gen::inRange<int64_t>(0, 3), d1 = *rc::gen::inRange<int64_t>(0, 4);
    const int64_t heads = *rc::gen::inRange<int64_t>(0, 3), hd = *rc::gen::inRange<int64_t>(0, 7);
    const int64_t seq = time_major ? d0 : d1;
    const int rotated = *rc::gen::inRange(1, 4);
    for (int i = 0; i < rotated; ++i) r.inputs.push_back(RandomTensor({d0, d1, heads, hd}, f));
    const Shape ts = *rc::gen::arbitrary<bool>() ? Shape{seq, hd} : Shape{1, seq, 1, hd};
    r.inputs.push_back(RandomTensor(ts, f));
    r.inputs.push_back(RandomTensor(ts, f));
    a.Set("use_neox_rotary_style", *rc::gen::arbitrary<bool>());
    a.Set("time_major", time_major);
  } else if (op == "bmm_grad") {
    const DType f = *rc::gen::element(DType::kFloat32, DType::kFloat64);
    const int64_t b = *rc::gen::inRange<int64_t>(0, 3), m = *rc::gen::inRange<int64_t>(0, 5);
    const int64_t k = *rc::gen::inRange<int64_t>(0, 5), n = *rc::gen::inRange<int64_t>(0, 5);
    r.inputs = {GenExact({b, m, k}, f), GenExact({b, k, n}, f), GenExact({b, m, *rc::gen::element(n, n + 1)}, f)};
  } else if (op == "dropout" || op == "fused_dropout_add") {
    const DType f = GenFloat();
    const Shape s = GenShape(0, 3, 6);
    r.inputs = {RandomTensor(s, f)};
    if (op == "fused_dropout_add") r.inputs.push_back(RandomTensor(s, f));
    a.Set("p", *rc::gen::element(0.0, 0.3, 0.5, 1.0, 1.5));
    a.Set("is_test", *rc::gen::inRange(0, 4) == 0);
    a.Set("mode", std::string(*rc::gen::arbitrary<bool>() ? "upscale_in_train" : "downscale_in_infer"));
    a.Set("seed", *rc::gen::inRange<int64_t>(0, 100));
    if (*rc::gen::arbitrary<bool>()) {
      std::vector<int64_t> offset, global;
      for (int64_t d : s) {
        offset.push_back(*rc::gen::inRange<int64_t>(0, 3));
        global.push_back(d + offset.back() + *rc::gen::inRange<int64_t>(0, 2));
      }
      r.attrs.mutable_local().offset = offset;
      r.attrs.mutable_local().global_shape = global;
    }
  }
  Attrs normalized = Norm(op, a);
  for (const auto& [name, value] : r.attrs.values()) normalized.Set(name, value);
  normalized.mutable_local() = r.attrs.local();
  r.attrs = normalized;
  return r;
}

// The ops whose outputs are computed (not moved bytes).
bool Computes(const std::string& op) {
  return op == "swiglu" || op == "scatter" || op == "scatter_nd_add" || op == "fused_rotary_position_embedding" ||
         op == "bmm_grad" || op == "dropout" || op == "fused_dropout_add" || op == "one_hot";
}

// Element i of a host tensor as double.
double At(const Tensor& t, int64_t i) { return LoadAs<double>(t.bytes(), t.dtype(), i); }

// The request on the CPU and on device 0; see the file's header for what must agree.
void CheckAgainstCpu(const Request& r, Stream stream) {
  const Device dev = Device::Cuda(0);
  const CpuResult cpu = RunCpu(r.op, r.inputs, r.attrs);
  Tensors dev_inputs;
  for (const Tensor& t : r.inputs) dev_inputs.push_back(ToDevice(t, dev, stream));
  TakeIndexFaults(dev);  // nothing left over from an earlier request
  Tensors gpu;
  std::optional<SpmdError> gerr;
  try {
    gpu = RunCudaKernel(r.op, TensorArgs(dev_inputs), r.attrs);
  } catch (const SpmdError& e) {
    gerr = e;
  }
  const uint32_t faults = TakeIndexFaults(dev);
  if (cpu.error) {
    RC_LOG() << r.op << ": the CPU refuses: " << cpu.error->what() << "\n";
    if (gerr) {
      RC_ASSERT(gerr->type() == cpu.error->type());
      RC_ASSERT(gerr->field() == cpu.error->field());
      return;
    }
    // Only an id living on the device may get past the host: then a fault names the field.
    const std::vector<IndexFaultOp> ops = IndexFaultOps(faults);
    RC_ASSERT(!ops.empty());
    RC_ASSERT(cpu.error->type() == ErrorType::kInvalidArgument);
    RC_ASSERT(std::string(IndexFaultField(ops[0])) == cpu.error->field());
    RC_ASSERT(std::string(IndexFaultOpName(ops[0])) == r.op);
    return;
  }
  if (gerr) RC_LOG() << r.op << ": the GPU refuses: " << gerr->what() << "\n";
  RC_ASSERT(!gerr);
  RC_ASSERT(faults == 0u);
  RC_ASSERT(gpu.size() == cpu.outputs.size());
  for (size_t i = 0; i < gpu.size(); ++i) {
    RC_ASSERT(gpu[i].device() == dev);
    const Tensor host = ToHost(gpu[i]);
    const Tensor& want = cpu.outputs[i];
    RC_ASSERT(host.shape() == want.shape());
    RC_ASSERT(host.dtype() == want.dtype());
    if (!Computes(r.op)) {  // moved bytes: the same bytes, NaN payloads included
      RC_ASSERT(SameBytes(host, want));
      continue;
    }
    // Computed values: equal (with the sign of zero), or within the op's bound; a NaN
    // matches any NaN (GPU arithmetic gives the canonical NaN, x86 keeps payloads). 2-byte
    // outputs of a bounded op: one rounding step of the 2-byte type on top of the bound.
    const double tol = r.tol == 0 ? 0
                       : want.dtype() == DType::kBFloat16 ? 1.0 / 128
                       : want.dtype() == DType::kFloat16  ? 1.0 / 1024
                                                          : r.tol;
    for (int64_t e = 0; e < want.numel(); ++e) {
      const double g = At(host, e), c = At(want, e);
      if (std::isnan(c)) {
        RC_ASSERT(std::isnan(g));
      } else if (tol == 0) {
        RC_ASSERT(g == c && std::signbit(g) == std::signbit(c));
      } else {
        RC_ASSERT(std::fabs(g - c) <= tol * (1 + std::fabs(c)));
      }
    }
  }
}

const char* const kOps[] = {"reshape", "flatten", "squeeze", "unsqueeze", "transpose", "split", "split_with_num",
                            "unbind", "concat", "stack", "slice", "strided_slice", "tile", "expand", "expand_as",
                            "triu", "tril", "tril_triu", "one_hot", "roll", "pad", "swiglu", "index_select", "gather",
                            "gather_nd", "scatter", "scatter_nd_add", "argsort", "topk",
                            "fused_rotary_position_embedding", "bmm_grad", "dropout", "fused_dropout_add"};

class CudaFamiliesGpu : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::string why;
    if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
    EnableCuda();
  }
};

TEST_P(CudaFamiliesGpu, MatchesTheCpuKernel) {
  const std::string op = GetParam();
  if (op == "bmm_grad" && FindCudaKernel("matmul_grad") == nullptr) {
    GTEST_SKIP() << "bmm_grad runs matmul_grad's CUDA kernel, which this build does not have";
  }
  // Half the cases on the default stream, half on a stream of their own.
  const Stream side = NewStream(Device::Cuda(0));
  const bool ok = rc::check(op + " on the GPU equals the CPU", [&] {
    const Request r = GenRequest(op);
    CheckAgainstCpu(r, *rc::gen::arbitrary<bool>() ? side : Stream{});
  });
  EXPECT_TRUE(ok);
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaFamiliesGpu, ::testing::ValuesIn(kOps));

// Larger layouts than the generators reach: many dims (split into several launches), a long
// sort line and many short ones, scatter with many duplicates, dropout on a large shard.
class CudaFamiliesGpuLarge : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
    EnableCuda();
  }
  void Check(const std::string& op, Tensors inputs, const Attrs& given, const Attrs& local = {}) {
    Request r;
    r.op = op;
    r.inputs = std::move(inputs);
    r.attrs = Norm(op, given);
    for (const auto& [name, value] : local.values()) r.attrs.Set(name, value);
    r.attrs.mutable_local() = local.local();
    const bool ok = rc::check(op, [&] { CheckAgainstCpu(r, Stream{}); });
    EXPECT_TRUE(ok) << op;
  }
};

TEST_F(CudaFamiliesGpuLarge, ManyDimsLongLinesAndDuplicates) {
  const bool ok = rc::check("large layouts", [&] {
    // 18 dims of 2 transposed against the contiguous order: no merges, several launches.
    Shape s(18, 2);
    std::vector<int64_t> perm(18);
    std::iota(perm.begin(), perm.end(), 0);
    std::reverse(perm.begin(), perm.end());
    Attrs t;
    t.Set("perm", perm);
    Request r{"transpose", {RandomTensor(s, DType::kFloat32)}, Norm("transpose", t)};
    CheckAgainstCpu(r, Stream{});
    // roll on every dim: no dim merges (each is rotated), 18 dims in launches of 16.
    Attrs roll;
    roll.Set("shifts", std::vector<int64_t>(18, 1));
    roll.Set("axis", perm);
    r = {"roll", {RandomTensor(s, DType::kBFloat16)}, Norm("roll", roll)};
    CheckAgainstCpu(r, Stream{});
    Attrs sl;
    sl.Set("axes", std::vector<int64_t>{17});
    sl.Set("starts", std::vector<int64_t>{1});
    sl.Set("ends", std::vector<int64_t>{2});
    r = {"slice", {RandomTensor(s, DType::kInt64)}, Norm("slice", sl)};
    CheckAgainstCpu(r, Stream{});
    // A long sort line and many lines.
    Attrs so;
    so.Set("axis", int64_t{-1});
    so.Set("descending", true);
    r = {"argsort", {GenValues({3, 5000}, DType::kFloat32)}, Norm("argsort", so)};
    CheckAgainstCpu(r, Stream{});
    so.Set("axis", int64_t{0});
    r = {"argsort", {GenValues({300, 40}, DType::kFloat64)}, Norm("argsort", so)};
    CheckAgainstCpu(r, Stream{});
    // scatter: 3000 updates into 7 rows.
    Tensor ids = Tensor::Uninitialized({3000}, DType::kInt64);
    for (int64_t i = 0; i < 3000; ++i) ids.data<int64_t>()[i] = (i * 5) % 7;
    Attrs sc;
    sc.Set("overwrite", *rc::gen::arbitrary<bool>());
    r = {"scatter", {GenValues({7, 33}, DType::kFloat32), ids, GenValues({3000, 33}, DType::kFloat32)}, Norm("scatter", sc)};
    CheckAgainstCpu(r, Stream{});
    // dropout over 2^20 elements of a shard.
    Attrs d;
    d.Set("p", 0.4);
    d.Set("seed", int64_t{12345});
    Attrs dn = Norm("dropout", d);
    dn.mutable_local().offset = std::vector<int64_t>{64, 0};
    dn.mutable_local().global_shape = std::vector<int64_t>{2048, 1024};
    r = {"dropout", {GenValues({1024, 1024}, DType::kFloat32)}, dn};
    CheckAgainstCpu(r, Stream{});
  });
  EXPECT_TRUE(ok);
}

TEST_F(CudaFamiliesGpuLarge, ABadIdIsTheCpuErrorWhenTheHostLooks) {
  const Device dev = Device::Cuda(0);
  TakeIndexFaults(dev);
  const Tensor x = ToDevice(Tensor::FromVector<float>({3}, {1, 2, 3}), dev);
  const Tensor ids = ToDevice(Tensor::FromVector<int64_t>({2}, {0, 3}), dev);
  Attrs a;
  a.Set("axis", int64_t{0});
  const Tensors out =
      RunCudaKernel("index_select", TensorArgs(std::vector<const Tensor*>{&x, &ids}), Norm("index_select", a));
  // ToHost (like CudaBackend::Synchronize) checks the fault word: the CPU kernel's error.
  try {
    ToHost(out[0]);
    ADD_FAILURE() << "no fault recorded";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
    EXPECT_EQ(e.field(), "inputs[1].data");
  }
  EXPECT_EQ(TakeIndexFaults(dev), 0u);  // cleared by the look
  // What the device wrote: the bad id's element is zero; the good one is x[0].
  const Tensor host = ToHost(out[0]);
  EXPECT_EQ(host.data<float>()[0], 1.0f);
  EXPECT_EQ(host.data<float>()[1], 0.0f);
}

}  // namespace
}  // namespace spmd::kernels::cuda
