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

// Throws unless `local` is a `dtype` buffer of shape `want` (what the step's `before`
// gives the rank).
void CheckLocal(const Tensor& local, const Shape& want, DType dtype) {
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

// ---- what a step needs on one rank -----------------------------------------------------------

}  // namespace

// One point-to-point message of a step on this rank: `volume` elements to or from `peer`,
// the box at `at` of sizes `extent` in this rank's buffer (local coordinates), which is one
// contiguous run starting at element `run`, or strided (run < 0: packed into / unpacked
// from the staging buffer at element `staged`).
struct Piece {
  int64_t peer = -1;
  int64_t volume = 0;
  int64_t run = -1;
  int64_t staged = 0;
  Shape at, extent;
};

// The part of a rank's old box that is also in its new one: at `at` in the old buffer, at
// `to` in the new one, of sizes `extent`.
struct Kept {
  Shape at, to, extent;
};

// Everything a step needs on one rank that follows from the step, the global shape and the
// rank alone: coordinates, the group, the members' chunk sizes, this rank's boxes and its
// send_recv pieces. Worked out once per (cached plan, rank) and kept with the plan, so a
// warm Reshard pays only for its messages and copies (callgrind: a send_recv step spent
// 9,300 instructions a call listing the pieces of every rank, an all_to_all 2n + 2 boxes).
struct StepPrep {
  std::optional<std::vector<int64_t>> coord;     // in step.mesh
  std::optional<std::vector<int64_t>> to_coord;  // in step.to_mesh (send_recv)
  Shape local_shape;                              // what this rank holds under step.before
  GroupInfo group;                                // collectives and all_to_all
  std::vector<int64_t> sizes, counts;             // all_gather, reduce_scatter
  std::vector<Range> chunks;                      // reduce_scatter (relative to this rank's box)
  Box before, after;                              // this rank's boxes
  // send_recv and all_to_all: this rank's messages in posting order, where each lies in its
  // buffer, the elements of the strided ones (staged), and the part it keeps.
  std::vector<Piece> send_pieces, recv_pieces;
  int64_t send_staged = 0, recv_staged = 0;
  std::optional<Kept> kept;
  Shape after_shape;          // SizesOf(after)
  Shape origin;               // rank zeros (a staged piece's place in its staging buffer)
};

struct RankPrep {
  std::vector<StepPrep> steps;
};

