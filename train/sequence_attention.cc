#include "train/sequence_attention.h"

#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "rules/error.h"
#include "rules/layout.h"
#include "rules/notation.h"

namespace spmd::train {

using runtime::Communicator;
using runtime::DistTensor;

std::string_view ToString(SequenceStrategy strategy) {
  switch (strategy) {
    case SequenceStrategy::kUlysses:
      return "ulysses";
    case SequenceStrategy::kRing:
      return "ring";
    case SequenceStrategy::kRingZigzag:
      return "ring_zigzag";
  }
  return "?";
}

std::vector<int64_t> ZigzagOrder(int64_t length, int64_t n) {
  if (n < 1) ThrowInvalid("n", std::to_string(n) + " ranks: must be at least 1");
  if (length < 1 || length % (2 * n) != 0) {
    ThrowInvalid("sequence", "zigzag needs a positive multiple of 2n = " + std::to_string(2 * n) +
                                 ", got " + std::to_string(length));
  }
  const int64_t chunk = length / (2 * n);
  std::vector<int64_t> order;
  order.reserve(length);
  for (int64_t r = 0; r < n; ++r) {
    for (const int64_t c : {r, 2 * n - 1 - r}) {
      for (int64_t i = 0; i < chunk; ++i) order.push_back(c * chunk + i);
    }
  }
  return order;
}

namespace {

// ---- The local arithmetic -----------------------------------------------------------------
//
// Arrays are row-major [b, rows, h, dh] float64 (batch, sequence rows, heads, head dim).
// A block of keys and values is one buffer: k ([b, rows, h, dh]) followed by v (the same).
// Each row carries its global sequence position; with `causal`, query i sees key j only
// when position(j) <= position(i). Everything the strategies compute goes through the
// four functions below.

struct Dims {
  int64_t b = 0, h = 0, dh = 0;
  int64_t Size(int64_t rows) const { return b * rows * h * dh; }
  // The offset of (batch bi, row i, head hi, 0) in an array of `rows` rows.
  int64_t At(int64_t rows, int64_t bi, int64_t i, int64_t hi) const {
    return ((bi * rows + i) * h + hi) * dh;
  }
};

double Dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t x = 0; x < n; ++x) s += a[x] * b[x];
  return s;
}

// The online softmax of the queries folded over the blocks seen so far: per (batch, row,
// head) the running max of the scores, the sum of exp(score - max), and the sum of
// exp(score - max) * v.
struct SoftmaxState {
  std::vector<double> max, sum, acc;
  SoftmaxState(const Dims& d, int64_t rows)
      : max(d.b * rows * d.h, -std::numeric_limits<double>::infinity()),
        sum(d.b * rows * d.h, 0.0),
        acc(d.Size(rows), 0.0) {}
};

// Folds one key/value block into the queries' state.
void ForwardBlock(const Dims& d, const double* q, const std::vector<int64_t>& qpos, const double* k,
                  const double* v, const std::vector<int64_t>& kpos, double scale, bool causal,
                  SoftmaxState& st) {
  const int64_t qrows = static_cast<int64_t>(qpos.size()),
                krows = static_cast<int64_t>(kpos.size());
  std::vector<double> scores(krows);
  for (int64_t bi = 0; bi < d.b; ++bi) {
    for (int64_t i = 0; i < qrows; ++i) {
      for (int64_t hi = 0; hi < d.h; ++hi) {
        const double* qi = q + d.At(qrows, bi, i, hi);
        double block_max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < krows; ++j) {
          if (causal && kpos[j] > qpos[i]) continue;
          scores[j] = scale * Dot(qi, k + d.At(krows, bi, j, hi), d.dh);
          block_max = std::max(block_max, scores[j]);
        }
        if (block_max == -std::numeric_limits<double>::infinity()) continue;  // all masked
        const int64_t s = (bi * qrows + i) * d.h + hi;
        const double new_max = std::max(st.max[s], block_max);
        // Rescale what was accumulated under the old max (exp(-inf) = 0 for the first block).
        const double rescale = std::exp(st.max[s] - new_max);
        double* acc = st.acc.data() + d.At(qrows, bi, i, hi);
        st.sum[s] *= rescale;
        for (int64_t x = 0; x < d.dh; ++x) acc[x] *= rescale;
        for (int64_t j = 0; j < krows; ++j) {
          if (causal && kpos[j] > qpos[i]) continue;
          const double p = std::exp(scores[j] - new_max);
          st.sum[s] += p;
          const double* vj = v + d.At(krows, bi, j, hi);
          for (int64_t x = 0; x < d.dh; ++x) acc[x] += p * vj[x];
        }
        st.max[s] = new_max;
      }
    }
  }
}

