#include "runtime/exec/reshard_executor.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>

#include "rules/model/error.h"
#include "rules/model/layout.h"

namespace spmd::runtime {
namespace {

using kernels::Tensor;

std::string ShapeText(const Shape& s) { return kernels::ShapeToString(s); }

// Throws unless `local` is what `attr` gives the rank at `coord`.
void CheckLocal(const Tensor& local, const Shape& shape, DType dtype, const DistAttr& attr,
                const Mesh& mesh, const std::vector<int64_t>& coord) {
  const Shape want = LocalShape(shape, attr, mesh, coord);
  if (local.shape() != want || local.dtype() != dtype) {
    ThrowInvalid("local", "this rank holds a " + std::string(ToString(local.dtype())) + " " +
                              ShapeText(local.shape()) + " buffer; the step expects " +
                              std::string(ToString(dtype)) + " " + ShapeText(want));
  }
}

// Product of the dims before / after `d`.
int64_t Outer(const Shape& s, int d) {
  int64_t n = 1;
  for (int k = 0; k < d; ++k) n *= s[k];
  return n;
}
int64_t Inner(const Shape& s, int d) {
  int64_t n = 1;
  for (size_t k = d + 1; k < s.size(); ++k) n *= s[k];
  return n;
}

// The members of this rank's group and their coordinates.
struct GroupInfo {
  Group ids;
  std::vector<std::vector<int64_t>> coords;
  int64_t position = 0;
};

GroupInfo GroupAt(const Mesh& mesh, const std::vector<int64_t>& coord, const AxisList& axes,
                  int64_t me) {
  GroupInfo g;
  g.ids = mesh.GroupOf(coord, axes);
  for (size_t q = 0; q < g.ids.size(); ++q) {
    g.coords.push_back(*mesh.CoordinateOf(g.ids[q]));
    if (g.ids[q] == me) g.position = static_cast<int64_t>(q);
  }
  return g;
}

// ---- the steps -------------------------------------------------------------------------------

// A step's inputs, and where its local work runs: the Backend of the communicator's
// device, on the communicator's stream (so the backend's copies are ordered with the
// collectives, backend.h), with new buffers from the allocator of the rank's buffer.
struct StepContext {
  const ReshardStep& step;
  const Shape& shape;
  DType dtype;
  Communicator& comm;
  size_t e;  // bytes per element
  kernels::Backend& backend;
  kernels::Allocator& allocator;
  kernels::Stream stream;

