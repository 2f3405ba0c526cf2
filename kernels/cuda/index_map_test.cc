// The index arithmetic of the CUDA shape / indexing / scatter / sort / fused / random
// kernels (kernels/cuda/index_map.h), run on the host: each property builds the plans and
// per-element functions the device kernels run, executes them over every element on host
// buffers (as the grid-stride loops would), and compares the bytes with the CPU kernel's
// output, or, for ids the device cannot refuse, checks that the CPU kernel refuses exactly
// the requests for which the device records an index fault. No GPU needed.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/family_test_util.h"
#include "kernels/cuda/index_fault.h"
#include "kernels/cuda/index_map.h"
#include "kernels/cuda/registry.h"
#include "rules/model/error.h"
#include "rules/model/attrs.h"
#include "rules/engine/op_decl.h"
#include "rules/engine/registry.h"
#include "rules/ops/shape_plan.h"

namespace spmd::kernels::cuda {
namespace {

using namespace family_test;

// ---- Copy plans against the shape ops ----------------------------------------------------------

RC_GTEST_PROP(CudaCopyPlans, SliceMatchesCpu, ()) {
  const DType dtype = GenDType();
  const Shape xs = GenShape(1, 4);
  const Tensor x = RandomTensor(xs, dtype);
  std::vector<int64_t> axes, starts, ends;
  std::vector<int64_t> begin(xs.size(), 0);
  Shape shape = xs;
  for (size_t d = 0; d < xs.size(); ++d) {
    if (!*rc::gen::arbitrary<bool>()) continue;
    axes.push_back(static_cast<int64_t>(d));
    const int64_t s = *rc::gen::inRange<int64_t>(-7, 8), e = *rc::gen::inRange<int64_t>(-7, 8);
    starts.push_back(s);
    ends.push_back(e);
    const auto clamp = [&](int64_t v) {
      if (v < 0) v += xs[d];
      return std::clamp<int64_t>(v, 0, xs[d]);
    };
    begin[d] = clamp(s);
    shape[d] = std::max<int64_t>(0, clamp(e) - clamp(s));
  }
  Attrs a;
  a.Set("axes", axes);
  a.Set("starts", starts);
  a.Set("ends", ends);
  const CpuResult cpu = RunCpu("slice", {x}, Norm("slice", a));
  RC_ASSERT(!cpu.error);
  Tensor out = Tensor::Uninitialized(shape, dtype);
  RunPlanHost(PlanSlice(xs, begin, shape, Es(dtype)), out.bytes(), x.bytes(), GenMaxUnit(), GenMaxRank());
  RC_ASSERT(SameBytes(out, cpu.outputs[0]));
}

// Random starts, ends and non-zero strides (both signs, some past the dims); begin, step
// and the sizes from the shared plan (rules/ops/shape_plan.h), the values from the CPU kernel.
RC_GTEST_PROP(CudaCopyPlans, StridedSliceMatchesCpu, ()) {
  const DType dtype = GenDType();
  const Shape xs = GenShape(1, 4);
  const Tensor x = RandomTensor(xs, dtype);
  std::vector<int64_t> axes, starts, ends, strides;
  for (size_t d = 0; d < xs.size(); ++d) {
    if (!*rc::gen::arbitrary<bool>()) continue;
    axes.push_back(static_cast<int64_t>(d));
    starts.push_back(*rc::gen::inRange<int64_t>(-7, 8));
    ends.push_back(*rc::gen::inRange<int64_t>(-7, 8));
    const int64_t stride = *rc::gen::inRange<int64_t>(1, 5);
    strides.push_back(*rc::gen::arbitrary<bool>() ? stride : -stride);
  }
  Attrs a;
  a.Set("axes", axes);
  a.Set("starts", starts);
  a.Set("ends", ends);
  a.Set("strides", strides);
  const CpuResult cpu = RunCpu("strided_slice", {x}, Norm("strided_slice", a));
  RC_ASSERT(!cpu.error);
  const shape_plan::SlicePlan plan = shape_plan::PlanStridedSlice(xs, a);
  Tensor out = Tensor::Uninitialized(plan.out, dtype);
  RunPlanHost(PlanSlice(xs, plan.begin, plan.sliced, Es(dtype), plan.step), out.bytes(), x.bytes(), GenMaxUnit(),
              GenMaxRank());
  RC_ASSERT(SameBytes(out, cpu.outputs[0]));
}

RC_GTEST_PROP(CudaCopyPlans, SplitAndUnbindMatchCpu, ()) {
  const DType dtype = GenDType();
  const Shape xs = GenShape(1, 4);
  const Tensor x = RandomTensor(xs, dtype);
  const int64_t axis = *rc::gen::inRange<int64_t>(0, static_cast<int64_t>(xs.size()));
  // Random sections summing to the dim.
  std::vector<int64_t> sections;
  int64_t left = xs[axis];
  while (left > 0 || sections.empty()) {
    const int64_t s = *rc::gen::inRange<int64_t>(0, left + 1);
    sections.push_back(s);
    left -= s;
    if (sections.size() > 6) {
      sections.back() += left;
      left = 0;
    }
  }
  Attrs a;
  a.Set("sections", sections);
  a.Set("axis", axis);
  const CpuResult cpu = RunCpu("split", {x}, Norm("split", a));
  RC_ASSERT(!cpu.error);
  RC_ASSERT(cpu.outputs.size() == sections.size());
  const int64_t max_unit = GenMaxUnit();
  const int max_rank = GenMaxRank();
  int64_t start = 0;
  for (size_t i = 0; i < sections.size(); ++i) {
    Shape s = xs;
    s[axis] = sections[i];
    Tensor out = Tensor::Uninitialized(s, dtype);
    RunPlanHost(PlanTakeRange(xs, axis, start, sections[i], Es(dtype)), out.bytes(), x.bytes(), max_unit, max_rank);
    RC_ASSERT(SameBytes(out, cpu.outputs[i]));
    start += sections[i];
  }
  // unbind: ranges of one.
  Attrs u;
  u.Set("axis", axis);
  const CpuResult ub = RunCpu("unbind", {x}, Norm("unbind", u));
  RC_ASSERT(!ub.error);
  for (int64_t i = 0; i < xs[axis]; ++i) {
    Shape s = xs;
    s[axis] = 1;
    Tensor out = Tensor::Uninitialized(s, dtype);
    RunPlanHost(PlanTakeRange(xs, axis, i, 1, Es(dtype)), out.bytes(), x.bytes(), max_unit, max_rank);
    Shape piece = xs;
    piece.erase(piece.begin() + axis);
    out.Reshape(piece);
    RC_ASSERT(SameBytes(out, ub.outputs[static_cast<size_t>(i)]));
  }
}

RC_GTEST_PROP(CudaCopyPlans, ConcatAndStackMatchCpu, ()) {
  const DType dtype = GenDType();
  const Shape base = GenShape(1, 4);
  const int64_t axis = *rc::gen::inRange<int64_t>(0, static_cast<int64_t>(base.size()));
  const int count = *rc::gen::inRange(1, 4);
  Tensors pieces;
  for (int i = 0; i < count; ++i) {
    Shape s = base;
    s[axis] = *rc::gen::inRange<int64_t>(0, 4);
    pieces.push_back(RandomTensor(s, dtype));
  }
  Attrs a;
  a.Set("axis", axis);
  const CpuResult cpu = RunCpu("concat", pieces, Norm("concat", a));
  RC_ASSERT(!cpu.error);
  Tensor out = Tensor::Uninitialized(cpu.outputs[0].shape(), dtype);
  const int64_t max_unit = GenMaxUnit();
  const int max_rank = GenMaxRank();
  int64_t at = 0;
  for (const Tensor& p : pieces) {
    RunPlanHost(PlanConcatPiece(out.shape(), axis, at, p.shape(), Es(dtype)), out.bytes(), p.bytes(), max_unit,
                max_rank);
    at += p.shape()[axis];
  }
  RC_ASSERT(SameBytes(out, cpu.outputs[0]));

  // stack: same-shape pieces, the new dim anywhere in [0, rank].
  Tensors same;
  for (int i = 0; i < count; ++i) same.push_back(RandomTensor(base, dtype));
  const int64_t saxis = *rc::gen::inRange<int64_t>(0, static_cast<int64_t>(base.size()) + 1);
  Attrs sa;
  sa.Set("axis", saxis);
  const CpuResult st = RunCpu("stack", same, Norm("stack", sa));
  RC_ASSERT(!st.error);
  Tensor sout = Tensor::Uninitialized(st.outputs[0].shape(), dtype);
  for (int i = 0; i < count; ++i) {
    RunPlanHost(PlanStackPiece(base, saxis, i, count, Es(dtype)), sout.bytes(), same[static_cast<size_t>(i)].bytes(),
                max_unit, max_rank);
  }
  RC_ASSERT(SameBytes(sout, st.outputs[0]));
}

RC_GTEST_PROP(CudaCopyPlans, ExpandMatchesCpu, ()) {
  const DType dtype = GenDType();
  Shape xs = GenShape(0, 3, 3);
  for (int64_t& d : xs) {
    if (*rc::gen::arbitrary<bool>()) d = 1;
  }
  const Tensor x = RandomTensor(xs, dtype);
  const int lead = *rc::gen::inRange(0, 3);
  std::vector<int64_t> target;
  Shape out_shape;
  for (int i = 0; i < lead; ++i) {
    target.push_back(*rc::gen::inRange<int64_t>(0, 4));
    out_shape.push_back(target.back());
  }
  for (int64_t d : xs) {
    int64_t t = d;
    if (d == 1) t = *rc::gen::inRange<int64_t>(0, 4);
    if (*rc::gen::arbitrary<bool>()) {
      target.push_back(-1);
      out_shape.push_back(d);
    } else {
      target.push_back(t);
      out_shape.push_back(t);
    }
  }
  Attrs a;
  a.Set("shape", target);
  const CpuResult cpu = RunCpu("expand", {x}, Norm("expand", a));
  RC_ASSERT(!cpu.error);
  Tensor out = Tensor::Uninitialized(out_shape, dtype);
  RunPlanHost(PlanExpand(xs, out_shape, Es(dtype)), out.bytes(), x.bytes(), GenMaxUnit(), GenMaxRank());
  RC_ASSERT(SameBytes(out, cpu.outputs[0]));
}

RC_GTEST_PROP(CudaCopyPlans, TileMatchesCpu, ()) {
  const DType dtype = GenDType();
  const Shape xs = GenShape(0, 3, 4);
  const Tensor x = RandomTensor(xs, dtype);
  const int n = *rc::gen::inRange(0, static_cast<int>(xs.size()) + 2);
  std::vector<int64_t> repeats;
  for (int i = 0; i < n; ++i) repeats.push_back(*rc::gen::inRange<int64_t>(0, 4));
  Attrs a;
  a.Set("repeat_times", repeats);
  const CpuResult cpu = RunCpu("tile", {x}, Norm("tile", a));
  RC_ASSERT(!cpu.error);
  const size_t rank = std::max(xs.size(), repeats.size());
  Shape in(rank - xs.size(), 1);
  in.insert(in.end(), xs.begin(), xs.end());
  Shape reps(rank - repeats.size(), 1);
  reps.insert(reps.end(), repeats.begin(), repeats.end());
  Tensor out = Tensor::Uninitialized(cpu.outputs[0].shape(), dtype);
  RunPlanHost(PlanTile(in, reps, Es(dtype)), out.bytes(), x.bytes(), GenMaxUnit(), GenMaxRank());
  RC_ASSERT(SameBytes(out, cpu.outputs[0]));
}

RC_GTEST_PROP(CudaCopyPlans, PadMatchesCpu, ()) {
  const DType dtype = GenDType();
  const Shape xs = GenShape(0, 3, 4);
  const Tensor x = RandomTensor(xs, dtype);
  std::vector<int64_t> paddings;
  for (size_t i = 0; i < 2 * xs.size(); ++i) paddings.push_back(*rc::gen::inRange<int64_t>(0, 3));
  // int64 refuses values beyond 9e18 (tested with the errors); every other dtype takes all.
  const double value = dtype == DType::kInt64 ? *rc::gen::element(0.0, -0.0, 1.5, -2.0, 65519.0, -7.9e18)
                                              : *rc::gen::element(0.0, -0.0, 1.5, -2.0, 1e39, -1e39, 3.0e38,
                                                                  65519.0, 1.0e-40);
  Attrs a;
  a.Set("paddings", paddings);
  a.Set("pad_value", value);
  const CpuResult cpu = RunCpu("pad", {x}, Norm("pad", a));
  RC_ASSERT(!cpu.error);
  Tensor out = Tensor::Uninitialized(cpu.outputs[0].shape(), dtype);
  const uint64_t bits = PadFillBits(dtype, value);
  for (int64_t i = 0; i < out.numel(); ++i) std::memcpy(out.bytes() + i * Es(dtype), &bits, static_cast<size_t>(Es(dtype)));
  RunPlanHost(PlanPad(xs, paddings, Es(dtype)), out.bytes(), x.bytes(), GenMaxUnit(), GenMaxRank());
  RC_ASSERT(SameBytes(out, cpu.outputs[0]));
}

int64_t Mod(int64_t v, int64_t n) {
  const int64_t r = v % n;
  return r < 0 ? r + n : r;
}

RC_GTEST_PROP(CudaCopyPlans, RollMatchesCpu, ()) {
  const DType dtype = GenDType();
  const Shape xs = GenShape(0, 4);
  const Tensor x = RandomTensor(xs, dtype);
  const int64_t rank = static_cast<int64_t>(xs.size());
  const bool flat = rank == 0 || *rc::gen::arbitrary<bool>();
  std::vector<int64_t> shifts, axes;
  if (flat) {
    shifts.push_back(*rc::gen::inRange<int64_t>(-20, 21));
  } else {
    const int n = *rc::gen::inRange(1, 4);
    for (int i = 0; i < n; ++i) {
      axes.push_back(*rc::gen::inRange<int64_t>(-rank, rank));
      shifts.push_back(*rc::gen::inRange<int64_t>(-9, 10));
    }
  }
  Attrs a;
  a.Set("shifts", shifts);
  a.Set("axis", axes);
  const CpuResult cpu = RunCpu("roll", {x}, Norm("roll", a));
  RC_ASSERT(!cpu.error);
  Tensor out = Tensor::Uninitialized(xs, dtype);
  CopyPlan plan;
  if (flat) {
    if (x.numel() > 0) plan = PlanRoll({x.numel()}, {Mod(shifts[0], x.numel())}, Es(dtype));
  } else {
    std::vector<int64_t> total(xs.size(), 0);
    for (size_t k = 0; k < axes.size(); ++k) {
      const int64_t d = axes[k] < 0 ? axes[k] + rank : axes[k];
      if (xs[d] > 0) total[d] = Mod(total[d] + Mod(shifts[k], xs[d]), xs[d]);
    }
    plan = PlanRoll(xs, total, Es(dtype));
  }
  if (x.numel() > 0) RunPlanHost(plan, out.bytes(), x.bytes(), GenMaxUnit(), GenMaxRank());
  RC_ASSERT(SameBytes(out, cpu.outputs[0]));
}

RC_GTEST_PROP(CudaCopyPlans, TriMatchesCpu, ()) {
  const DType dtype = GenDType();
  const Shape xs = GenShape(2, 4);
  const Tensor x = RandomTensor(xs, dtype);
  const int64_t diagonal = *rc::gen::inRange<int64_t>(-9, 10);
  const int which = *rc::gen::inRange(0, 4);
  const std::string op = which == 0 ? "triu" : which == 1 ? "tril" : "tril_triu";
  const bool lower = which == 1 || which == 2;
  Attrs a;
  a.Set("diagonal", diagonal);
  if (op == "tril_triu") a.Set("lower", lower);
  const CpuResult cpu = RunCpu(op, {x}, Norm(op, a));
  RC_ASSERT(!cpu.error);
  const int64_t rows = xs[xs.size() - 2], cols = xs.back();
  const int64_t d = std::clamp<int64_t>(diagonal, -rows - 1, cols + 1);
  Tensor out = Tensor::Uninitialized(xs, dtype);
  const int64_t es = Es(dtype);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t r = (i / cols) % rows, c = i % cols;
    if (TriZero(r, c, d, lower)) {
      std::memset(out.bytes() + i * es, 0, static_cast<size_t>(es));
    } else {
      std::memcpy(out.bytes() + i * es, x.bytes() + i * es, static_cast<size_t>(es));
    }
  }
  RC_ASSERT(SameBytes(out, cpu.outputs[0]));
}

RC_GTEST_PROP(CudaCopyPlans, PeelingKeepsTheCopy, ()) {
  // A plan of many dims that cannot merge (every dim transposed against its neighbour),
  // split into launches of few dims, moves what the unsplit plan moves.
  const Shape xs = GenShape(1, 6, 3);
  std::vector<int64_t> perm(xs.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::reverse(perm.begin(), perm.end());
  const std::vector<int64_t> strides = ContiguousStrides(xs);
  Shape out_shape;
  std::vector<int64_t> src;
  for (int64_t p : perm) {
    out_shape.push_back(xs[p]);
    src.push_back(strides[p]);
  }
  CopyPlan plan = MakePlan(out_shape, src, ContiguousStrides(out_shape), 8);
  for (size_t d = 0; d < plan.rot.size(); ++d) plan.rot[d] = out_shape[d] > 0 ? *rc::gen::inRange<int64_t>(0, out_shape[d]) : 0;
  const Tensor x = RandomTensor(xs, DType::kFloat64);
  Tensor a = Tensor(out_shape, DType::kFloat64), b = Tensor(out_shape, DType::kFloat64);
  RunPlanHost(plan, a.bytes(), x.bytes(), 16, kMaxPlanDims);
  RunPlanHost(plan, b.bytes(), x.bytes(), *rc::gen::element<int64_t>(1, 8, 16), *rc::gen::inRange(1, 3));
  RC_ASSERT(SameBytes(a, b));
}

// ---- Ids read on the device -------------------------------------------------------------------

RC_GTEST_PROP(CudaIndexMaps, SelectMatchesCpuAndFaultsWhereCpuRefuses, ()) {
  const DType dtype = GenDType();
  const Shape xs = GenShape(1, 3, 4);
  const Tensor x = RandomTensor(xs, dtype);
  const bool gather = *rc::gen::arbitrary<bool>();
  const bool zero_d = gather && *rc::gen::arbitrary<bool>();
  const int64_t axis = *rc::gen::inRange<int64_t>(0, static_cast<int64_t>(xs.size()));
  const bool sharded = *rc::gen::arbitrary<bool>();
  const int64_t start = sharded ? *rc::gen::inRange<int64_t>(0, 4) : 0;
  const Tensor ids = GenIds(zero_d ? Shape{} : Shape{*rc::gen::inRange<int64_t>(0, 5)}, -1, xs[axis] + start + 2);
  Attrs a;
  a.Set("axis", axis);
  const std::string op = gather ? "gather" : "index_select";
  Attrs attrs = Norm(op, a);
  if (sharded) attrs.mutable_local().vocab_start = start;
  const CpuResult cpu = RunCpu(op, {x, ids}, attrs);
  if (RefusedMix(cpu)) return;

  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= xs[d];
  for (size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
  const int64_t es = Es(dtype);
  const int64_t unit = RowUnit(inner * es, GenMaxUnit());
  SelectArgs sa;
  sa.outer = outer;
  sa.len = xs[axis];
  sa.ids = ids.numel();
  sa.start = start;
  sa.sharded = sharded;
  sa.index = ids.bytes();
  sa.index_dtype = ids.dtype();
  // Faults: over every output unit, or (empty output) the ids alone, as the kernel does.
  Shape out_shape = xs;
  if (zero_d) out_shape.erase(out_shape.begin() + axis); else out_shape[axis] = ids.numel();
  Tensor out = Tensor::Uninitialized(out_shape, dtype);
  bool fault = false;
  if (out.numel() == 0) {
    SelectArgs check = sa;
    check.outer = check.inner = 1;
    for (int64_t k = 0; k < sa.ids; ++k) fault = fault || SelectSource(check, k) == kReadBad;
  } else {
    sa.inner = inner * es / unit;
    const int64_t n = sa.outer * sa.ids * sa.inner;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = SelectSource(sa, i);
      if (s >= 0) {
        std::memcpy(out.bytes() + i * unit, x.bytes() + s * unit, static_cast<size_t>(unit));
      } else {
        std::memset(out.bytes() + i * unit, 0, static_cast<size_t>(unit));
        fault = fault || s == kReadBad;
      }
    }
  }
  if (cpu.error) {
    RC_LOG() << cpu.error->what() << "\n";
    RC_ASSERT(fault);
    RC_ASSERT(cpu.error->field() == std::string("inputs[1].data"));
  } else {
    RC_ASSERT(!fault);
    RC_ASSERT(SameBytes(out, cpu.outputs[0]));
  }
}

RC_GTEST_PROP(CudaIndexMaps, OneHotMatchesCpu, ()) {
  const int64_t classes = *rc::gen::inRange<int64_t>(1, 6);
  const Tensor ids = GenIds(GenShape(0, 2, 4), -1, classes + 1);
  Attrs a;
  a.Set("num_classes", classes);
  const CpuResult cpu = RunCpu("one_hot", {ids}, Norm("one_hot", a));
  Shape s = ids.shape();
  s.push_back(classes);
  Tensor out = Tensor::Uninitialized(s, DType::kFloat32);
  bool fault = false;
  for (int64_t i = 0; i < out.numel(); ++i) {
    bool bad = false;
    out.data<float>()[i] = OneHotValue(ids.bytes(), ids.dtype(), classes, i, &bad) ? 1.0f : 0.0f;
    fault = fault || bad;
  }
  if (cpu.error) {
    RC_ASSERT(fault);
    RC_ASSERT(cpu.error->field() == std::string("inputs[0].data"));
  } else {
    RC_ASSERT(!fault);
    RC_ASSERT(SameBytes(out, cpu.outputs[0]));
  }
}

// The flat slice index of every index row, as SliceKeys computes it chunk by chunk.
std::vector<int64_t> HostSliceKeys(const Shape& xs, const Tensor& index, int64_t depth, int64_t rows, bool* fault) {
  std::vector<int64_t> keys(static_cast<size_t>(rows), 0);
  const std::vector<NdChunk> chunks = NdChunks(xs, depth, index.bytes(), index.dtype());
  for (size_t j = 0; j < chunks.size(); ++j) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t before = j == 0 ? 0 : keys[r];
      keys[r] = NdSliceStep(chunks[j], r, before);
      if (before >= 0 && keys[r] < 0) *fault = true;
    }
  }
  return keys;
}