// The output (acc / sum) and the log-sum-exp (max + log sum) of every query; a query that
// saw no key gets zeros and -inf.
void Finish(const Dims& d, int64_t rows, const SoftmaxState& st, std::vector<double>& out,
            std::vector<double>& lse) {
  out.assign(d.Size(rows), 0.0);
  lse.assign(d.b * rows * d.h, -std::numeric_limits<double>::infinity());
  for (int64_t s = 0; s < d.b * rows * d.h; ++s) {
    if (st.sum[s] == 0) continue;
    lse[s] = st.max[s] + std::log(st.sum[s]);
    for (int64_t x = 0; x < d.dh; ++x) out[s * d.dh + x] = st.acc[s * d.dh + x] / st.sum[s];
  }
}

// delta_i = dO_i . O_i per (batch, row, head): the flash backward's row term.
std::vector<double> Delta(const Dims& d, int64_t rows, const std::vector<double>& dout,
                          const std::vector<double>& out) {
  std::vector<double> delta(d.b * rows * d.h);
  for (int64_t s = 0; s < static_cast<int64_t>(delta.size()); ++s) {
    delta[s] = Dot(dout.data() + s * d.dh, out.data() + s * d.dh, d.dh);
  }
  return delta;
}

// The flash-attention backward of one block: with P = exp(scale q k^T - lse) (the final
// probabilities, from the saved log-sum-exp), dV += P^T dO, dS = P * (dO V^T - delta),
// dQ += scale dS K, dK += scale dS^T Q. `dkv` is the block's [dK; dV] accumulator.
void BackwardBlock(const Dims& d, const double* q, const std::vector<int64_t>& qpos,
                   const double* k, const double* v, const std::vector<int64_t>& kpos,
                   const double* dout, const double* lse, const double* delta, double scale,
                   bool causal, double* dq, double* dkv) {
  const int64_t qrows = static_cast<int64_t>(qpos.size()),
                krows = static_cast<int64_t>(kpos.size());
  double* dk = dkv;
  double* dv = dkv + d.Size(krows);
  for (int64_t bi = 0; bi < d.b; ++bi) {
    for (int64_t i = 0; i < qrows; ++i) {
      for (int64_t hi = 0; hi < d.h; ++hi) {
        const int64_t s = (bi * qrows + i) * d.h + hi;
        if (lse[s] == -std::numeric_limits<double>::infinity()) continue;
        const int64_t qi = d.At(qrows, bi, i, hi);
        for (int64_t j = 0; j < krows; ++j) {
          if (causal && kpos[j] > qpos[i]) continue;
          const int64_t kj = d.At(krows, bi, j, hi);
          const double p = std::exp(scale * Dot(q + qi, k + kj, d.dh) - lse[s]);
          const double ds = p * (Dot(dout + qi, v + kj, d.dh) - delta[s]);
          for (int64_t x = 0; x < d.dh; ++x) {
            dv[kj + x] += p * dout[qi + x];
            dq[qi + x] += scale * ds * k[kj + x];
            dk[kj + x] += scale * ds * q[qi + x];
          }
        }
      }
    }
  }
}

// ---- Buffers and the wire -----------------------------------------------------------------

std::vector<double> ToDoubles(const kernels::Tensor& t) {
  if (t.dtype() == DType::kFloat64)
    return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
  return std::vector<double>(t.data<float>(), t.data<float>() + t.numel());
}

kernels::Tensor FromDoubles(const Shape& shape, DType dtype, const std::vector<double>& values) {
  if (dtype == DType::kFloat64) return kernels::Tensor::FromVector(shape, values);
  return kernels::Tensor::FromVector(shape, std::vector<float>(values.begin(), values.end()));
}

