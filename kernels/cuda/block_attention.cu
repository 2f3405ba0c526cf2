// block_attention and block_attention_grad on a CUDA device (docs/OPS.md "Ring attention's
// block steps"): the CPU kernels' arithmetic (kernels/cpu/block_attention.cc) with one
// thread per row. The forward runs one thread per (batch, head, query row): the visible
// keys' max, then the state's rescale and the exp-weighted sum of v written into its own
// output row. The backward runs two kernels so that no two threads add into one element:
// one thread per query row for q_grad (a sum over the keys), one per key row for k_grad
// and v_grad (sums over the queries); each recomputes the pair's P and dS. float32 and
// float64; 2-byte floats are widened by RunCudaKernel. The shapes, masks and errors are
// the plan of rules/ops/block_attention_shape.h; at most kMaxSegments segment starts per block
// (Unsupported "attrs.q_starts" / "attrs.k_starts" beyond: they travel as a kernel
// argument).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/math_util.cuh"
#include "kernels/cuda/registry.h"
#include "rules/ops/block_attention_shape.h"

namespace spmd::kernels::cuda {
namespace {

constexpr int kMaxSegments = 32;

// The plan as a kernel argument.
struct Geometry {
  int64_t batch, sq, sk, heads, head_dim, v_dim;
  int64_t q_segment, k_segment;
  bool causal;
  int64_t q_starts[kMaxSegments];
  int64_t k_starts[kMaxSegments];