RC_GTEST_PROP(CudaIndexMaps, GatherNdMatchesCpu, ()) {
  const DType dtype = GenDType();
  const Shape xs = GenShape(0, 3, 4);
  const Tensor x = RandomTensor(xs, dtype);
  const int64_t depth = *rc::gen::inRange<int64_t>(0, static_cast<int64_t>(xs.size()) + 1);
  Shape is = GenShape(0, 2, 3);
  is.push_back(depth);
  int64_t hi = 1;
  for (int64_t j = 0; j < depth; ++j) hi = std::max(hi, xs[j]);
  const Tensor index = GenIds(is, -1, hi + 1);
  const CpuResult cpu = RunCpu("gather_nd", {x, index}, Norm("gather_nd", Attrs()));
  if (RefusedMix(cpu)) return;
  const int64_t rows = NumElements(Shape(is.begin(), is.end() - 1));
  bool fault = false;
  const std::vector<int64_t> keys = HostSliceKeys(xs, index, depth, rows, &fault);
  if (cpu.error) {
    RC_ASSERT(fault);
    RC_ASSERT(cpu.error->field() == std::string("inputs[1].data"));
    return;
  }
  RC_ASSERT(!fault);
  const int64_t slice = NumElements(Shape(xs.begin() + depth, xs.end()));
  const int64_t es = Es(dtype);
  Tensor out = Tensor::Uninitialized(cpu.outputs[0].shape(), dtype);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out.bytes() + r * slice * es, x.bytes() + keys[r] * slice * es, static_cast<size_t>(slice * es));
  }
  RC_ASSERT(SameBytes(out, cpu.outputs[0]));
}