// An all-to-all of float64 buffers that puts the tensors' dtype on the wire.
void AllToAll(const std::vector<double>& send, const std::vector<int64_t>& send_counts,
              std::vector<double>& recv, const std::vector<int64_t>& recv_counts, DType dtype,
              const runtime::Group& group, Communicator& comm) {
  int64_t total = 0;
  for (int64_t c : recv_counts) total += c;
  recv.assign(total, 0.0);
  if (dtype == DType::kFloat64) {
    comm.AllToAll(send.data(), send_counts, recv.data(), recv_counts, dtype, group);
    return;
  }
  const std::vector<float> out(send.begin(), send.end());
  std::vector<float> in(total);
  comm.AllToAll(out.data(), send_counts, in.data(), recv_counts, dtype, group);
  recv.assign(in.begin(), in.end());
}

// Point-to-point transfers of float64 buffers (the tensors' dtype on the wire) that
// complete together at Wait(): the buffers passed to Post must stay alive until then.
class Exchange {
 public:
  Exchange(Communicator& comm, DType dtype) : comm_(comm), dtype_(dtype) {}
  // Sends `out` to `to` and receives in->size() elements from `from` into `in`.
  void Post(const std::vector<double>& out, int64_t to, std::vector<double>* in, int64_t from) {
    if (dtype_ == DType::kFloat64) {
      comm_.Send(out.data(), static_cast<int64_t>(out.size()), dtype_, to);
      comm_.Recv(in->data(), static_cast<int64_t>(in->size()), dtype_, from);
      return;
    }
    const std::vector<float>& staged = staged_.emplace_back(out.begin(), out.end());
    comm_.Send(staged.data(), static_cast<int64_t>(staged.size()), dtype_, to);
    std::vector<float>& landing = staged_.emplace_back(in->size());
    comm_.Recv(landing.data(), static_cast<int64_t>(landing.size()), dtype_, from);
    pending_.push_back({in, &landing});
  }
  void Wait() {
    comm_.Synchronize();
    for (auto& [target, landing] : pending_) target->assign(landing->begin(), landing->end());
    pending_.clear();
    staged_.clear();
  }

 private:
  Communicator& comm_;
  DType dtype_;
  std::deque<std::vector<float>> staged_;  // stable addresses
  std::vector<std::pair<std::vector<double>*, std::vector<float>*>> pending_;
};

// Where this rank stands: its group along the axis and every member's rows.
struct Geometry {
  runtime::Group group;
  int64_t n = 1, p = 0;     // group size, this rank's position
  std::vector<Range> rows;  // per position: its rows of the stored sequence
  Dims local;               // local batch, local heads, head dim
  int64_t length = 0;       // S, global
  bool zigzag = false;
  DType dtype = DType::kFloat64;

  int64_t Rows(int64_t position) const { return rows[position].size(); }
  // The global sequence positions of the rows held at `position`.
  std::vector<int64_t> Positions(int64_t position) const {
    std::vector<int64_t> out;
    if (!zigzag) {
      for (int64_t i = rows[position].begin; i < rows[position].end; ++i) out.push_back(i);
      return out;
    }
    const int64_t chunk = length / (2 * n);
    for (const int64_t c : {position, 2 * n - 1 - position}) {
      for (int64_t i = 0; i < chunk; ++i) out.push_back(c * chunk + i);
    }
    return out;
  }
};