  // An uninitialised buffer of `dtype` on the rank's device.
  Tensor New(Shape s) const { return Tensor::Uninitialized(std::move(s), dtype, allocator, stream); }
  // Copies `extent` elements from `src_at` in `src` (shape src_shape) to `dst_at` in `dst`.
  void Copy(const std::byte* src, const Shape& src_shape, const Shape& src_at, std::byte* dst,
            const Shape& dst_shape, const Shape& dst_at, const Shape& extent) const {
    backend.CopyBox(src, src_shape, src_at, dst, dst_shape, dst_at, extent, e, stream);
  }
};

Tensor Run(const StepContext& c, const AllGather& s, Tensor local,
           const std::vector<int64_t>& coord) {
  const ReshardStep& step = c.step;
  const int d = s.dim;
  const GroupInfo g = GroupAt(step.mesh, coord, s.group, c.comm.rank());
  const int64_t n = static_cast<int64_t>(g.ids.size());
  const Shape& in_shape = local.shape();
  const int64_t outer = Outer(in_shape, d), inner = Inner(in_shape, d);
  std::vector<int64_t> sizes(n), counts(n);
  int64_t total = 0;
  for (int64_t q = 0; q < n; ++q) {
    sizes[q] = DimRangeAt(c.shape[d], step.before.dims[d], step.mesh, g.coords[q]).size();
    counts[q] = outer * sizes[q] * inner;
    total += sizes[q];
  }
  Shape out_shape = in_shape;
  out_shape[d] = total;
  Tensor out = c.New(out_shape);
  if (outer == 1) {  // the chunks are contiguous in the result; stream-ordered, no wait
    c.comm.AllGather(local.bytes(), out.bytes(), counts, c.dtype, g.ids);
    return out;
  }
  // The chunks are strided in the result: one all_gather into a staging buffer (the chunks
  // in position order, contiguous), then each chunk unpacked into its place with the
  // Backend's CopyBox (stream-ordered after the collective). Receiving each chunk in place
  // as a subarray datatype (RecvBox) was tried and took up to 5x as long on 2 loaded ranks:
  // Open MPI's copy-in/copy-out of strided types (docs/BENCHMARKS.md). `outer` is the same
  // on every member (the members' boxes differ on dim d only), so they all take one path.
  Tensor staged = c.New({std::accumulate(counts.begin(), counts.end(), int64_t{0})});
  c.comm.AllGather(local.bytes(), staged.bytes(), counts, c.dtype, g.ids);
  Shape dst_at(in_shape.size(), 0);
  int64_t offset = 0;
  for (int64_t q = 0; q < n; ++q) {
    Shape chunk = in_shape;
    chunk[d] = sizes[q];
    c.Copy(staged.bytes() + offset * c.e, chunk, Shape(chunk.size(), 0), out.bytes(), out_shape,
           dst_at, chunk);
    dst_at[d] += sizes[q];
    offset += counts[q];
  }
  return out;
}

Tensor Run(const StepContext& c, const ReduceScatter& s, Tensor local,
           const std::vector<int64_t>& coord) {
  const ReshardStep& step = c.step;
  const int d = s.dim;
  const GroupInfo g = GroupAt(step.mesh, coord, s.group, c.comm.rank());
  const int64_t n = static_cast<int64_t>(g.ids.size());
  const Shape& in_shape = local.shape();
  const int64_t outer = Outer(in_shape, d), inner = Inner(in_shape, d);
  const int64_t base = DimRangeAt(c.shape[d], step.before.dims[d], step.mesh, coord).begin;
  std::vector<Range> chunks(n);
  std::vector<int64_t> counts(n);
  for (int64_t q = 0; q < n; ++q) {
    const Range r = DimRangeAt(c.shape[d], step.after.dims[d], step.mesh, g.coords[q]);
    chunks[q] = Range{r.begin - base, r.end - base};
    counts[q] = outer * r.size() * inner;
  }
  Shape out_shape = in_shape;
  out_shape[d] = chunks[g.position].size();
  Tensor out = c.New(out_shape);
  if (outer == 1) {  // stream-ordered, no wait
    c.comm.ReduceScatter(local.bytes(), out.bytes(), counts, c.dtype, s.op, g.ids);
    return out;
  }
  // Packed along d into the members' chunks; freed in stream order after the collective.
  Tensor packed_buffer = c.New({local.numel()});
  std::byte* packed = packed_buffer.bytes();
  int64_t offset_elements = 0;
  for (int64_t q = 0; q < n; ++q) {
    Shape chunk = in_shape;
    chunk[d] = chunks[q].size();
    Shape src_at(in_shape.size(), 0);
    src_at[d] = chunks[q].begin;
    c.Copy(local.bytes(), in_shape, src_at, packed + offset_elements * c.e, chunk,
           Shape(chunk.size(), 0), chunk);
    offset_elements += counts[q];
  }
  c.comm.ReduceScatter(packed, out.bytes(), counts, c.dtype, s.op, g.ids);
  return out;
}

Tensor Run(const StepContext& c, const AllReduce& s, Tensor local,
           const std::vector<int64_t>& coord) {
  const GroupInfo g = GroupAt(c.step.mesh, coord, s.group, c.comm.rank());
  c.comm.AllReduce(local.bytes(), local.bytes(), local.numel(), c.dtype, s.op, g.ids);
  return local;  // stream-ordered, no wait
}

// The element offset of `box` (local coordinates `at`, sizes `extent`) in a row-major
// array of `shape` when the box is one contiguous run (leading dims of extent 1, then any,
// then whole dims); nothing otherwise.
std::optional<int64_t> ContiguousOffset(const Shape& shape, const Shape& at, const Shape& extent) {
  const size_t rank = shape.size();
  size_t k = 0;
  while (k < rank && extent[k] == 1) ++k;
  for (size_t d = k + 1; d < rank; ++d) {
    if (extent[d] != shape[d]) return std::nullopt;
  }
  int64_t offset = 0;
  for (size_t d = 0; d < rank; ++d) offset = offset * shape[d] + at[d];
  return offset;
}

Tensor Run(const StepContext& c, const AllToAll& s, Tensor local,
           const std::vector<int64_t>& coord) {
  const ReshardStep& step = c.step;
  const GroupInfo g = GroupAt(step.mesh, coord, s.group, c.comm.rank());
  const int64_t n = static_cast<int64_t>(g.ids.size());
  const Box my_before = BoxAt(c.shape, step.before, step.mesh, coord);
  const Box my_after = BoxAt(c.shape, step.after, step.mesh, coord);
  Tensor out = c.New(SizesOf(my_after));
  std::vector<Box> send_boxes(n), recv_boxes(n);
  for (int64_t q = 0; q < n; ++q) {
    send_boxes[q] = Intersect(my_before, BoxAt(c.shape, step.after, step.mesh, g.coords[q]));
    recv_boxes[q] = Intersect(BoxAt(c.shape, step.before, step.mesh, g.coords[q]), my_after);
  }
  // Point to point: each part goes to its member as one contiguous message, posted in
  // shifted order (to position + k, from position - k) so that the members do not all
  // start with the same peer. A part that is one contiguous run of its buffer is sent from
  // (received into) its place; a strided one is packed into a staging buffer first
  // (unpacked from one after Synchronize), with the Backend's CopyBox. (Every member takes
  // this path: a choice between this and the all_to_all collective made from a rank's own
  // boxes could differ between members.) Strided parts travelled as subarray datatypes
  // (SendBox / RecvBox) before: Open MPI moves those through its copy-in/copy-out pipeline,
  // which took up to 2x a pack + contiguous send at 64 MiB on 2 ranks (docs/BENCHMARKS.md).
  const int64_t e = static_cast<int64_t>(c.e);
  std::vector<int64_t> send_run(n, -1), recv_run(n, -1);
  int64_t send_staged = 0, recv_staged = 0;
  for (int64_t q = 0; q < n; ++q) {
    if (q == g.position) continue;
    if (const auto run = ContiguousOffset(local.shape(), BeginsOf(RelativeTo(send_boxes[q], my_before)),
                                          SizesOf(send_boxes[q]))) {
      send_run[q] = *run;
    } else {
      send_staged += Volume(send_boxes[q]);
    }
    if (const auto run = ContiguousOffset(out.shape(), BeginsOf(RelativeTo(recv_boxes[q], my_after)),
                                          SizesOf(recv_boxes[q]))) {
      recv_run[q] = *run;
    } else {
      recv_staged += Volume(recv_boxes[q]);
    }
  }
  // Freed in stream order after Synchronize.
  Tensor send_stage = c.New({send_staged});
  Tensor recv_stage = c.New({recv_staged});
  std::vector<int64_t> recv_stage_at(n, -1);
  int64_t staged = 0;
  for (int64_t k = 1; k < n; ++k) {
    const int64_t q = (g.position + k) % n;
    const int64_t volume = Volume(send_boxes[q]);
    if (volume == 0) continue;
    const Shape extent = SizesOf(send_boxes[q]);
    if (send_run[q] >= 0) {
      c.comm.Send(local.bytes() + send_run[q] * e, volume, c.dtype, g.ids[q]);
      continue;
    }
    std::byte* piece = send_stage.bytes() + staged * e;
    c.Copy(local.bytes(), local.shape(), BeginsOf(RelativeTo(send_boxes[q], my_before)), piece,
           extent, Shape(extent.size(), 0), extent);
    c.comm.Send(piece, volume, c.dtype, g.ids[q]);
    staged += volume;
  }
  staged = 0;
  for (int64_t k = 1; k < n; ++k) {
    const int64_t q = (g.position + n - k) % n;
    const int64_t volume = Volume(recv_boxes[q]);
    if (volume == 0) continue;
    if (recv_run[q] >= 0) {
      c.comm.Recv(out.bytes() + recv_run[q] * e, volume, c.dtype, g.ids[q]);
      continue;
    }
    recv_stage_at[q] = staged;
    c.comm.Recv(recv_stage.bytes() + staged * e, volume, c.dtype, g.ids[q]);
    staged += volume;
  }
  const Box kept = Intersect(my_before, my_after);  // the own part, while the others travel
  if (Volume(kept) > 0) {
    c.Copy(local.bytes(), local.shape(), BeginsOf(RelativeTo(kept, my_before)), out.bytes(),
           out.shape(), BeginsOf(RelativeTo(kept, my_after)), SizesOf(kept));
  }
  c.comm.Synchronize();  // point to point: complete only at Synchronize
  for (int64_t q = 0; q < n; ++q) {
    if (recv_stage_at[q] < 0) continue;
    const Shape extent = SizesOf(recv_boxes[q]);
    c.Copy(recv_stage.bytes() + recv_stage_at[q] * e, extent, Shape(extent.size(), 0), out.bytes(),
           out.shape(), BeginsOf(RelativeTo(recv_boxes[q], my_after)), extent);
  }
  return out;
}

std::optional<Tensor> RunSendRecv(const StepContext& c, std::optional<Tensor> local) {
  const ReshardStep& step = c.step;
  const int64_t me = c.comm.rank();
  const std::optional<std::vector<int64_t>> from_coord = step.mesh.CoordinateOf(me);
  const std::optional<std::vector<int64_t>> to_coord = step.to_mesh.CoordinateOf(me);
  if (!from_coord && !to_coord) return std::nullopt;
  const std::vector<Transfer> transfers = SendRecvTransfers(step, c.shape);
  Box my_before, my_after;
  if (from_coord) my_before = BoxAt(c.shape, step.before, step.mesh, *from_coord);
  std::optional<Tensor> out;
  if (to_coord) {
    my_after = BoxAt(c.shape, step.after, step.to_mesh, *to_coord);
    out = c.New(SizesOf(my_after));
  }
  // Each piece is sent from (received into) its place in this rank's old (new) buffer: a
  // contiguous run as it is, a strided box as a BufferBox (no packing pass where the
  // backend can read or write it in place). Both buffers stay untouched until Synchronize.
  const int64_t e = static_cast<int64_t>(c.e);
  for (const Transfer& t : transfers) {
    if (t.from_process != me) continue;
    const Shape at = BeginsOf(RelativeTo(t.box, my_before)), extent = SizesOf(t.box);
    if (const std::optional<int64_t> run = ContiguousOffset(local->shape(), at, extent)) {
      c.comm.Send(local->bytes() + *run * e, Volume(t.box), c.dtype, t.to_process);
    } else {
      c.comm.SendBox(local->bytes(), BufferBox{local->shape(), at, extent}, c.dtype, t.to_process);
    }
  }
  for (const Transfer& t : transfers) {
    if (t.to_process != me) continue;
    const Shape at = BeginsOf(RelativeTo(t.box, my_after)), extent = SizesOf(t.box);
    if (const std::optional<int64_t> run = ContiguousOffset(out->shape(), at, extent)) {
      c.comm.Recv(out->bytes() + *run * e, Volume(t.box), c.dtype, t.from_process);
    } else {
      c.comm.RecvBox(out->bytes(), BufferBox{out->shape(), at, extent}, c.dtype, t.from_process);
    }
  }
  if (out && from_coord) {  // what this rank already holds
    const Box kept = Intersect(my_before, my_after);
    if (Volume(kept) > 0) {
      c.Copy(local->bytes(), local->shape(), BeginsOf(RelativeTo(kept, my_before)), out->bytes(),
             out->shape(), BeginsOf(RelativeTo(kept, my_after)), SizesOf(kept));
    }
  }
  c.comm.Synchronize();  // point to point: complete only at Synchronize
  return out;
}

Tensor Run(const StepContext& c, const LocalSlice&, Tensor local,
           const std::vector<int64_t>& coord) {
  const Box before = BoxAt(c.shape, c.step.before, c.step.mesh, coord);
  const Box after = BoxAt(c.shape, c.step.after, c.step.mesh, coord);
  const Box rel = RelativeTo(after, before);
  Tensor out = c.New(SizesOf(rel));
  c.Copy(local.bytes(), local.shape(), BeginsOf(rel), out.bytes(), out.shape(),
         Shape(rel.size(), 0), SizesOf(rel));
  return out;
}

Tensor Run(const StepContext& c, const LocalPartial& s, Tensor local,
           const std::vector<int64_t>& coord) {
  if (coord[s.axis] == 0) return local;
  switch (s.op) {
    case ReduceOp::kSum:  // the other ranks hold the identity of the reduction
      c.backend.Fill(local.bytes(), local.numel(), c.dtype, 0.0, c.stream);
      return local;
    case ReduceOp::kProd:
      c.backend.Fill(local.bytes(), local.numel(), c.dtype, 1.0, c.stream);
      return local;
    default:  // avg, max, min, any, all: every rank keeps its value
      return local;
  }
}

Tensor Run(const StepContext& c, const ShardToPartial&, Tensor local,
           const std::vector<int64_t>& coord) {
  const Box before = BoxAt(c.shape, c.step.before, c.step.mesh, coord);
  const Box after = BoxAt(c.shape, c.step.after, c.step.mesh, coord);
  Tensor out = c.New(SizesOf(after));
  c.backend.Fill(out.bytes(), out.numel(), c.dtype, 0.0, c.stream);
  if (local.numel() > 0) {
    c.Copy(local.bytes(), local.shape(), Shape(local.shape().size(), 0), out.bytes(),
           out.shape(), BeginsOf(RelativeTo(before, after)), local.shape());
  }
  return out;
}

Tensor Run(const StepContext& c, const Rescale& s, Tensor local, const std::vector<int64_t>&) {
  const int64_t n = c.step.mesh.axis_size(s.axis);
  const bool divide = s.from_op == ReduceOp::kAvg && s.to_op == ReduceOp::kSum;
  if (!IsFloating(c.dtype)) {
    ThrowUnsupported("step", "rescale needs a floating dtype, got " + std::string(ToString(c.dtype)));
  }
  c.backend.Scale(local.bytes(), local.numel(), c.dtype, n, divide, c.stream);
  return local;
}

// ---- the plan cache ----------------------------------------------------------------------

// The cache key: every field of the request written as raw integers, each list behind its
// length, so that two requests share a key exactly when they are equal (the meshes'
// shapes, ids and axis names, the attrs' dims and partial axes, the shape and dtype).
// Built without text formatting: a warm Reshard pays for this key and one lookup.
class PlanKeyWriter {
 public:
  PlanKeyWriter() { key_.reserve(256); }  // one allocation for a typical request
  void Int(int64_t v) { key_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void Ints(const std::vector<int64_t>& v) {
    Int(static_cast<int64_t>(v.size()));
    key_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  }
  void Mesh(const spmd::Mesh& m) {
    Ints(m.shape());
    Ints(m.process_ids());
    Int(static_cast<int64_t>(m.axis_names().size()));
    for (const std::string& name : m.axis_names()) {
      Int(static_cast<int64_t>(name.size()));
      key_ += name;
    }
  }
  void Attr(const DistAttr& a) {
    Int(static_cast<int64_t>(a.dims.size()));
    for (const AxisList& axes : a.dims) {
      Int(static_cast<int64_t>(axes.size()));
      for (int axis : axes) Int(axis);
    }
    Int(static_cast<int64_t>(a.partial.size()));
    for (const auto& [axis, op] : a.partial) {
      Int(axis);
      Int(static_cast<int64_t>(op));
    }
  }
  std::string Take() { return std::move(key_); }

 private:
  std::string key_;
};

std::string PlanKey(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                    const DistAttr& to, const Shape& shape, DType dtype) {
  PlanKeyWriter w;
  w.Mesh(from_mesh);
  w.Attr(from);
  w.Mesh(to_mesh);
  w.Attr(to);
  w.Ints(shape);
  w.Int(static_cast<int64_t>(dtype));
  return w.Take();
}

}  // namespace

// ---- boxes ------------------------------------------------------------------------------------

kernels::Tensor SliceBox(const kernels::Tensor& t, const Box& box) {
  const Shape extent = SizesOf(box);
  kernels::Tensor out = kernels::Tensor::Uninitialized(extent, t.dtype(), t.allocator(), t.stream());
  if (out.numel() > 0) {
    kernels::BackendFor(t.device())
        .CopyBox(t.bytes(), t.shape(), BeginsOf(box), out.bytes(), extent,
                 Shape(extent.size(), 0), extent, t.element_size(), t.stream());
  }
  return out;
}

// ---- the executor ---------------------------------------------------------------------------

std::optional<kernels::Tensor> ExecuteStep(const ReshardStep& step, const Shape& shape,
                                           DType dtype, std::optional<kernels::Tensor> local,
                                           Communicator& comm) {
  const std::optional<std::vector<int64_t>> coord = step.mesh.CoordinateOf(comm.rank());
  if (coord) {
    if (!local) ThrowInvalid("local", "a rank of the step's mesh holds no buffer");
    CheckLocal(*local, shape, dtype, step.before, step.mesh, *coord);
  }
  if (local && (local->device() != comm.device() || local->stream() != comm.stream())) {
    ThrowInvalid("local.device", "this rank's buffer is on " + kernels::ToString(local->device()) +
                                     ", the communicator's on " +
                                     kernels::ToString(comm.device()) + " (or another stream)");
  }
  kernels::Backend& backend = kernels::BackendFor(comm.device());
  kernels::Allocator& allocator = local ? local->allocator() : backend.AllocatorFor(comm.device());
  const StepContext c{step,    shape,     dtype,        comm, static_cast<size_t>(ElementSize(dtype)),
                      backend, allocator, comm.stream()};
  if (step.kind() == StepKind::kSendRecv) return RunSendRecv(c, std::move(local));
  if (!coord) return std::nullopt;
  return std::visit(
      [&](const auto& action) -> std::optional<Tensor> {
        if constexpr (std::is_same_v<std::decay_t<decltype(action)>, SendRecv>) {
          return std::nullopt;  // handled above
        } else {
          return Run(c, action, std::move(*local), *coord);
        }
      },
      step.action);
}

std::optional<kernels::Tensor> ExecutePlan(const ReshardPlan& plan,
                                           std::optional<kernels::Tensor> local,
                                           Communicator& comm, ReshardReport* report) {
  const int64_t me = comm.rank();
  const bool in_from = plan.from_mesh.CoordinateOf(me).has_value();
  if (in_from && !local) ThrowInvalid("local", "a rank of the source mesh holds no buffer");
  if (!in_from) local.reset();
  if (report != nullptr) *report = ReshardReport{};
  for (const ReshardStep& step : plan.steps) {
    const int64_t sent0 = comm.counters().total_sent();
    const int64_t received0 = comm.counters().total_received();
    const ByteCount transport0 = comm.transport_bytes();
    local = ExecuteStep(step, plan.shape, plan.dtype, std::move(local), comm);
    if (report != nullptr) {
      StepRecord r;
      r.kind = step.kind();
      r.planned = StepBytesOf(step, plan.shape, plan.dtype, me);
      r.counted = RankBytes{comm.counters().total_sent() - sent0,
                            comm.counters().total_received() - received0};
      const ByteCount transport = comm.transport_bytes();
      r.transport = RankBytes{transport.sent - transport0.sent,
                              transport.received - transport0.received};
      report->planned.sent += r.planned.sent;
      report->planned.received += r.planned.received;
      report->counted.sent += r.counted.sent;
      report->counted.received += r.counted.received;
      report->transport.sent += r.transport.sent;
      report->transport.received += r.transport.received;
      report->steps.push_back(r);
    }
  }
  if (!plan.to_mesh.CoordinateOf(me)) return std::nullopt;
  return local;
}

std::shared_ptr<const ReshardPlan> CachedPlan(const Mesh& from_mesh, const DistAttr& from,
                                              const Mesh& to_mesh, const DistAttr& to,
                                              const Shape& shape, DType dtype) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const ReshardPlan>> cache;
  const std::string key = PlanKey(from_mesh, from, to_mesh, to, shape, dtype);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  auto plan = std::make_shared<const ReshardPlan>(
      from_mesh == to_mesh ? PlanReshard(from_mesh, shape, dtype, from, to)
                           : PlanReshard(from_mesh, from, to_mesh, to, shape, dtype));
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= 4096) cache.clear();
  cache.emplace(key, plan);
  return plan;
}

ReshardPlan CachedPlanReshard(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                              const DistAttr& to, const Shape& shape, DType dtype) {
  return *CachedPlan(from_mesh, from, to_mesh, to, shape, dtype);
}

}  // namespace spmd::runtime