// keys / order sorted stably by key (what the CUB radix sort gives).
void StableSortHost(std::vector<int64_t>& keys, std::vector<int64_t>& order) {
  std::vector<size_t> p(keys.size());
  std::iota(p.begin(), p.end(), 0);
  std::stable_sort(p.begin(), p.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  std::vector<int64_t> k2, o2;
  for (size_t i : p) {
    k2.push_back(keys[i]);
    o2.push_back(order[i]);
  }
  keys = k2;
  order = o2;
}

RC_GTEST_PROP(CudaIndexMaps, ScatterMatchesCpuWithDuplicates, ()) {
  const DType xd = *rc::gen::element(DType::kFloat64, DType::kFloat32, DType::kInt64);
  const DType ud = xd == DType::kInt64 ? *rc::gen::element(DType::kFloat64, DType::kFloat32) : xd;
  Shape xs = GenShape(1, 3, 4);
  const Tensor x = GenValues(xs, xd);
  const bool sharded = *rc::gen::arbitrary<bool>();
  const int64_t start = sharded ? *rc::gen::inRange<int64_t>(0, 3) : 0;
  const Tensor index = GenIds({*rc::gen::inRange<int64_t>(0, 7)}, -1, xs[0] + start + 2);
  Shape us = xs;
  us[0] = index.numel();
  const Tensor updates = GenValues(us, ud);
  const bool overwrite = *rc::gen::arbitrary<bool>();
  Attrs a;
  a.Set("overwrite", overwrite);
  Attrs attrs = Norm("scatter", a);
  if (sharded) attrs.mutable_local().vocab_start = start;
  const CpuResult cpu = RunCpu("scatter", {x, index, updates}, attrs);
  const int64_t rows = xs[0], k = index.numel();
  std::vector<int64_t> keys(static_cast<size_t>(k)), order(static_cast<size_t>(k));
  bool fault = false;
  for (int64_t i = 0; i < k; ++i) {
    bool bad = false;
    keys[i] = ScatterKey(index.bytes(), index.dtype(), i, rows, start, sharded, &bad);
    order[i] = i;
    fault = fault || bad;
  }
  if (cpu.error) {
    RC_ASSERT(fault);
    RC_ASSERT(cpu.error->field() == std::string("inputs[1].data"));
    return;
  }
  RC_ASSERT(!fault);
  StableSortHost(keys, order);
  const DType dtype = ud == DType::kFloat32 || xd == DType::kFloat32 ? DType::kFloat32 : DType::kFloat64;
  Tensor out = Tensor::Uninitialized(xs, dtype);
  const int64_t n = out.numel();
  const int64_t row = rows == 0 ? 0 : n / rows;
  for (int64_t e = 0; e < n; ++e) {
    if (dtype == DType::kFloat32) {
      out.data<float>()[e] = ScatterValue<float>(e, row, keys.data(), order.data(), k, overwrite, x.bytes(), xd,
                                                 updates.bytes(), ud);
    } else {
      out.data<double>()[e] = ScatterValue<double>(e, row, keys.data(), order.data(), k, overwrite, x.bytes(), xd,
                                                   updates.bytes(), ud);
    }
  }
  RC_ASSERT(SameBytes(out, cpu.outputs[0]));
}

RC_GTEST_PROP(CudaIndexMaps, ScatterNdAddMatchesCpuWithDuplicates, ()) {
  const DType xd = *rc::gen::element(DType::kFloat64, DType::kFloat32);
  const Shape xs = GenShape(0, 3, 3);
  const Tensor x = GenValues(xs, xd);
  const int64_t depth = *rc::gen::inRange<int64_t>(0, static_cast<int64_t>(xs.size()) + 1);
  Shape is = GenShape(1, 2, 5);
  is.push_back(depth);
  int64_t hi = 1;
  for (int64_t j = 0; j < depth; ++j) hi = std::max(hi, xs[j]);
  const Tensor index = GenIds(is, -1, hi + 1);
  Shape us(is.begin(), is.end() - 1);
  us.insert(us.end(), xs.begin() + depth, xs.end());
  const Tensor updates = GenValues(us, xd);
  const CpuResult cpu = RunCpu("scatter_nd_add", {x, index, updates}, Norm("scatter_nd_add", Attrs()));
  const int64_t rows = NumElements(Shape(is.begin(), is.end() - 1));
  bool fault = false;
  std::vector<int64_t> keys = HostSliceKeys(xs, index, depth, rows, &fault);
  if (cpu.error) {
    RC_ASSERT(fault);
    RC_ASSERT(cpu.error->field() == std::string("inputs[1].data"));
    return;
  }
  RC_ASSERT(!fault);
  const int64_t slice = NumElements(Shape(xs.begin() + depth, xs.end()));
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  StableSortHost(keys, order);
  Tensor out = Tensor::Uninitialized(xs, xd);
  for (int64_t e = 0; e < out.numel(); ++e) {
    if (xd == DType::kFloat32) {
      out.data<float>()[e] = ScatterNdValue<float>(e, slice, keys.data(), order.data(), rows, x.bytes(), xd,
                                                   updates.bytes(), xd);
    } else {
      out.data<double>()[e] = ScatterNdValue<double>(e, slice, keys.data(), order.data(), rows, x.bytes(), xd,
                                                     updates.bytes(), xd);
    }
  }
  RC_ASSERT(SameBytes(out, cpu.outputs[0]));
}

// ---- Sorting --------------------------------------------------------------------------------------

RC_GTEST_PROP(CudaSortKeys, KeysOrderAsTheCpu, ()) {
  // Before(a, b) of the CPU (ascending): NaN above numbers, -0 == +0.
  const double nan = __builtin_nan("");
  const double a = *rc::gen::element(nan, -nan, 0.0, -0.0, 1.0, -1.0, 1e300, -1e-300, __builtin_inf(), -__builtin_inf());
  const double b = *rc::gen::element(nan, -nan, 0.0, -0.0, 1.0, -1.0, 1e300, -1e-300, __builtin_inf(), -__builtin_inf());
  const auto less = [](double p, double q) {
    const bool pn = p != p, qn = q != q;
    if (pn != qn) return qn;
    return !pn && p < q;
  };
  RC_ASSERT((OrderKeyDouble(a) < OrderKeyDouble(b)) == less(a, b));
  RC_ASSERT((OrderKeyDouble(a) == OrderKeyDouble(b)) == (!less(a, b) && !less(b, a)));
  const float fa = static_cast<float>(a), fb = static_cast<float>(b);
  RC_ASSERT((OrderKeyFloat(fa) < OrderKeyFloat(fb)) == less(fa, fb));
  RC_ASSERT((OrderKeyFloat(fa) == OrderKeyFloat(fb)) == (!less(fa, fb) && !less(fb, fa)));
  const int64_t ia = *rc::gen::arbitrary<int64_t>(), ib = *rc::gen::arbitrary<int64_t>();
  RC_ASSERT((OrderKeyInt(ia) < OrderKeyInt(ib)) == (ia < ib));
}

RC_GTEST_PROP(CudaSortKeys, ArgsortAndTopkMatchCpu, ()) {
  const DType dtype = *rc::gen::element(DType::kFloat64, DType::kFloat32, DType::kInt64, DType::kBool);
  const Shape xs = GenShape(0, 3, 5);
  Tensor x = Tensor::Uninitialized(xs, dtype);
  const double nan = __builtin_nan("");
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = *rc::gen::element(nan, -nan, 0.0, -0.0, 1.0, -1.0, 2.0, __builtin_inf(), -__builtin_inf());
    switch (dtype) {
      case DType::kFloat64: x.data<double>()[i] = v; break;
      case DType::kFloat32: x.data<float>()[i] = static_cast<float>(v); break;
      case DType::kInt64: x.data<int64_t>()[i] = v == v && v - v == 0 ? static_cast<int64_t>(v) : 7; break;
      default: x.data<bool>()[i] = v > 0; break;
    }
  }
  const int64_t rank = static_cast<int64_t>(xs.size());
  const int64_t axis = rank == 0 ? 0 : *rc::gen::inRange<int64_t>(0, rank);
  const int64_t len = rank == 0 ? 1 : xs[axis];
  const bool topk = *rc::gen::arbitrary<bool>();
  const bool descending = *rc::gen::arbitrary<bool>();
  const int64_t k = topk ? (rank == 0 ? 1 : *rc::gen::inRange<int64_t>(0, len + 1)) : len;
  Attrs a;
  a.Set("axis", axis);
  if (topk) {
    a.Set("k", k);
    a.Set("largest", descending);
  } else {
    a.Set("descending", descending);
  }
  const std::string op = topk ? "topk" : "argsort";
  const CpuResult cpu = RunCpu(op, {x}, Norm(op, a));
  RC_ASSERT(!cpu.error);
  SortView v;
  v.outer = 1;
  for (int64_t d = 0; d < axis && rank > 0; ++d) v.outer *= xs[d];
  v.len = len;
  v.inner = 1;
  for (int64_t d = axis + 1; d < rank; ++d) v.inner *= xs[d];
  v.k = k;
  const int64_t lines = v.outer * v.inner, n = lines * v.len;
  std::vector<uint64_t> keys(static_cast<size_t>(n));
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t q = 0; q < n; ++q) {
    int64_t p = 0;
    const int64_t src = SortInput(v, q, &p);
    uint64_t key = 0;
    switch (dtype) {
      case DType::kFloat64: key = OrderKeyDouble(x.data<double>()[src]); break;
      case DType::kFloat32: key = OrderKeyFloat(x.data<float>()[src]); break;
      case DType::kInt64: key = OrderKeyInt(x.data<int64_t>()[src]); break;
      default: key = x.data<bool>()[src] ? 1 : 0; break;
    }
    keys[q] = descending ? ~key : key;
    pos[q] = p;
  }
  // Segmented stable sort.
  for (int64_t l = 0; l < lines; ++l) {
    std::vector<size_t> idx(static_cast<size_t>(len));
    std::iota(idx.begin(), idx.end(), static_cast<size_t>(l * len));
    std::stable_sort(idx.begin(), idx.end(), [&](size_t p, size_t q) { return keys[p] < keys[q]; });
    std::vector<int64_t> sorted;
    for (size_t i : idx) sorted.push_back(pos[i]);
    std::copy(sorted.begin(), sorted.end(), pos.begin() + l * len);
  }
  const Tensor& want = cpu.outputs[0];
  Tensor out = Tensor::Uninitialized(want.shape(), dtype);
  Tensor indices = Tensor::Uninitialized(want.shape(), DType::kInt64);
  const int64_t es = Es(dtype);
  for (int64_t e = 0; e < out.numel(); ++e) {
    const int64_t p = pos[SortOutputSlot(v, e)];
    std::memcpy(out.bytes() + e * es, x.bytes() + SortOutputSource(v, e, p) * es, static_cast<size_t>(es));
    indices.data<int64_t>()[e] = p;
  }
  RC_ASSERT(SameBytes(out, want));
  RC_ASSERT(SameBytes(indices, cpu.outputs[1]));
}