// Checks the inputs and works out the geometry (on a rank of the mesh).
Geometry Check(const DistTensor& q, const DistTensor& k, const DistTensor& v,
               const SequenceAttentionOptions& options) {
  const char* names[] = {"q", "k", "v"};
  const DistTensor* tensors[] = {&q, &k, &v};
  for (int t = 0; t < 3; ++t) {
    const DistTensor& x = *tensors[t];
    if (x.shape().size() != 4) ThrowInvalid(names[t], "must be [batch, sequence, heads, head_dim]");
    if (x.dtype() != DType::kFloat64 && x.dtype() != DType::kFloat32) {
      ThrowInvalid(names[t], "must be float32 or float64");
    }
    if (t > 0 && (x.shape() != q.shape() || x.dtype() != q.dtype() || !(x.mesh() == q.mesh()) ||
                  !(x.dist_attr() == q.dist_attr()))) {
      ThrowInvalid(names[t], "must have q's shape, dtype, mesh and dist attr");
    }
  }
  const Mesh& mesh = q.mesh();
  if (options.axis < 0 || options.axis >= mesh.ndim()) {
    ThrowInvalid("axis", std::to_string(options.axis) + " is not an axis of " + ToString(mesh));
  }
  const DistAttr& attr = q.dist_attr();
  if (attr.IsPartial()) ThrowInvalid("q.dist_attr", "must not be partial");
  if (attr.dims[1] != AxisList{options.axis}) {
    ThrowInvalid("q.dist_attr", "the sequence (dim 1) must be sharded over exactly mesh axis " +
                                    std::to_string(options.axis));
  }
  if (!attr.dims[3].empty())
    ThrowInvalid("q.dist_attr", "the head dim (dim 3) must not be sharded");

  Geometry g;
  g.dtype = q.dtype();
  g.length = q.shape()[1];
  g.zigzag = options.strategy == SequenceStrategy::kRingZigzag;
  const std::vector<int64_t> coord = *q.coordinate();
  g.group = mesh.GroupOf(coord, {options.axis});
  g.n = static_cast<int64_t>(g.group.size());
  g.p = coord[options.axis];
  for (int64_t position = 0; position < g.n; ++position) {
    std::vector<int64_t> at = coord;
    at[options.axis] = position;
    g.rows.push_back(BoxAt(q.shape(), attr, mesh, at)[1]);
  }
  const Shape local = q.local().shape();
  g.local = Dims{local[0], local[2], local[3]};
  if (options.strategy == SequenceStrategy::kUlysses) {
    // Every rank of the mesh judges every rank's local head count (an uneven split of the
    // heads over another axis differs between groups), so that all of them throw alike
    // instead of some groups going on to a collective the others never join.
    for (int64_t id : mesh.process_ids()) {
      const int64_t heads = LocalShape(q.shape(), attr, mesh, *mesh.CoordinateOf(id))[2];
      if (heads % g.n != 0) {
        ThrowInvalid("heads", std::to_string(heads) + " local heads (of " +
                                  std::to_string(q.shape()[2]) + ", on rank " +
                                  std::to_string(id) + ") are not a multiple of the " +
                                  std::to_string(g.n) + " ranks along axis " +
                                  std::to_string(options.axis) + " (Ulysses splits the heads)");
      }
    }
  }
  if (g.zigzag) ZigzagOrder(g.length, g.n);  // throws "sequence" unless 2n divides S
  return g;
}

// ---- Ulysses ------------------------------------------------------------------------------

// Sequence-sharded [b, rows_p, h, dh] arrays -> head-sharded [b, S, h/n, dh] arrays (this
// rank's heads p*h/n ..), every tensor in one all-to-all.
std::vector<std::vector<double>> SequenceToHeads(const Geometry& g,
                                                 const std::vector<const std::vector<double>*>& in,
                                                 Communicator& comm) {
  const Dims& d = g.local;
  const int64_t hn = d.h / g.n, T = static_cast<int64_t>(in.size()), mine = g.Rows(g.p);
  std::vector<int64_t> send_counts(g.n), recv_counts(g.n);
  std::vector<double> send;
  for (int64_t q = 0; q < g.n; ++q) {
    send_counts[q] = T * d.b * mine * hn * d.dh;
    recv_counts[q] = T * d.b * g.Rows(q) * hn * d.dh;
    for (const std::vector<double>* x : in) {
      for (int64_t bi = 0; bi < d.b; ++bi) {
        for (int64_t i = 0; i < mine; ++i) {
          const double* from = x->data() + d.At(mine, bi, i, q * hn);
          send.insert(send.end(), from, from + hn * d.dh);
        }
      }
    }
  }
  std::vector<double> recv;
  AllToAll(send, send_counts, recv, recv_counts, g.dtype, g.group, comm);
  const Dims heads{d.b, hn, d.dh};
  std::vector<std::vector<double>> out(T, std::vector<double>(heads.Size(g.length)));
  const double* from = recv.data();
  for (int64_t q = 0; q < g.n; ++q) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t bi = 0; bi < d.b; ++bi) {
        for (int64_t i = 0; i < g.Rows(q); ++i) {
          std::copy(from, from + hn * d.dh,
                    out[t].data() + heads.At(g.length, bi, g.rows[q].begin + i, 0));
          from += hn * d.dh;
        }
      }
    }
  }
  return out;
}

