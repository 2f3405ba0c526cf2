#include "kernels/cuda/strided.h"

#include <stdexcept>
#include <string>

#include "kernels/cpu/internal.h"

namespace spmd::kernels::cuda {

int64_t StridedPlan::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

StridedPlan Collapse(StridedPlan plan) {
  const size_t n = plan.strides.size();
  if (plan.base.size() != n) plan.base.resize(n, 0);
  for (int64_t d : plan.dims) {
    if (d == 0) {  // nothing to walk
      StridedPlan empty;
      empty.dims = {0};
      empty.strides.assign(n, {0});
      empty.base = plan.base;
      return empty;
    }
  }
  StridedPlan out;
  out.base = plan.base;
  out.strides.assign(n, {});
  for (size_t d = 0; d < plan.dims.size(); ++d) {
    if (plan.dims[d] == 1) continue;
    bool merge = !out.dims.empty();
    for (size_t k = 0; k < n && merge; ++k) {
      merge = out.strides[k].back() == plan.strides[k][d] * plan.dims[d];
    }
    if (merge) {
      out.dims.back() *= plan.dims[d];
      for (size_t k = 0; k < n; ++k) out.strides[k].back() = plan.strides[k][d];
    } else {
      out.dims.push_back(plan.dims[d]);
      for (size_t k = 0; k < n; ++k) out.strides[k].push_back(plan.strides[k][d]);
    }
  }
  if (out.dims.empty()) {
    out.dims = {1};
    for (size_t k = 0; k < n; ++k) out.strides[k] = {1};
  }
  return out;
}

namespace {

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

}  // namespace

StridedPlan PlanCopyBox(const std::vector<int64_t>& src_shape, const std::vector<int64_t>& src_at,
                        const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_at,
                        const std::vector<int64_t>& extent) {
  const std::vector<int64_t> ss = RowMajorStrides(src_shape);
  const std::vector<int64_t> ds = RowMajorStrides(dst_shape);
  StridedPlan plan;
  plan.dims = extent;
  plan.strides = {ss, ds};
  plan.base = {0, 0};
  for (size_t d = 0; d < extent.size(); ++d) {
    plan.base[0] += src_at[d] * ss[d];
    plan.base[1] += dst_at[d] * ds[d];
  }
  return Collapse(std::move(plan));
}

StridedPlan PlanPermute(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& perm) {
  const std::vector<int64_t> xs = RowMajorStrides(x_shape);
  StridedPlan plan;
  plan.dims.resize(perm.size());
  std::vector<int64_t> read(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    plan.dims[i] = x_shape[perm[i]];
    read[i] = xs[perm[i]];
  }
  plan.strides = {read, RowMajorStrides(plan.dims)};
  plan.base = {0, 0};
  return Collapse(std::move(plan));
}

namespace {

bool InnerContiguous(const StridedPlan& plan) {
  if (plan.dims.empty()) return false;
  for (const auto& s : plan.strides) {
    if (s.back() != 1) return false;
  }
  return true;
}

}  // namespace

size_t ChooseUnit(const StridedPlan& plan, size_t element_size,
                  const std::vector<uintptr_t>& addresses) {
  const bool contiguous = InnerContiguous(plan);
  const int64_t e = static_cast<int64_t>(element_size);
  for (size_t u : {size_t{16}, size_t{8}, size_t{4}, size_t{2}, size_t{1}}) {
    const int64_t ui = static_cast<int64_t>(u);
    bool ok = true;
    for (uintptr_t a : addresses) ok = ok && a % u == 0;
    for (int64_t b : plan.base) ok = ok && (b * e) % ui == 0;
    if (contiguous) {
      ok = ok && (plan.dims.back() * e) % ui == 0;
      for (const auto& s : plan.strides) {
        for (size_t d = 0; d + 1 < s.size(); ++d) ok = ok && (s[d] * e) % ui == 0;
      }
    } else {
      ok = ok && e % ui == 0;
    }
    if (ok) return u;
  }
  return 1;
}

StridedPlan InUnits(const StridedPlan& plan, size_t element_size, size_t unit) {
  const int64_t e = static_cast<int64_t>(element_size);
  const int64_t u = static_cast<int64_t>(unit);
  if (u == e) return plan;
  StridedPlan out = plan;
  const bool contiguous = InnerContiguous(plan);
  for (int64_t& b : out.base) b = b * e / u;
  for (auto& s : out.strides) {
    for (size_t d = 0; d + (contiguous ? 1 : 0) < s.size(); ++d) s[d] = s[d] * e / u;
  }
  if (contiguous) {
    out.dims.back() = out.dims.back() * e / u;
  } else {
    out.dims.push_back(e / u);
    for (auto& s : out.strides) s.push_back(1);
  }
  return out;
}

SplitPlan SplitOuter(const StridedPlan& plan, int max_inner) {
  const size_t n = plan.strides.size();
  const size_t rank = plan.dims.size();
  const size_t keep = rank <= static_cast<size_t>(max_inner) ? rank : static_cast<size_t>(max_inner);
  const size_t cut = rank - keep;
  SplitPlan split;
  split.outer.base = plan.base;
  split.outer.strides.assign(n, {});
  split.inner.base.assign(n, 0);
  split.inner.strides.assign(n, {});
  for (size_t d = 0; d < rank; ++d) {
    StridedPlan& part = d < cut ? split.outer : split.inner;
    part.dims.push_back(plan.dims[d]);
    for (size_t k = 0; k < n; ++k) part.strides[k].push_back(plan.strides[k][d]);
  }
  if (split.outer.dims.empty()) {
    split.outer.dims = {1};
    for (size_t k = 0; k < n; ++k) split.outer.strides[k] = {0};
  }
  return split;
}

template <int N>
StridedIndexer<N> MakeIndexer(const StridedPlan& plan) {
  if (plan.strides.size() != static_cast<size_t>(N) ||
      plan.dims.size() > static_cast<size_t>(kMaxStridedDims)) {
    throw std::logic_error("MakeIndexer: a plan of " + std::to_string(plan.strides.size()) +
                           " operands and " + std::to_string(plan.dims.size()) +
                           " dims for an indexer of " + std::to_string(N) + " operands");
  }
  StridedIndexer<N> ix;
  ix.rank = static_cast<int>(plan.dims.size());
  for (int d = 0; d < ix.rank; ++d) {
    ix.dims[d] = plan.dims[d];
    for (int k = 0; k < N; ++k) ix.strides[k][d] = plan.strides[k][d];
  }
  return ix;
}

template StridedIndexer<1> MakeIndexer<1>(const StridedPlan&);
template StridedIndexer<2> MakeIndexer<2>(const StridedPlan&);
template StridedIndexer<3> MakeIndexer<3>(const StridedPlan&);
template StridedIndexer<4> MakeIndexer<4>(const StridedPlan&);

std::vector<std::vector<int64_t>> OuterStarts(const StridedPlan& outer) {
  const size_t n = outer.strides.size();
  const int64_t count = outer.numel();
  std::vector<std::vector<int64_t>> starts;
  if (count <= 0) return starts;
  starts.reserve(static_cast<size_t>(count));
  std::vector<int64_t> index(outer.dims.size(), 0);
  std::vector<int64_t> at = outer.base;
  at.resize(n, 0);
  for (int64_t i = 0; i < count; ++i) {
    starts.push_back(at);
    for (size_t d = outer.dims.size(); d-- > 0;) {
      ++index[d];
      for (size_t k = 0; k < n; ++k) at[k] += outer.strides[k][d];
      if (index[d] < outer.dims[d]) break;
      for (size_t k = 0; k < n; ++k) at[k] -= outer.strides[k][d] * outer.dims[d];
      index[d] = 0;
    }
  }
  return starts;
}

std::vector<StridedCopyStep> PlanStridedCopy(const StridedPlan& plan, size_t element_size, uintptr_t src,
                                             uintptr_t dst, int max_inner) {
  std::vector<StridedCopyStep> steps;
  if (plan.numel() <= 0) return steps;
  const size_t unit = ChooseUnit(plan, element_size, {src, dst});
  const StridedPlan p = Collapse(InUnits(plan, element_size, unit));
  if (p.dims.size() == 1 && p.strides[0][0] == 1 && p.strides[1][0] == 1) {
    StridedCopyStep step;
    step.contiguous = true;
    step.unit = unit;
    step.src_offset = p.base[0];
    step.dst_offset = p.base[1];
    step.n = p.dims[0];
    steps.push_back(step);
    return steps;
  }
  const SplitPlan split = SplitOuter(p, max_inner);
  const StridedIndexer<2> ix = MakeIndexer<2>(split.inner);
  const int64_t n = split.inner.numel();
  for (const std::vector<int64_t>& start : OuterStarts(split.outer)) {
    StridedCopyStep step;
    step.unit = unit;
    step.src_offset = start[0];
    step.dst_offset = start[1];
    step.n = n;
    step.ix = ix;
    steps.push_back(step);
  }
  return steps;
}

StridedPlan PlanBroadcastWalk(const std::vector<int64_t>& out_shape,
                              const std::vector<std::vector<int64_t>>& in_shapes) {
  const cpu::internal::BroadcastLoop loop = cpu::internal::PlanBroadcast(out_shape, in_shapes);
  StridedPlan plan;
  plan.dims = loop.dims;
  plan.strides = loop.strides;
  std::vector<int64_t> out_strides(loop.dims.size(), 1);
  for (size_t d = loop.dims.size(); d-- > 1;) out_strides[d - 1] = out_strides[d] * loop.dims[d];
  plan.strides.push_back(out_strides);
  plan.base.assign(plan.strides.size(), 0);
  return plan;
}

}  // namespace spmd::kernels::cuda