// ---- dropout and rope ---------------------------------------------------------------------------

RC_GTEST_PROP(CudaRandomMaps, DropoutOnAShardMatchesCpu, ()) {
  const DType dtype = *rc::gen::element(DType::kFloat64, DType::kFloat32, DType::kInt64);
  const Shape local = GenShape(0, 4, 4);
  const Tensor x = GenValues(local, dtype);
  std::vector<int64_t> offset, global;
  const bool sharded = *rc::gen::arbitrary<bool>();
  for (int64_t d : local) {
    const int64_t o = sharded ? *rc::gen::inRange<int64_t>(0, 3) : 0;
    offset.push_back(o);
    global.push_back(sharded ? d + o + *rc::gen::inRange<int64_t>(0, 3) : d);
  }
  Attrs a;
  a.Set("p", *rc::gen::element(0.0, 0.25, 0.5, 0.9, 1.0));
  a.Set("is_test", *rc::gen::inRange(0, 5) == 0);
  a.Set("mode", std::string(*rc::gen::arbitrary<bool>() ? "upscale_in_train" : "downscale_in_infer"));
  a.Set("seed", *rc::gen::inRange<int64_t>(-5, 1000));
  Attrs attrs = Norm("dropout", a);
  if (sharded) {
    attrs.mutable_local().offset = offset;
    attrs.mutable_local().global_shape = global;
  }
  const CpuResult cpu = RunCpu("dropout", {x}, attrs);
  RC_ASSERT(!cpu.error);
  DropoutArgs da;
  da.p = attrs.GetFloat("p");
  da.is_test = attrs.GetBool("is_test");
  da.upscale = attrs.GetString("mode") == "upscale_in_train";
  da.seed = attrs.GetInt("seed");
  const DType cd = dtype == DType::kFloat32 ? DType::kFloat32 : DType::kFloat64;
  Tensor out = Tensor::Uninitialized(local, cd);
  Tensor mask = Tensor::Uninitialized(local, DType::kBool);
  const CopyPlan plan = SimplifyPlan(PlanGlobalIndex(local, offset, global), 1);
  RC_ASSERT(plan.unit == 1);
  for (const CopyPlan& q : PeelPlan(plan, GenMaxRank())) {
    const CopyPlanArgs args = PlanArgs(q);
    for (int64_t i = 0; i < args.count; ++i) {
      int64_t g = 0, l = 0;
      PlanOffsets(args, i, &g, &l);
      bool keep = false;
      if (cd == DType::kFloat32) {
        out.data<float>()[l] = DropoutValue<float>(da, g, LoadAs<float>(x.bytes(), dtype, l), &keep);
      } else {
        out.data<double>()[l] = DropoutValue<double>(da, g, LoadAs<double>(x.bytes(), dtype, l), &keep);
      }
      mask.data<bool>()[l] = keep;
    }
  }
  RC_ASSERT(SameBytes(out, cpu.outputs[0]));
  RC_ASSERT(SameBytes(mask, cpu.outputs[1]));
}