// The inverse: head-sharded [b, S, h/n, dh] -> sequence-sharded [b, rows_p, h, dh].
std::vector<std::vector<double>> HeadsToSequence(const Geometry& g,
                                                 const std::vector<const std::vector<double>*>& in,
                                                 Communicator& comm) {
  const Dims& d = g.local;
  const int64_t hn = d.h / g.n, T = static_cast<int64_t>(in.size()), mine = g.Rows(g.p);
  const Dims heads{d.b, hn, d.dh};
  std::vector<int64_t> send_counts(g.n), recv_counts(g.n);
  std::vector<double> send;
  for (int64_t q = 0; q < g.n; ++q) {
    send_counts[q] = T * d.b * g.Rows(q) * hn * d.dh;
    recv_counts[q] = T * d.b * mine * hn * d.dh;
    for (const std::vector<double>* x : in) {
      for (int64_t bi = 0; bi < d.b; ++bi) {
        for (int64_t i = g.rows[q].begin; i < g.rows[q].end; ++i) {
          const double* from = x->data() + heads.At(g.length, bi, i, 0);
          send.insert(send.end(), from, from + hn * d.dh);
        }
      }
    }
  }
  std::vector<double> recv;
  AllToAll(send, send_counts, recv, recv_counts, g.dtype, g.group, comm);
  std::vector<std::vector<double>> out(T, std::vector<double>(d.Size(mine)));
  const double* from = recv.data();
  for (int64_t q = 0; q < g.n; ++q) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t bi = 0; bi < d.b; ++bi) {
        for (int64_t i = 0; i < mine; ++i) {
          std::copy(from, from + hn * d.dh, out[t].data() + d.At(mine, bi, i, q * hn));
          from += hn * d.dh;
        }
      }
    }
  }
  return out;
}

// What a strategy's backward needs, kept from its forward (local, float64).
struct Saved {
  Geometry g;
  double scale = 1;
  bool causal = true;
  std::vector<double> q, k, v, out, lse;  // Ulysses: head-sharded; ring: this rank's rows
};

