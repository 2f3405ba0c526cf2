// Test-only helpers shared by the thread-rank test of the sequence strategies
// (train/sequence_attention_test.cc) and the mpirun proof (property_tests/seqpar_mpi_test.cc):
// random inputs, one sharded or dense run returning the global output and gradients, and
// the comparison.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/exec/dist_tensor.h"
#include "train/autograd.h"
#include "train/device.h"
#include "train/sequence_attention.h"

namespace spmd::train::testing {

struct AttentionInputs {
  int64_t b = 1, s = 1, h = 1, dh = 1;
  bool causal = true;
  DType dtype = DType::kFloat64;
  std::vector<double> q, k, v, w;  // global [b, s, h, dh], natural sequence order; w weights
                                   // the loss sum(out * w), so the cotangent is w
};

inline AttentionInputs RandomInputs(int64_t b, int64_t s, int64_t h, int64_t dh, bool causal,
                                    DType dtype, uint64_t seed) {
  AttentionInputs in{b, s, h, dh, causal, dtype, {}, {}, {}, {}};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.5, 1.5);
  for (std::vector<double>* x : {&in.q, &in.k, &in.v, &in.w}) {
    x->resize(b * s * h * dh);
    for (double& value : *x) value = dist(rng);
  }
  return in;
}

// The global results, natural sequence order, float64.
struct AttentionResult {
  std::vector<double> out, dq, dk, dv;
  runtime::CommCounters forward, backward;  // this rank's counters over each phase
  // The bytes the backend itself handed to its transport over each phase
  // (Communicator::transport_bytes, counted apart from the counters).
  runtime::ByteCount transport_forward, transport_backward;
  kernels::Device device;  // where this rank's output shard lived
};

// `x` [b, s, h, dh] with its sequence reordered: entry i of the result is row order[i].
inline std::vector<double> Reorder(const std::vector<double>& x, const AttentionInputs& in,
                                   const std::vector<int64_t>& order, bool inverse) {
  std::vector<double> out(x.size());
  const int64_t row = in.h * in.dh;
  for (int64_t bi = 0; bi < in.b; ++bi) {
    for (int64_t i = 0; i < in.s; ++i) {
      const int64_t from = inverse ? i : order[i], to = inverse ? order[i] : i;
      std::copy_n(x.begin() + (bi * in.s + from) * row, row, out.begin() + (bi * in.s + to) * row);
    }
  }
  return out;
}

inline kernels::Tensor AsTensor(const std::vector<double>& values, const AttentionInputs& in) {
  const Shape shape{in.b, in.s, in.h, in.dh};
  if (in.dtype == DType::kFloat64) return kernels::Tensor::FromVector(shape, values);
  return kernels::Tensor::FromVector(shape, std::vector<float>(values.begin(), values.end()));
}

inline std::vector<double> AsDoubles(const kernels::Tensor& t) {
  if (t.dtype() == DType::kFloat64) return {t.data<double>(), t.data<double>() + t.numel()};
  return {t.data<float>(), t.data<float>() + t.numel()};
}

// Runs attention on `mesh` with q, k, v, w laid out as `attr`: SequenceAttention with
// `options`, or DenseAttention without. Collective over the mesh; every rank of it gets
// the results (others: empty vectors).
inline AttentionResult RunAttention(const AttentionInputs& in, const Mesh& mesh,
                                    const DistAttr& attr,
                                    const std::optional<SequenceAttentionOptions>& options,
                                    runtime::Communicator& comm) {
  const bool zigzag = options && options->strategy == SequenceStrategy::kRingZigzag;
  std::vector<int64_t> order;
  if (zigzag) order = ZigzagOrder(in.s, mesh.axis_size(options->axis));
  auto place = [&](const std::vector<double>& x, bool grad) {
    const std::vector<double> stored = zigzag ? Reorder(x, in, order, false) : x;
    return Variable(OnDevice(runtime::DistTensor::ShardTensor(AsTensor(stored, in), mesh, attr, comm.rank()),
                             comm.device(), comm.stream()),
                    grad);
  };
  const Variable q = place(in.q, true), k = place(in.k, true), v = place(in.v, true);
  const Variable w = place(in.w, false);
  AttentionResult result;
  comm.ResetCounters();
  runtime::ByteCount start = comm.transport_bytes();
  const Variable out = options ? SequenceAttention(q, k, v, *options, comm)
                               : DenseAttention(q, k, v, in.causal, 0, comm);
  result.forward = comm.counters();
  if (out.value().has_local()) result.device = out.value().local().device();
  const runtime::ByteCount after_forward = comm.transport_bytes();
  result.transport_forward = {after_forward.sent - start.sent,
                              after_forward.received - start.received};
  // An identity step whose backward starts the backward's count: what the loss's own
  // backward moves (the cotangent laid out as the output) is not the attention's.
  const Variable counted = ApplyFunction(
      "count", {out}, {out.value()},
      [&start](const std::vector<runtime::DistTensor>& cotangents, runtime::Communicator& c) {
        c.ResetCounters();
        start = c.transport_bytes();
        return std::vector<std::optional<runtime::DistTensor>>{cotangents[0]};
      })[0];
  const Variable loss = Apply1("sum", {Apply1("multiply", {counted, w}, {}, comm)}, {}, comm);
  Backward(loss, comm);
  result.backward = comm.counters();
  const runtime::ByteCount after_backward = comm.transport_bytes();
  result.transport_backward = {after_backward.sent - start.sent,
                               after_backward.received - start.received};
  auto global = [&](const runtime::DistTensor& x) {
    std::optional<kernels::Tensor> g = x.ToGlobal(comm);
    if (!g) return std::vector<double>{};
    const std::vector<double> stored = AsDoubles(ToHostTensor(*g));
    return zigzag ? Reorder(stored, in, order, true) : stored;
  };
  const DistAttr replicated = DistAttr::Replicated(4);
  result.out = global(out.value());
  result.dq = global(Gradient(q, replicated, comm));
  result.dk = global(Gradient(k, replicated, comm));
  result.dv = global(Gradient(v, replicated, comm));
  return result;
}