RC_GTEST_PROP(CudaRandomMaps, RopeMatchesCpu, ()) {
  const DType dtype = *rc::gen::element(DType::kFloat64, DType::kFloat32);
  const bool neox = *rc::gen::arbitrary<bool>(), time_major = *rc::gen::arbitrary<bool>();
  const int64_t d0 = *rc::gen::inRange<int64_t>(0, 3), d1 = *rc::gen::inRange<int64_t>(0, 4);
  const int64_t heads = *rc::gen::inRange<int64_t>(0, 3), hd = 2 * *rc::gen::inRange<int64_t>(0, 4);
  const int64_t seq = time_major ? d0 : d1;
  const Shape qs{d0, d1, heads, hd};
  const bool four_d = *rc::gen::arbitrary<bool>();
  const Shape ts = four_d ? Shape{1, seq, 1, hd} : Shape{seq, hd};
  const int rotated = *rc::gen::inRange(1, 4);
  Tensors inputs;
  for (int i = 0; i < rotated; ++i) inputs.push_back(GenValues(qs, dtype));
  inputs.push_back(GenValues(ts, dtype));
  inputs.push_back(GenValues(ts, dtype));
  Attrs a;
  a.Set("use_neox_rotary_style", neox);
  a.Set("time_major", time_major);
  const std::string op = "fused_rotary_position_embedding";
  const CpuResult cpu = RunCpu(op, inputs, Norm(op, a));
  RC_ASSERT(!cpu.error);
  RopeArgs ra;
  ra.d1 = d1;
  ra.heads = heads;
  ra.head_dim = hd;
  ra.time_major = time_major;
  ra.neox = neox;
  const Tensor& sin = inputs[inputs.size() - 2];
  const Tensor& cos = inputs[inputs.size() - 1];
  for (int r = 0; r < rotated; ++r) {
    const Tensor& x = inputs[static_cast<size_t>(r)];
    Tensor out = Tensor::Uninitialized(qs, dtype);
    for (int64_t e = 0; e < out.numel(); ++e) {
      int64_t table = 0, partner = 0;
      double sign = 1;
      RopeIndex(ra, e, &table, &partner, &sign);
      const auto at = [&](const Tensor& t, int64_t i) { return LoadAs<double>(t.bytes(), dtype, i); };
      const double v = RopeValue(at(cos, table), at(sin, table), at(x, e), at(x, partner), sign);
      if (dtype == DType::kFloat32) out.data<float>()[e] = static_cast<float>(v); else out.data<double>()[e] = v;
    }
    RC_ASSERT(SameBytes(out, cpu.outputs[static_cast<size_t>(r)]));
  }
}