std::vector<double> Concat(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(a);
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

std::vector<double> UlyssesForward(Saved& s, const std::vector<double>& q,
                                   const std::vector<double>& k, const std::vector<double>& v,
                                   Communicator& comm) {
  const Geometry& g = s.g;
  std::vector<std::vector<double>> heads = SequenceToHeads(g, {&q, &k, &v}, comm);
  s.q = std::move(heads[0]);
  s.k = std::move(heads[1]);
  s.v = std::move(heads[2]);
  const Dims d{g.local.b, g.local.h / g.n, g.local.dh};
  std::vector<int64_t> all(g.length);
  for (int64_t i = 0; i < g.length; ++i) all[i] = i;
  SoftmaxState state(d, g.length);
  ForwardBlock(d, s.q.data(), all, s.k.data(), s.v.data(), all, s.scale, s.causal, state);
  Finish(d, g.length, state, s.out, s.lse);
  return std::move(HeadsToSequence(g, {&s.out}, comm)[0]);
}

std::vector<std::vector<double>> UlyssesBackward(const Saved& s, const std::vector<double>& dout,
                                                 Communicator& comm) {
  const Geometry& g = s.g;
  const std::vector<double> douth = std::move(SequenceToHeads(g, {&dout}, comm)[0]);
  const Dims d{g.local.b, g.local.h / g.n, g.local.dh};
  std::vector<int64_t> all(g.length);
  for (int64_t i = 0; i < g.length; ++i) all[i] = i;
  const std::vector<double> delta = Delta(d, g.length, douth, s.out);
  std::vector<double> dq(d.Size(g.length), 0.0), dkv(2 * d.Size(g.length), 0.0);
  BackwardBlock(d, s.q.data(), all, s.k.data(), s.v.data(), all, douth.data(), s.lse.data(),
                delta.data(), s.scale, s.causal, dq.data(), dkv.data());
  const std::vector<double> dk(dkv.begin(), dkv.begin() + d.Size(g.length));
  const std::vector<double> dv(dkv.begin() + d.Size(g.length), dkv.end());
  return HeadsToSequence(g, {&dq, &dk, &dv}, comm);
}

// ---- Ring ---------------------------------------------------------------------------------
//
// At step t the rank at position p holds the block of position (p - t) mod n; it sends
// what it holds to p + 1 and receives the next from p - 1, the transfer posted before the
// step's arithmetic so that the two overlap.

std::vector<double> RingForward(Saved& s, const std::vector<double>& q,
                                const std::vector<double>& k, const std::vector<double>& v,
                                Communicator& comm) {
  const Geometry& g = s.g;
  const Dims& d = g.local;
  const int64_t next = g.group[(g.p + 1) % g.n], prev = g.group[(g.p + g.n - 1) % g.n];
  s.q = q;
  s.k = k;
  s.v = v;
  const std::vector<int64_t> qpos = g.Positions(g.p);
  SoftmaxState state(d, g.Rows(g.p));
  std::vector<double> block = Concat(k, v), incoming;
  Exchange exchange(comm, g.dtype);
  for (int64_t t = 0; t < g.n; ++t) {
    const int64_t origin = (g.p - t + g.n) % g.n;
    if (t + 1 < g.n) {
      incoming.assign(2 * d.Size(g.Rows((origin + g.n - 1) % g.n)), 0.0);
      exchange.Post(block, next, &incoming, prev);
    }
    const int64_t rows = g.Rows(origin);
    ForwardBlock(d, q.data(), qpos, block.data(), block.data() + d.Size(rows), g.Positions(origin),
                 s.scale, s.causal, state);
    if (t + 1 < g.n) {
      exchange.Wait();
      std::swap(block, incoming);
    }
  }
  std::vector<double> out;
  Finish(d, g.Rows(g.p), state, out, s.lse);
  s.out = out;
  return out;
}

std::vector<std::vector<double>> RingBackward(const Saved& s, const std::vector<double>& dout,
                                              Communicator& comm) {
  const Geometry& g = s.g;
  const Dims& d = g.local;
  const int64_t next = g.group[(g.p + 1) % g.n], prev = g.group[(g.p + g.n - 1) % g.n];
  const int64_t mine = g.Rows(g.p);
  const std::vector<int64_t> qpos = g.Positions(g.p);
  const std::vector<double> delta = Delta(d, mine, dout, s.out);
  std::vector<double> dq(d.Size(mine), 0.0);
  std::vector<double> block = Concat(s.k, s.v), grads(2 * d.Size(mine), 0.0);
  std::vector<double> incoming, incoming_grads;
  Exchange exchange(comm, g.dtype);
  for (int64_t t = 0; t < g.n; ++t) {
    const int64_t origin = (g.p - t + g.n) % g.n;
    const int64_t coming = (origin + g.n - 1) % g.n;
    if (t + 1 < g.n) {  // the keys and values go on while this step's gradients are formed
      incoming.assign(2 * d.Size(g.Rows(coming)), 0.0);
      exchange.Post(block, next, &incoming, prev);
    }
    const int64_t rows = g.Rows(origin);
    BackwardBlock(d, s.q.data(), qpos, block.data(), block.data() + d.Size(rows),
                  g.Positions(origin), dout.data(), s.lse.data(), delta.data(), s.scale, s.causal,
                  dq.data(), grads.data());
    if (g.n > 1) {  // the block's dK/dV go with it; after the last step, home to their owner
      incoming_grads.assign(2 * d.Size(g.Rows(coming)), 0.0);
      exchange.Post(grads, next, &incoming_grads, prev);
      exchange.Wait();
      std::swap(block, incoming);
      std::swap(grads, incoming_grads);
    }
  }
  // grads now holds this rank's own [dK; dV].
  return {dq, std::vector<double>(grads.begin(), grads.begin() + d.Size(mine)),
          std::vector<double>(grads.begin() + d.Size(mine), grads.end())};
}

}  // namespace