// "" when every entry of got is within `tolerance` of want relative to want's largest
// magnitude (per tensor); else the first difference.
inline std::string CompareResults(const AttentionResult& got, const AttentionResult& want,
                                  double tolerance) {
  const char* names[] = {"out", "dq", "dk", "dv"};
  const std::vector<double>* g[] = {&got.out, &got.dq, &got.dk, &got.dv};
  const std::vector<double>* w[] = {&want.out, &want.dq, &want.dk, &want.dv};
  for (int t = 0; t < 4; ++t) {
    if (g[t]->size() != w[t]->size()) return std::string(names[t]) + ": sizes differ";
    double scale = 1e-300;
    for (double x : *w[t]) scale = std::max(scale, std::abs(x));
    for (size_t i = 0; i < w[t]->size(); ++i) {
      if (!(std::abs((*g[t])[i] - (*w[t])[i]) <= tolerance * scale)) {
        std::ostringstream os;
        os.precision(17);
        os << names[t] << "[" << i << "]: " << (*g[t])[i] << " vs " << (*w[t])[i];
        return os.str();
      }
    }
  }
  return "";
}

// The bytes the strategy's plan moves for the rank at `position` of a group of n along
// the sequence, from the formula of docs/LONG_SEQUENCE.md: `rows[q]` is the sequence rows
// held at position q, `unit` the elements of one local row (local batch x local heads x
// head dim), `e` the element size.
//   Ulysses forward: q, k, v to heads (sent 3 (n-1)/n of the local q, k, v; received 3/n of
//     the other ranks' rows), the output back (sent 1/n of the other ranks' rows of the
//     head-sharded output, received (n-1)/n of the local output); the backward the mirror
//     image (dO to heads, dQ, dK, dV back).
//   Ring forward: n - 1 k/v blocks sent (each held block but the last) and received;
//     backward: the same k/v transfers plus n dK/dV blocks (every block's once).
struct PlannedBytes {
  runtime::ByteCount forward, backward;
};
inline PlannedBytes PlanBytes(SequenceStrategy strategy, const std::vector<int64_t>& rows,
                              int64_t position, int64_t unit, int64_t e) {
  const int64_t n = static_cast<int64_t>(rows.size()), p = position;
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  PlannedBytes plan;
  if (n == 1) return plan;
  if (strategy == SequenceStrategy::kUlysses) {
    const int64_t mine = rows[p] * unit / n * e, others = (total - rows[p]) * unit / n * e;
    plan.forward = {3 * (n - 1) * mine + others, 3 * others + (n - 1) * mine};
    plan.backward = {(n - 1) * mine + 3 * others, others + 3 * (n - 1) * mine};
    return plan;
  }
  for (int64_t t = 0; t + 1 < n; ++t) {
    plan.forward.sent += 2 * rows[(p - t + n) % n] * unit * e;
    plan.forward.received += 2 * rows[(p - t - 1 + 2 * n) % n] * unit * e;
  }
  plan.backward = {plan.forward.sent + 2 * total * unit * e,
                   plan.forward.received + 2 * total * unit * e};
  return plan;
}

}  // namespace spmd::train::testing