// ---- Ids of every dtype, the fault word, the kernel table --------------------------------------

TEST(CudaIndexMaps, DecodeIdAsTheCpuReadsIds) {
  const double values[] = {0.0, -0.0, 3.0, 2.5, -1.0, 9.0e15, 9.0e15 + 2, 1e300, __builtin_nan(""), __builtin_inf()};
  for (double v : values) {
    const Id limited = DecodeId(&v, DType::kFloat64, 0, true);
    const Id open = DecodeId(&v, DType::kFloat64, 0, false);
    const bool whole = v == v && v - v == 0 && static_cast<double>(static_cast<int64_t>(std::min(v, 1e18))) == std::min(v, 1e18);
    EXPECT_EQ(open.ok, whole) << v;
    EXPECT_EQ(limited.ok, whole && v <= 9.0e15 && v >= -9.0e15) << v;
    if (limited.ok) EXPECT_EQ(limited.value, static_cast<int64_t>(v));
  }
  const BFloat16 b(7.0f);
  EXPECT_EQ(DecodeId(&b, DType::kBFloat16, 0, true).value, 7);
  const bool t = true;
  EXPECT_EQ(DecodeId(&t, DType::kBool, 0, true).value, 1);
}

TEST(CudaIndexFaults, BitsNameTheOpsAndTheCpuFields) {
  const uint32_t word = static_cast<uint32_t>(IndexFaultOp::kScatter) | static_cast<uint32_t>(IndexFaultOp::kOneHot);
  const std::vector<IndexFaultOp> ops = IndexFaultOps(word);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_STREQ(IndexFaultOpName(ops[0]), "one_hot");
  EXPECT_STREQ(IndexFaultField(ops[0]), "inputs[0].data");
  EXPECT_STREQ(IndexFaultOpName(ops[1]), "scatter");
  EXPECT_STREQ(IndexFaultField(ops[1]), "inputs[1].data");
  EXPECT_TRUE(IndexFaultOps(0).empty());
}