Variable DenseAttention(const Variable& q, const Variable& k, const Variable& v, bool causal,
                        double scale, Communicator& comm) {
  using notation::Ints;
  using notation::MakeAttrs;
  const DistTensor& qv = q.value();
  if (qv.shape().size() != 4) ThrowInvalid("q", "must be [batch, sequence, heads, head_dim]");
  const int64_t s = qv.shape()[1];
  if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(qv.shape()[3]));
  const Attrs swap = MakeAttrs({{"perm", Ints{0, 2, 1, 3}}});
  auto heads = [&](const Variable& x) { return Apply1("transpose", {x}, swap, comm); };
  Variable scores = Apply1("matmul", {heads(q), heads(k)}, MakeAttrs({{"trans_y", true}}), comm);
  scores = Apply1("scale", {scores}, MakeAttrs({{"scale", scale}}), comm);
  if (causal) {
    std::vector<double> mask(s * s, 0.0);
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t j = i + 1; j < s; ++j) mask[i * s + j] = -1e9;
    }
    const Variable m(DistTensor::ShardTensor(FromDoubles({s, s}, qv.dtype(), mask), qv.mesh(),
                                             DistAttr::Replicated(2), qv.process_id()));
    scores = Apply1("add", {scores, m}, {}, comm);
  }
  const Variable probs = Apply1("softmax", {scores}, {}, comm);
  return Apply1("transpose", {Apply1("matmul", {probs, heads(v)}, {}, comm)}, swap, comm);
}

Variable SequenceAttention(const Variable& q, const Variable& k, const Variable& v,
                           const SequenceAttentionOptions& options, Communicator& comm) {
  const DistTensor& qv = q.value();
  const DistTensor& kv = k.value();
  const DistTensor& vv = v.value();
  auto absent = [&]() {
    return DistTensor::Absent(qv.shape(), qv.dtype(), qv.mesh(), qv.dist_attr(), qv.process_id());
  };
  if (!qv.has_local()) {  // a rank outside the mesh: nothing to do, now or in the backward
    return ApplyFunction(
        std::string(ToString(options.strategy)) + " attention", {q, k, v}, {absent()},
        [absent](const std::vector<DistTensor>&, Communicator&) {
          return std::vector<std::optional<DistTensor>>{absent(), absent(), absent()};
        })[0];
  }
  auto saved = std::make_shared<Saved>();
  saved->g = Check(qv, kv, vv, options);
  saved->causal = options.causal;
  saved->scale =
      options.scale != 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(qv.shape()[3]));
  const bool ulysses = options.strategy == SequenceStrategy::kUlysses;
  const std::vector<double> ql = ToDoubles(qv.local()), kl = ToDoubles(kv.local()),
                            vl = ToDoubles(vv.local());
  const std::vector<double> out =
      ulysses ? UlyssesForward(*saved, ql, kl, vl, comm) : RingForward(*saved, ql, kl, vl, comm);
  const Shape local_shape = qv.local().shape();
  DistTensor result = DistTensor::FromLocal(FromDoubles(local_shape, qv.dtype(), out), qv.shape(),
                                            qv.dtype(), qv.mesh(), qv.dist_attr(), qv.process_id());
  const Shape shape = qv.shape();
  const Mesh mesh = qv.mesh();
  const DistAttr attr = qv.dist_attr();
  const int64_t pid = qv.process_id();
  BackwardFunction backward = [saved, ulysses, local_shape, shape, mesh, attr, pid](
                                  const std::vector<DistTensor>& cotangents, Communicator& c) {
    const std::vector<double> dout = ToDoubles(cotangents[0].local());
    const std::vector<std::vector<double>> grads =
        ulysses ? UlyssesBackward(*saved, dout, c) : RingBackward(*saved, dout, c);
    std::vector<std::optional<DistTensor>> result;
    for (const std::vector<double>& g : grads) {
      result.push_back(DistTensor::FromLocal(FromDoubles(local_shape, saved->g.dtype, g), shape,
                                             saved->g.dtype, mesh, attr, pid));
    }
    return result;
  };
  return ApplyFunction(std::string(ToString(options.strategy)) + " attention", {q, k, v},
                       {std::move(result)}, std::move(backward))[0];
}

}  // namespace spmd::train