  __device__ bool Visible(int64_t i, int64_t j) const {
    if (!causal) return true;
    return k_starts[j / k_segment] + j % k_segment <= q_starts[i / q_segment] + i % q_segment;
  }
};

Geometry ToGeometry(const attention::BlockAttentionPlan& p) {
  Geometry g{};
  g.batch = p.batch;
  g.sq = p.sq;
  g.sk = p.sk;
  g.heads = p.heads;
  g.head_dim = p.head_dim;
  g.v_dim = p.v_dim;
  g.q_segment = p.q_segment;
  g.k_segment = p.k_segment;
  g.causal = p.causal;
  auto copy = [](const std::vector<int64_t>& from, int64_t* to, const char* field) {
    if (from.size() > static_cast<size_t>(kMaxSegments)) {
      ThrowUnsupported(field, std::to_string(from.size()) + " segments: the CUDA kernel takes at most " +
                                  std::to_string(kMaxSegments));
    }
    for (size_t s = 0; s < from.size(); ++s) to[s] = from[s];
  };
  copy(p.q_starts, g.q_starts, "attrs.q_starts");
  copy(p.k_starts, g.k_starts, "attrs.k_starts");
  return g;
}

template <typename T>
__device__ bool IsMinusInf(T x) {
  return isinf(x) && x < 0;
}

template <typename T>
__device__ T DotRow(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t x = 0; x < n; ++x) s += a[x] * b[x];
  return s;
}

// Thread per (b, h, i): out and lse hold the state on entry (copied from the inputs).
template <typename T>
__global__ void ForwardRows(Geometry g, T scale, const T* q, const T* k, const T* v, T* out, T* lse) {
  const int64_t rows = g.batch * g.heads * g.sq;
  for (SPMD_GRID_STRIDE(r, rows)) {
    const int64_t i = r % g.sq, h = (r / g.sq) % g.heads, b = r / (g.sq * g.heads);
    const T* qi = q + ((b * g.sq + i) * g.heads + h) * g.head_dim;
    T top = lse[r];
    bool any = false;
    for (int64_t j = 0; j < g.sk; ++j) {
      if (!g.Visible(i, j)) continue;
      any = true;
      top = max(top, scale * DotRow(qi, k + ((b * g.sk + j) * g.heads + h) * g.head_dim, g.head_dim));
    }
    if (!any) continue;
    const T kept = IsMinusInf(lse[r]) ? T(0) : exp(lse[r] - top);
    T* oi = out + ((b * g.sq + i) * g.heads + h) * g.v_dim;
    T total = kept;
    for (int64_t e = 0; e < g.v_dim; ++e) oi[e] *= kept;
    for (int64_t j = 0; j < g.sk; ++j) {
      if (!g.Visible(i, j)) continue;
      const T w = exp(scale * DotRow(qi, k + ((b * g.sk + j) * g.heads + h) * g.head_dim, g.head_dim) - top);
      total += w;
      const T* vj = v + ((b * g.sk + j) * g.heads + h) * g.v_dim;
      for (int64_t e = 0; e < g.v_dim; ++e) oi[e] += w * vj[e];
    }
    for (int64_t e = 0; e < g.v_dim; ++e) oi[e] /= total;
    lse[r] = top + log(total);
  }
}

// P and dS of pair (i, j) for batch b, head h (the row's lse finite, the pair visible).
template <typename T>
__device__ void Pair(const Geometry& g, T scale, const T* q, const T* k, const T* v, const T* out, const T* lse,
                     const T* dout, int64_t b, int64_t h, int64_t i, int64_t j, T& prob, T& ds) {
  const int64_t qi = ((b * g.sq + i) * g.heads + h) * g.head_dim;
  const int64_t oi = ((b * g.sq + i) * g.heads + h) * g.v_dim;
  const int64_t kj = ((b * g.sk + j) * g.heads + h) * g.head_dim;
  const int64_t vj = ((b * g.sk + j) * g.heads + h) * g.v_dim;
  prob = exp(scale * DotRow(q + qi, k + kj, g.head_dim) - lse[(b * g.heads + h) * g.sq + i]);
  ds = prob * (DotRow(dout + oi, v + vj, g.v_dim) - DotRow(dout + oi, out + oi, g.v_dim)) * scale;
}

// Thread per (b, h, i): q_grad's row, zero-filled here.
template <typename T>
__global__ void GradQueryRows(Geometry g, T scale, const T* q, const T* k, const T* v, const T* out,
                              const T* lse, const T* dout, T* dq) {
  const int64_t rows = g.batch * g.heads * g.sq;
  for (SPMD_GRID_STRIDE(r, rows)) {
    const int64_t i = r % g.sq, h = (r / g.sq) % g.heads, b = r / (g.sq * g.heads);
    T* dqi = dq + ((b * g.sq + i) * g.heads + h) * g.head_dim;
    for (int64_t d = 0; d < g.head_dim; ++d) dqi[d] = 0;
    if (IsMinusInf(lse[(b * g.heads + h) * g.sq + i])) continue;
    for (int64_t j = 0; j < g.sk; ++j) {
      if (!g.Visible(i, j)) continue;
      T prob, ds;
      Pair(g, scale, q, k, v, out, lse, dout, b, h, i, j, prob, ds);
      const T* kj = k + ((b * g.sk + j) * g.heads + h) * g.head_dim;
      for (int64_t d = 0; d < g.head_dim; ++d) dqi[d] += ds * kj[d];
    }
  }
}

// Thread per (b, h, j): k_grad's and v_grad's rows, zero-filled here.
template <typename T>
__global__ void GradKeyRows(Geometry g, T scale, const T* q, const T* k, const T* v, const T* out,
                            const T* lse, const T* dout, T* dk, T* dv) {
  const int64_t rows = g.batch * g.heads * g.sk;
  for (SPMD_GRID_STRIDE(r, rows)) {
    const int64_t j = r % g.sk, h = (r / g.sk) % g.heads, b = r / (g.sk * g.heads);
    T* dkj = dk + ((b * g.sk + j) * g.heads + h) * g.head_dim;
    T* dvj = dv + ((b * g.sk + j) * g.heads + h) * g.v_dim;
    for (int64_t d = 0; d < g.head_dim; ++d) dkj[d] = 0;
    for (int64_t e = 0; e < g.v_dim; ++e) dvj[e] = 0;
    for (int64_t i = 0; i < g.sq; ++i) {
      if (IsMinusInf(lse[(b * g.heads + h) * g.sq + i]) || !g.Visible(i, j)) continue;
      T prob, ds;
      Pair(g, scale, q, k, v, out, lse, dout, b, h, i, j, prob, ds);
      const T* qi = q + ((b * g.sq + i) * g.heads + h) * g.head_dim;
      const T* gi = dout + ((b * g.sq + i) * g.heads + h) * g.v_dim;
      for (int64_t d = 0; d < g.head_dim; ++d) dkj[d] += ds * qi[d];
      for (int64_t e = 0; e < g.v_dim; ++e) dvj[e] += prob * gi[e];
    }
  }
}

std::vector<Shape> ShapesOf(const TensorArgs& inputs) {
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  return shapes;
}

// Calls f(float{}) or f(double{}): RunCudaKernel hands these kernels no 2-byte floats.
template <typename F>
void ForFloat(DType dtype, F&& f) {
  if (dtype == DType::kFloat32) {
    f(float{});
  } else {
    f(double{});
  }
}

void CopyOn(Tensor& to, const Tensor& from, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(from.numel()) * ElementSize(from.dtype());
  if (bytes == 0) return;
  SPMD_CUDA_CHECK(cudaMemcpyAsync(to.bytes(), from.bytes(), bytes, cudaMemcpyDeviceToDevice, stream));
}

Tensors BlockAttention(const TensorArgs& inputs, const Attrs& attrs) {
  cpu::internal::CheckArity(inputs, 5);
  const attention::BlockAttentionPlan p = attention::PlanBlockAttention(ShapesOf(inputs), attrs);
  const Geometry g = ToGeometry(p);
  const DType dtype = cpu::internal::ComputeDTypeAll(inputs);
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Tensor& q = temps.As(inputs[0], dtype);
  const Tensor& k = temps.As(inputs[1], dtype);
  const Tensor& v = temps.As(inputs[2], dtype);
  const Tensor& o = temps.As(inputs[3], dtype);
  const Tensor& l = temps.As(inputs[4], dtype);
  Tensor out = NewChecked(inputs[0], p.out_shape, dtype);
  Tensor lse = NewChecked(inputs[0], p.lse_shape, dtype);
  CopyOn(out, o, ctx.stream);
  CopyOn(lse, l, ctx.stream);
  ForFloat(dtype, [&](auto zero) {
    using T = decltype(zero);
    LaunchGridStride(ForwardRows<T>, p.batch * p.heads * p.sq, ctx.stream, g, static_cast<T>(p.scale),
                     DataOf<T>(q), DataOf<T>(k), DataOf<T>(v), DataOf<T>(out), DataOf<T>(lse));
  });
  return TensorList(std::move(out), std::move(lse));
}

Tensors BlockAttentionGrad(const TensorArgs& inputs, const Attrs& attrs) {
  cpu::internal::CheckArity(inputs, 6);
  const attention::BlockAttentionPlan p = attention::PlanBlockAttentionGrad(ShapesOf(inputs), attrs);
  const Geometry g = ToGeometry(p);
  const DType dtype = cpu::internal::ComputeDTypeAll(inputs);
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Tensor& q = temps.As(inputs[0], dtype);
  const Tensor& k = temps.As(inputs[1], dtype);
  const Tensor& v = temps.As(inputs[2], dtype);
  const Tensor& o = temps.As(inputs[3], dtype);
  const Tensor& l = temps.As(inputs[4], dtype);
  const Tensor& dout = temps.As(inputs[5], dtype);
  Tensor dq = NewChecked(inputs[0], inputs[0].shape(), dtype);
  Tensor dk = NewChecked(inputs[0], inputs[1].shape(), dtype);
  Tensor dv = NewChecked(inputs[0], inputs[2].shape(), dtype);
  ForFloat(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T scale = static_cast<T>(p.scale);
    LaunchGridStride(GradQueryRows<T>, p.batch * p.heads * p.sq, ctx.stream, g, scale, DataOf<T>(q),
                     DataOf<T>(k), DataOf<T>(v), DataOf<T>(o), DataOf<T>(l), DataOf<T>(dout), DataOf<T>(dq));
    LaunchGridStride(GradKeyRows<T>, p.batch * p.heads * p.sk, ctx.stream, g, scale, DataOf<T>(q),
                     DataOf<T>(k), DataOf<T>(v), DataOf<T>(o), DataOf<T>(l), DataOf<T>(dout), DataOf<T>(dk),
                     DataOf<T>(dv));
  });
  return TensorList(std::move(dq), std::move(dk), std::move(dv));
}

}  // namespace

// The block attention ops' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::block_attention{&BlockAttention, HalfInputs::kWidened};
const CudaKernel ops::block_attention_grad{&BlockAttentionGrad, HalfInputs::kWidened};

}  // namespace spmd::kernels::cuda