TEST(CudaKernelTable, TheSixFamiliesHaveEveryOpOfTheirCpuFiles) {
  const char* ops[] = {"reshape", "flatten", "squeeze", "unsqueeze", "transpose", "split", "split_with_num",
                       "unbind", "concat", "stack", "slice", "strided_slice", "tile", "expand", "expand_as", "triu",
                       "tril", "tril_triu", "one_hot", "roll", "pad", "swiglu", "index_select", "gather", "gather_nd",
                       "scatter", "scatter_nd_add", "argsort", "topk", "fused_rotary_position_embedding",
                       "bmm_grad", "dropout", "fused_dropout_add"};
  for (const char* op : ops) EXPECT_NE(FindCudaKernel(op), nullptr) << op;
}

TEST(CudaCopyPlans, SimplifyMergesAndWidens) {
  // A contiguous [4, 6] float32 copy: one dim, 16-byte units (6 * 4 * 4 = 96 bytes).
  CopyPlan p = MakePlan({4, 6}, {6, 1}, {6, 1}, 4);
  CopyPlan s = SimplifyPlan(p, 16);
  ASSERT_EQ(s.dims.size(), 1u);
  EXPECT_EQ(s.unit, 16);
  EXPECT_EQ(s.dims[0], 6);
  // A slice of width 3 float32 out of rows of 6: rows stay apart, 4-byte units.
  s = SimplifyPlan(MakePlan({4, 3}, {6, 1}, {3, 1}, 4), 16);
  EXPECT_EQ(s.dims, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(s.unit, 4);
  // Rotated inner dim cannot merge into its outer neighbour; a rotated outer one can.
  CopyPlan r = MakePlan({2, 3}, {3, 1}, {3, 1}, 8);
  r.rot = {1, 0};
  s = SimplifyPlan(r, 8);
  EXPECT_EQ(s.dims, (std::vector<int64_t>{6}));
  EXPECT_EQ(s.rot, (std::vector<int64_t>{3}));
  r.rot = {0, 1};
  EXPECT_EQ(SimplifyPlan(r, 8).dims.size(), 2u);
}

}  // namespace
}  // namespace spmd::kernels::cuda
