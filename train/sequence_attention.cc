#include "train/sequence_attention.h"

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "kernels/backend.h"
#include "rules/model/error.h"
#include "rules/model/layout.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "runtime/exec/dispatch.h"
#include "train/device.h"

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

// Where this rank stands: its group along the axis and every member's rows.
struct Geometry {
  runtime::Group group;
  int64_t n = 1, p = 0;     // group size, this rank's position
  std::vector<Range> rows;  // per position: its rows of the stored sequence
  int64_t length = 0;       // S, global
  bool zigzag = false;
  DType dtype = DType::kFloat64;

  int64_t Rows(int64_t position) const { return rows[position].size(); }
  // The global positions of the rows held at `position`, as block_attention's segment
  // starts: one segment (plain), or chunks position and 2n-1-position (zigzag).
  std::vector<int64_t> Starts(int64_t position) const {
    if (!zigzag) return {rows[position].begin};
    const int64_t chunk = length / (2 * n);
    return {position * chunk, (2 * n - 1 - position) * chunk};
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

// ---- Local blocks through Dispatch ----------------------------------------------------------
//
// Every computation below is a registered op run by runtime::Dispatch on tensors of the
// inputs' device: block_attention folds a key/value block into the online-softmax state
// (out, lse), block_attention_grad gives one block pair's gradients, add sums them. The
// ring's blocks are this rank's local tensors, wrapped on a mesh of this process alone
// (replicated: the rules keep them whole and run the kernel in place); the communication
// is the Communicator's send/recv of the tensors' device buffers (ring) or the reshard
// executor's all-to-all (Ulysses).

kernels::Tensor HostFromDoubles(const Shape& shape, DType dtype, const std::vector<double>& values) {
  if (dtype == DType::kFloat64) return kernels::Tensor::FromVector(shape, values);
  return kernels::Tensor::FromVector(shape, std::vector<float>(values.begin(), values.end()));
}

// A new tensor shaped `shape` on `like`'s device and stream, every element `value`.
kernels::Tensor Filled(const kernels::Tensor& like, const Shape& shape, double value) {
  kernels::Tensor t = kernels::Tensor::Uninitialized(shape, like.dtype(), like.allocator(), like.stream());
  kernels::BackendFor(like.device()).Fill(t.bytes(), t.numel(), t.dtype(), value, like.stream());
  return t;
}

// An uninitialised tensor shaped `shape` on `like`'s device and stream (a receive buffer).
kernels::Tensor Empty(const kernels::Tensor& like, const Shape& shape) {
  return kernels::Tensor::Uninitialized(shape, like.dtype(), like.allocator(), like.stream());
}

// Local tensors as DistTensors of a mesh holding this process alone.
struct Local {
  Mesh mesh;
  int64_t pid = 0;
  DistTensor Wrap(kernels::Tensor t) const {
    const Shape shape = t.shape();
    const DType dtype = t.dtype();
    return DistTensor::FromLocal(std::move(t), shape, dtype, mesh,
                                 DistAttr::Replicated(static_cast<int>(shape.size())), pid);
  }
};

Local LocalMesh(int64_t pid) { return Local{Mesh({1}, {pid}), pid}; }

Attrs BlockAttrs(double scale, bool causal, std::vector<int64_t> q_starts, std::vector<int64_t> k_starts) {
  return notation::MakeAttrs({{"scale", scale},
                              {"causal", causal},
                              {"q_starts", std::move(q_starts)},
                              {"k_starts", std::move(k_starts)}});
}

const OpDecl& Op(const char* name) { return *FindOp(name); }

// The empty online-softmax state for queries `q` ([b, s, h, dh], any mesh and layout):
// out zeros laid out as q, lse -inf [b, h, s] with q's batch and head shardings.
std::pair<DistTensor, DistTensor> EmptyState(const DistTensor& q) {
  const DistAttr& attr = q.dist_attr();
  DistAttr lse_attr = DistAttr::Replicated(3);
  lse_attr.dims[0] = attr.dims[0];
  lse_attr.dims[1] = attr.dims[2];
  lse_attr.dims[2] = attr.dims[1];
  const Shape& shape = q.shape();
  const Shape& local = q.local().shape();
  const Shape lse_shape = {shape[0], shape[2], shape[1]};
  return {DistTensor::FromLocal(Filled(q.local(), local, 0.0), shape, q.dtype(), q.mesh(), attr, q.process_id()),
          DistTensor::FromLocal(Filled(q.local(), {local[0], local[2], local[1]},
                                       -std::numeric_limits<double>::infinity()),
                                lse_shape, q.dtype(), q.mesh(), lse_attr, q.process_id())};
}

// What a strategy's backward needs, kept from its forward.
struct Saved {
  Geometry g;
  double scale = 1;
  bool causal = true;
  DistAttr attr;  // q's
  // Ulysses: head-sharded q, k, v, out, lse; ring: this rank's blocks (local mesh).
  DistTensor q, k, v, out, lse;
};

// ---- Ulysses ------------------------------------------------------------------------------
//
// The reshard executor turns the sequence-sharded tensors into head-sharded ones (the
// sequence axis moved from dim 1 to dim 2: an all-to-all over the group), block_attention
// runs on the whole sequence of this rank's heads, and the output goes back the same way.

DistAttr HeadsLayout(const DistAttr& attr, int axis) {
  DistAttr heads = attr;
  heads.dims[1].clear();
  heads.dims[2].push_back(axis);
  return heads;
}

DistTensor UlyssesForward(Saved& s, const DistTensor& q, const DistTensor& k, const DistTensor& v, int axis,
                          Communicator& comm) {
  const DistAttr heads = HeadsLayout(s.attr, axis);
  s.q = q.Reshard(heads, comm);
  s.k = k.Reshard(heads, comm);
  s.v = v.Reshard(heads, comm);
  auto [out0, lse0] = EmptyState(s.q);
  std::vector<DistTensor> state = runtime::Dispatch(Op("block_attention"), {s.q, s.k, s.v, out0, lse0},
                                                    BlockAttrs(s.scale, s.causal, {0}, {0}), comm);
  s.out = std::move(state[0]);
  s.lse = std::move(state[1]);
  return s.out.Reshard(s.attr, comm);
}

std::vector<DistTensor> UlyssesBackward(const Saved& s, const DistTensor& dout, int axis, Communicator& comm) {
  const DistTensor douth = dout.Reshard(HeadsLayout(s.attr, axis), comm);
  std::vector<DistTensor> grads =
      runtime::Dispatch(Op("block_attention_grad"), {s.q, s.k, s.v, s.out, s.lse, douth},
                        BlockAttrs(s.scale, s.causal, {0}, {0}), comm);
  for (DistTensor& g : grads) g = std::move(g).Reshard(s.attr, comm);
  return grads;
}

// ---- Ring ---------------------------------------------------------------------------------
//
// At step t the rank at position p holds the block of position (p - t) mod n; it sends
// what it holds to p + 1 and receives the next from p - 1, the transfer posted before the
// step's block op so that the two overlap, and waited for (Synchronize) after it.

// Sends the tensors to `to` and receives same-dtype tensors of `shapes` from `from` into
// new buffers on `like`'s device; the transfers complete at the next comm.Synchronize().
std::vector<kernels::Tensor> PostExchange(const std::vector<const kernels::Tensor*>& out, int64_t to,
                                          const std::vector<Shape>& shapes, int64_t from,
                                          const kernels::Tensor& like, Communicator& comm) {
  std::vector<kernels::Tensor> in;
  for (const kernels::Tensor* t : out) comm.Send(t->bytes(), t->numel(), t->dtype(), to);
  for (const Shape& shape : shapes) {
    kernels::Tensor& t = in.emplace_back(Empty(like, shape));
    comm.Recv(t.bytes(), t.numel(), t.dtype(), from);
  }
  return in;
}

Shape BlockShape(const Shape& local, int64_t rows) { return {local[0], rows, local[2], local[3]}; }

DistTensor RingForward(Saved& s, const DistTensor& q, const DistTensor& k, const DistTensor& v,
                       Communicator& comm) {
  const Geometry& g = s.g;
  const Local local = LocalMesh(q.process_id());
  const int64_t next = g.group[(g.p + 1) % g.n], prev = g.group[(g.p + g.n - 1) % g.n];
  s.q = local.Wrap(q.local());
  s.k = local.Wrap(k.local());
  s.v = local.Wrap(v.local());
  const Shape shape = q.local().shape();
  auto [out, lse] = EmptyState(s.q);
  DistTensor kb = s.k, vb = s.v;
  for (int64_t t = 0; t < g.n; ++t) {
    const int64_t origin = (g.p - t + g.n) % g.n;
    std::vector<kernels::Tensor> incoming;
    if (t + 1 < g.n) {
      const Shape coming = BlockShape(shape, g.Rows((origin + g.n - 1) % g.n));
      incoming = PostExchange({&kb.local(), &vb.local()}, next, {coming, coming}, prev, q.local(), comm);
    }
    std::vector<DistTensor> state = runtime::Dispatch(
        Op("block_attention"), {s.q, kb, vb, out, lse},
        BlockAttrs(s.scale, s.causal, g.Starts(g.p), g.Starts(origin)), comm);
    out = std::move(state[0]);
    lse = std::move(state[1]);
    if (t + 1 < g.n) {
      comm.Synchronize();
      kb = local.Wrap(std::move(incoming[0]));
      vb = local.Wrap(std::move(incoming[1]));
    }
  }
  s.out = out;
  s.lse = lse;
  return DistTensor::FromLocal(out.local(), q.shape(), q.dtype(), q.mesh(), q.dist_attr(), q.process_id());
}

std::vector<DistTensor> RingBackward(const Saved& s, const DistTensor& dout_global, Communicator& comm) {
  const Geometry& g = s.g;
  const Local local = LocalMesh(s.q.process_id());
  const int64_t next = g.group[(g.p + 1) % g.n], prev = g.group[(g.p + g.n - 1) % g.n];
  const DistTensor dout = local.Wrap(dout_global.local());
  const Shape shape = s.q.local().shape();
  DistTensor kb = s.k, vb = s.v, dq;
  std::optional<DistTensor> dk, dv;  // the travelling block's accumulated gradients
  for (int64_t t = 0; t < g.n; ++t) {
    const int64_t origin = (g.p - t + g.n) % g.n;
    const Shape coming = BlockShape(shape, g.Rows((origin + g.n - 1) % g.n));
    std::vector<kernels::Tensor> incoming;
    if (t + 1 < g.n) {  // the keys and values go on while this step's gradients are formed
      incoming = PostExchange({&kb.local(), &vb.local()}, next, {coming, coming}, prev, s.q.local(), comm);
    }
    std::vector<DistTensor> grads = runtime::Dispatch(
        Op("block_attention_grad"), {s.q, kb, vb, s.out, s.lse, dout},
        BlockAttrs(s.scale, s.causal, g.Starts(g.p), g.Starts(origin)), comm);
    dq = t == 0 ? std::move(grads[0]) : runtime::Dispatch(Op("add"), {dq, grads[0]}, Attrs{}, comm)[0];
    dk = t == 0 ? std::move(grads[1]) : runtime::Dispatch(Op("add"), {*dk, grads[1]}, Attrs{}, comm)[0];
    dv = t == 0 ? std::move(grads[2]) : runtime::Dispatch(Op("add"), {*dv, grads[2]}, Attrs{}, comm)[0];
    if (g.n > 1) {  // the block's dK/dV go with it; after the last step, home to their owner
      std::vector<kernels::Tensor> grads_in =
          PostExchange({&dk->local(), &dv->local()}, next, {coming, coming}, prev, s.q.local(), comm);
      comm.Synchronize();
      if (t + 1 < g.n) {
        kb = local.Wrap(std::move(incoming[0]));
        vb = local.Wrap(std::move(incoming[1]));
      }
      dk = local.Wrap(std::move(grads_in[0]));
      dv = local.Wrap(std::move(grads_in[1]));
    }
  }
  // dk, dv now hold this rank's own block's gradients.
  return {dq, *dk, *dv};
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
    const Variable m(OnDevice(DistTensor::ShardTensor(HostFromDoubles({s, s}, qv.dtype(), mask), qv.mesh(),
                                                      DistAttr::Replicated(2), qv.process_id()),
                              comm.device(), comm.stream()));
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
  saved->attr = qv.dist_attr();
  const bool ulysses = options.strategy == SequenceStrategy::kUlysses;
  const int axis = options.axis;
  DistTensor result =
      ulysses ? UlyssesForward(*saved, qv, kv, vv, axis, comm) : RingForward(*saved, qv, kv, vv, comm);
  const Shape shape = qv.shape();
  const Mesh mesh = qv.mesh();
  const DistAttr attr = qv.dist_attr();
  const int64_t pid = qv.process_id();
  BackwardFunction backward = [saved, ulysses, axis, shape, mesh, attr, pid](
                                  const std::vector<DistTensor>& cotangents, Communicator& c) {
    std::vector<DistTensor> grads =
        ulysses ? UlyssesBackward(*saved, cotangents[0], axis, c) : RingBackward(*saved, cotangents[0], c);
    std::vector<std::optional<DistTensor>> result;
    for (DistTensor& g : grads) {
      if (ulysses) {
        result.push_back(std::move(g));
      } else {  // this rank's blocks, back on q's mesh and layout
        result.push_back(DistTensor::FromLocal(g.local(), shape, saved->g.dtype, mesh, attr, pid));
      }
    }
    return result;
  };
  return ApplyFunction(std::string(ToString(options.strategy)) + " attention", {q, k, v},
                       {std::move(result)}, std::move(backward))[0];
}

}  // namespace spmd::train