namespace {

// Appends the message of `box` (global coordinates) to or from `peer` to `pieces`, placed in
// a buffer holding `mine`; a strided one takes the next `volume` elements of `staged`.
void AddPiece(const Box& box, int64_t peer, const Box& mine, std::vector<Piece>& pieces, int64_t& staged) {
  Piece m;
  m.peer = peer;
  m.volume = Volume(box);
  m.at = BeginsOf(RelativeTo(box, mine));
  m.extent = SizesOf(box);
  if (const std::optional<int64_t> run = ContiguousOffset(SizesOf(mine), m.at, m.extent)) {
    m.run = *run;
  } else {
    m.staged = staged;
    staged += m.volume;
  }
  pieces.push_back(std::move(m));
}

// The part of `before` that is also in `after` (both this rank's boxes), if any.
std::optional<Kept> KeptPart(const Box& before, const Box& after) {
  const Box kept = Intersect(before, after);
  if (Volume(kept) == 0) return std::nullopt;
  return Kept{BeginsOf(RelativeTo(kept, before)), BeginsOf(RelativeTo(kept, after)), SizesOf(kept)};
}

StepPrep Prepare(const ReshardStep& step, const Shape& shape, int64_t me) {
  StepPrep p;
  p.origin.assign(shape.size(), 0);
  p.coord = step.mesh.CoordinateOf(me);
  if (step.kind() == StepKind::kSendRecv) {
    p.to_coord = step.to_mesh.CoordinateOf(me);
    if (p.coord) p.before = BoxAt(shape, step.before, step.mesh, *p.coord);
    if (p.to_coord) p.after = BoxAt(shape, step.after, step.to_mesh, *p.to_coord);
    if (p.coord) p.local_shape = LocalShape(shape, step.before, step.mesh, *p.coord);
    p.after_shape = SizesOf(p.after);
    if (p.coord || p.to_coord) {  // the pieces this rank moves, in SendRecvTransfers' order
      const std::vector<Transfer> transfers = SendRecvTransfers(step, shape);
      for (const Transfer& t : transfers) {
        if (t.from_process == me) AddPiece(t.box, t.to_process, p.before, p.send_pieces, p.send_staged);
      }
      for (const Transfer& t : transfers) {
        if (t.to_process == me) AddPiece(t.box, t.from_process, p.after, p.recv_pieces, p.recv_staged);
      }
    }
    if (p.coord && p.to_coord) p.kept = KeptPart(p.before, p.after);
    return p;
  }
  if (!p.coord) return p;
  const std::vector<int64_t>& coord = *p.coord;
  p.before = BoxAt(shape, step.before, step.mesh, coord);
  p.after = BoxAt(shape, step.after, step.mesh, coord);
  p.local_shape = LocalShape(shape, step.before, step.mesh, coord);
  std::visit(
      [&](const auto& s) {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, AllGather> || std::is_same_v<S, ReduceScatter> ||
                      std::is_same_v<S, AllReduce> || std::is_same_v<S, AllToAll>) {
          p.group = GroupAt(step.mesh, coord, s.group, me);
        }
        const int64_t n = static_cast<int64_t>(p.group.ids.size());
        if constexpr (std::is_same_v<S, AllGather>) {
          p.sizes.resize(n);
          for (int64_t q = 0; q < n; ++q) {
            p.sizes[q] = DimRangeAt(shape[s.dim], step.before.dims[s.dim], step.mesh, p.group.coords[q]).size();
          }
        } else if constexpr (std::is_same_v<S, ReduceScatter>) {
          const int64_t base = DimRangeAt(shape[s.dim], step.before.dims[s.dim], step.mesh, coord).begin;
          p.chunks.resize(n);
          for (int64_t q = 0; q < n; ++q) {
            const Range r = DimRangeAt(shape[s.dim], step.after.dims[s.dim], step.mesh, p.group.coords[q]);
            p.chunks[q] = Range{r.begin - base, r.end - base};
          }
        } else if constexpr (std::is_same_v<S, AllToAll>) {
          std::vector<Box> send_boxes(n), recv_boxes(n);
          for (int64_t q = 0; q < n; ++q) {
            send_boxes[q] = Intersect(p.before, BoxAt(shape, step.after, step.mesh, p.group.coords[q]));
            recv_boxes[q] = Intersect(BoxAt(shape, step.before, step.mesh, p.group.coords[q]), p.after);
          }
          const int64_t at = p.group.position;
          for (int64_t k = 1; k < n; ++k) {
            const int64_t to = (at + k) % n, from = (at + n - k) % n;
            if (Volume(send_boxes[to]) > 0) {
              AddPiece(send_boxes[to], p.group.ids[to], p.before, p.send_pieces, p.send_staged);
            }
            if (Volume(recv_boxes[from]) > 0) {
              AddPiece(recv_boxes[from], p.group.ids[from], p.after, p.recv_pieces, p.recv_staged);
            }
          }
          p.after_shape = SizesOf(p.after);
          p.kept = KeptPart(p.before, p.after);
        }
      },
      step.action);
  return p;
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

Tensor Run(const StepContext& c, const AllGather& s, Tensor local, const StepPrep& p) {
  const int d = s.dim;
  const GroupInfo& g = p.group;
  const int64_t n = static_cast<int64_t>(g.ids.size());
  const Shape& in_shape = local.shape();
  const int64_t outer = Outer(in_shape, d), inner = Inner(in_shape, d);
  const std::vector<int64_t>& sizes = p.sizes;
  std::vector<int64_t> counts(n);
  int64_t total = 0;
  for (int64_t q = 0; q < n; ++q) {
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

Tensor Run(const StepContext& c, const ReduceScatter& s, Tensor local, const StepPrep& p) {
  const int d = s.dim;
  const GroupInfo& g = p.group;
  const int64_t n = static_cast<int64_t>(g.ids.size());
  const Shape& in_shape = local.shape();
  const int64_t outer = Outer(in_shape, d), inner = Inner(in_shape, d);
  const std::vector<Range>& chunks = p.chunks;
  std::vector<int64_t> counts(n);
  for (int64_t q = 0; q < n; ++q) counts[q] = outer * chunks[q].size() * inner;
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

Tensor Run(const StepContext& c, const AllReduce& s, Tensor local, const StepPrep& p) {
  c.comm.AllReduce(local.bytes(), local.bytes(), local.numel(), c.dtype, s.op, p.group.ids);
  return local;  // stream-ordered, no wait
}


// The staging buffers of one exchange (only where a strided piece needs one), kept until
// Synchronize (freed in stream order after it).
struct Exchange {
  std::optional<Tensor> send_stage, recv_stage;
};

// Posts the sends (from `src`) and the receives (into `dst`) of a point-to-point step,
// in the order of its pieces (StepPrep). A piece that is one contiguous run of its buffer
// is sent from (received into) its place; a strided one is packed into a staging buffer
// with the Backend's CopyBox first (received into one, and unpacked by Unpack after
// Synchronize): every message is one contiguous run. Strided pieces travelled as subarray
// datatypes (SendBox / RecvBox) before: Open MPI moves those through its copy-in/copy-out
// pipeline, which took up to 2x a pack + contiguous send at 64 MiB on 2 ranks and 1.6-1.8x
// at 1 MiB on 4 (docs/BENCHMARKS.md). Where each piece lies was worked out in Prepare, so
// a warm call allocates only the staging buffers it needs.
Exchange Post(const StepContext& c, const StepPrep& p, const Tensor* src, Tensor* dst) {
  const int64_t e = static_cast<int64_t>(c.e);
  Exchange x;
  if (p.send_staged > 0) x.send_stage = c.New({p.send_staged});
  if (p.recv_staged > 0) x.recv_stage = c.New({p.recv_staged});
  for (const Piece& m : p.send_pieces) {
    if (m.run >= 0) {
      c.comm.Send(src->bytes() + m.run * e, m.volume, c.dtype, m.peer);
      continue;
    }
    std::byte* piece = x.send_stage->bytes() + m.staged * e;
    c.Copy(src->bytes(), src->shape(), m.at, piece, m.extent, p.origin, m.extent);
    c.comm.Send(piece, m.volume, c.dtype, m.peer);
  }
  for (const Piece& m : p.recv_pieces) {
    std::byte* into = m.run >= 0 ? dst->bytes() + m.run * e : x.recv_stage->bytes() + m.staged * e;
    c.comm.Recv(into, m.volume, c.dtype, m.peer);
  }
  return x;
}

// While the messages travel: the part this rank keeps, from its old buffer to its new one.
void CopyKept(const StepContext& c, const StepPrep& p, const Tensor& src, Tensor& dst) {
  if (!p.kept) return;
  c.Copy(src.bytes(), src.shape(), p.kept->at, dst.bytes(), dst.shape(), p.kept->to, p.kept->extent);
}

// After Synchronize: each strided piece received into the staging buffer to its place.
void Unpack(const StepContext& c, const StepPrep& p, const Exchange& x, Tensor& dst) {
  const int64_t e = static_cast<int64_t>(c.e);
  for (const Piece& m : p.recv_pieces) {
    if (m.run >= 0) continue;
    c.Copy(x.recv_stage->bytes() + m.staged * e, m.extent, p.origin, dst.bytes(), dst.shape(), m.at,
           m.extent);
  }
}

// Each part goes to its member as one contiguous message (Post), in shifted order (to
// position + k, from position - k: Prepare) so that the members do not all start with the
// same peer. (Every member takes this path: a choice between this and the all_to_all
// collective made from a rank's own boxes could differ between members.)
Tensor Run(const StepContext& c, const AllToAll&, Tensor local, const StepPrep& p) {
  Tensor out = c.New(p.after_shape);
  const Exchange x = Post(c, p, &local, &out);
  CopyKept(c, p, local, out);
  c.comm.Synchronize();  // point to point: complete only at Synchronize
  Unpack(c, p, x, out);
  return out;
}

// Exactly SendRecvTransfers' pieces, each one contiguous message (Post); both buffers stay
// untouched until Synchronize.
std::optional<Tensor> RunSendRecv(const StepContext& c, std::optional<Tensor> local,
                                  const StepPrep& p) {
  if (!p.coord && !p.to_coord) return std::nullopt;
  std::optional<Tensor> out;
  if (p.to_coord) out = c.New(p.after_shape);
  const Exchange x = Post(c, p, local ? &*local : nullptr, out ? &*out : nullptr);
  if (out && local) CopyKept(c, p, *local, *out);
  c.comm.Synchronize();  // point to point: complete only at Synchronize
  if (out) Unpack(c, p, x, *out);
  return out;
}

Tensor Run(const StepContext& c, const LocalSlice&, Tensor local, const StepPrep& p) {
  const Box rel = RelativeTo(p.after, p.before);
  Tensor out = c.New(SizesOf(rel));
  c.Copy(local.bytes(), local.shape(), BeginsOf(rel), out.bytes(), out.shape(),
         Shape(rel.size(), 0), SizesOf(rel));
  return out;
}

Tensor Run(const StepContext& c, const LocalPartial& s, Tensor local, const StepPrep& p) {
  if ((*p.coord)[s.axis] == 0) return local;
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

Tensor Run(const StepContext& c, const ShardToPartial&, Tensor local, const StepPrep& p) {
  const Box& before = p.before;
  const Box& after = p.after;
  Tensor out = c.New(SizesOf(after));
  c.backend.Fill(out.bytes(), out.numel(), c.dtype, 0.0, c.stream);
  if (local.numel() > 0) {
    c.Copy(local.bytes(), local.shape(), Shape(local.shape().size(), 0), out.bytes(),
           out.shape(), BeginsOf(RelativeTo(before, after)), local.shape());
  }
  return out;
}

Tensor Run(const StepContext& c, const Rescale& s, Tensor local, const StepPrep&) {
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
  explicit PlanKeyWriter(std::string& key) : key_(key) { key_.clear(); }
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
  void Attr(const DistAttr& a) { AppendKey(key_, a); }  // self-delimiting, as the fixed-width Int

 private:
  std::string& key_;
};

// The key of a request, written into one buffer per thread (a warm lookup allocates
// nothing); valid until the thread's next PlanKey.
const std::string& PlanKey(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                           const DistAttr& to, const Shape& shape, DType dtype) {
  thread_local std::string key;
  PlanKeyWriter w(key);
  w.Mesh(from_mesh);
  w.Attr(from);
  w.Mesh(to_mesh);
  w.Attr(to);
  w.Ints(shape);
  w.Int(static_cast<int64_t>(dtype));
  return key;
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

namespace {

std::optional<kernels::Tensor> RunStep(const ReshardStep& step, const Shape& shape, DType dtype,
                                       std::optional<kernels::Tensor> local, Communicator& comm,
                                       const StepPrep& p) {
  if (p.coord) {
    if (!local) ThrowInvalid("local", "a rank of the step's mesh holds no buffer");
    CheckLocal(*local, p.local_shape, dtype);
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
  if (step.kind() == StepKind::kSendRecv) return RunSendRecv(c, std::move(local), p);
  if (!p.coord) return std::nullopt;
  return std::visit(
      [&](const auto& action) -> std::optional<Tensor> {
        if constexpr (std::is_same_v<std::decay_t<decltype(action)>, SendRecv>) {
          return std::nullopt;  // handled above
        } else {
          return Run(c, action, std::move(*local), p);
        }
      },
      step.action);
}

std::optional<kernels::Tensor> RunPlan(const ReshardPlan& plan, const RankPrep* prep,
                                       std::optional<kernels::Tensor> local, Communicator& comm,
                                       ReshardReport* report) {
  const int64_t me = comm.rank();
  const bool in_from = plan.from_mesh.Contains(me);
  if (in_from && !local) ThrowInvalid("local", "a rank of the source mesh holds no buffer");
  if (!in_from) local.reset();
  if (report != nullptr) *report = ReshardReport{};
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    const ReshardStep& step = plan.steps[k];
    const int64_t sent0 = comm.counters().total_sent();
    const int64_t received0 = comm.counters().total_received();
    const ByteCount transport0 = comm.transport_bytes();
    if (prep != nullptr) {
      local = RunStep(step, plan.shape, plan.dtype, std::move(local), comm, prep->steps[k]);
    } else {
      local = RunStep(step, plan.shape, plan.dtype, std::move(local), comm,
                      Prepare(step, plan.shape, me));
    }
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
  if (!plan.to_mesh.Contains(me)) return std::nullopt;
  return local;
}

}  // namespace

std::optional<kernels::Tensor> ExecuteStep(const ReshardStep& step, const Shape& shape,
                                           DType dtype, std::optional<kernels::Tensor> local,
                                           Communicator& comm) {
  return RunStep(step, shape, dtype, std::move(local), comm, Prepare(step, shape, comm.rank()));
}

std::optional<kernels::Tensor> ExecutePlan(const ReshardPlan& plan,
                                           std::optional<kernels::Tensor> local,
                                           Communicator& comm, ReshardReport* report) {
  return RunPlan(plan, nullptr, std::move(local), comm, report);
}

PreparedPlan::PreparedPlan(ReshardPlan p) : plan(std::move(p)) {}
PreparedPlan::~PreparedPlan() = default;

std::shared_ptr<const RankPrep> PreparedPlan::For(int64_t rank) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = by_rank_.find(rank); it != by_rank_.end()) return it->second;
  }
  auto prep = std::make_shared<RankPrep>();
  prep->steps.reserve(plan.steps.size());
  for (const ReshardStep& step : plan.steps) prep->steps.push_back(Prepare(step, plan.shape, rank));
  std::lock_guard<std::mutex> lock(mu_);
  return by_rank_.emplace(rank, std::move(prep)).first->second;
}

std::optional<kernels::Tensor> ExecutePlan(const PreparedPlan& prepared,
                                           std::optional<kernels::Tensor> local,
                                           Communicator& comm, ReshardReport* report) {
  const std::shared_ptr<const RankPrep> prep = prepared.For(comm.rank());
  return RunPlan(prepared.plan, prep.get(), std::move(local), comm, report);
}

std::shared_ptr<const PreparedPlan> CachedPreparedPlan(const Mesh& from_mesh, const DistAttr& from,
                                                      const Mesh& to_mesh, const DistAttr& to,
                                                      const Shape& shape, DType dtype) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const PreparedPlan>> cache;
  const std::string& key = PlanKey(from_mesh, from, to_mesh, to, shape, dtype);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  auto plan = std::make_shared<const PreparedPlan>(
      from_mesh == to_mesh ? PlanReshard(from_mesh, shape, dtype, from, to)
                           : PlanReshard(from_mesh, from, to_mesh, to, shape, dtype));
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= 4096) cache.clear();
  cache.emplace(key, plan);
  return plan;
}

std::shared_ptr<const ReshardPlan> CachedPlan(const Mesh& from_mesh, const DistAttr& from,
                                              const Mesh& to_mesh, const DistAttr& to,
                                              const Shape& shape, DType dtype) {
  std::shared_ptr<const PreparedPlan> prepared = CachedPreparedPlan(from_mesh, from, to_mesh, to, shape, dtype);
  const ReshardPlan* plan = &prepared->plan;
  return std::shared_ptr<const ReshardPlan>(std::move(prepared), plan);  // shares its ownership
}

ReshardPlan CachedPlanReshard(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                              const DistAttr& to, const Shape& shape, DType dtype) {
  return *CachedPlan(from_mesh, from, to_mesh, to, shape, dtype);
}

}  // namespace spmd::runtime
