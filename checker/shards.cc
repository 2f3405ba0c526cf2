#include "checker/shards.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "rules/engine/partial_split.h"

namespace spmd::checker {
namespace {

using reference::Tensor;

std::vector<int64_t> Strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

// Calls fn(multi-index, linear index) for every element of `shape` in row-major order.
template <typename Fn>
void ForEachIndex(const Shape& shape, Fn&& fn) {
  const int64_t n = reference::NumElements(shape);
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    fn(index, k);
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

double Reduce(ReduceOp op, const std::vector<double>& values) {
  double r = values[0];
  for (size_t i = 1; i < values.size(); ++i) {
    const double v = values[i];
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: r += v; break;
      case ReduceOp::kMax: r = std::max(r, v); break;
      case ReduceOp::kMin: r = std::min(r, v); break;
      case ReduceOp::kProd: r *= v; break;
      case ReduceOp::kAny: r = (r != 0 || v != 0) ? 1 : 0; break;
      case ReduceOp::kAll: r = (r != 0 && v != 0) ? 1 : 0; break;
    }
  }
  if (op == ReduceOp::kAvg) r /= static_cast<double>(values.size());
  return r;
}

// Reduces the block of prod n(axis) slot values, the first partial axis most significant.
double ReduceNested(const std::vector<std::pair<ReduceOp, int64_t>>& axes, size_t level, const double* values) {
  if (level == axes.size()) return values[0];
  int64_t block = 1;
  for (size_t l = level + 1; l < axes.size(); ++l) block *= axes[l].second;
  std::vector<double> inner(static_cast<size_t>(axes[level].second));
  for (int64_t c = 0; c < axes[level].second; ++c) inner[c] = ReduceNested(axes, level + 1, values + c * block);
  return Reduce(axes[level].first, inner);
}


}  // namespace

std::vector<std::vector<int64_t>> MeshCoordinates(const Mesh& mesh) {
  std::vector<std::vector<int64_t>> coords;
  ForEachIndex(mesh.shape(), [&](const std::vector<int64_t>& index, int64_t) { coords.push_back(index); });
  return coords;
}

Tensor SliceTensor(const Tensor& t, const std::vector<Range>& ranges) {
  Tensor out;
  out.dtype = t.dtype;
  for (const Range& r : ranges) out.shape.push_back(r.size());
  out.data.resize(static_cast<size_t>(reference::NumElements(out.shape)));
  if (out.data.empty()) return out;
  if (out.shape.empty()) {  // a 0-d tensor: its one value
    out.data[0] = t.data[0];
    return out;
  }
  // Row by row: the last dim's range is contiguous in both tensors.
  const std::vector<int64_t> strides = Strides(t.shape);
  const size_t last = out.shape.size() - 1;
  const int64_t row = out.shape[last];
  Shape rows = out.shape;
  rows[last] = 1;
  ForEachIndex(rows, [&](const std::vector<int64_t>& index, int64_t r) {
    int64_t at = ranges[last].begin;
    for (size_t d = 0; d < last; ++d) at += (ranges[d].begin + index[d]) * strides[d];
    std::copy(t.data.begin() + at, t.data.begin() + at + row, out.data.begin() + r * row);
  });
  return out;
}

ShardedTensor ShardTensor(const Tensor& global, const DistAttr& attr, const Mesh& mesh, std::mt19937_64& rng) {
  ShardedTensor sharded{global.shape, attr, global.dtype, {}};
  SplitOptions options;
  options.boolean = global.dtype == DType::kBool;
  options.integer = !IsFloating(global.dtype) && !options.boolean;
  const std::vector<std::vector<double>> parts = SplitPartial(global.data, attr.partial, mesh, options, rng);
  for (const std::vector<int64_t>& coord : MeshCoordinates(mesh)) {
    const Tensor addend{global.shape, parts[PartialSlot(attr.partial, mesh, coord)], global.dtype};
    sharded.locals.push_back(SliceTensor(addend, BoxAt(global.shape, attr, mesh, coord)));
  }
  return sharded;
}

bool AssembleTensor(const ShardedTensor& t, const Mesh& mesh, double relative, double absolute, Tensor* global,
                    std::string* error) {
  const auto coords = MeshCoordinates(mesh);
  std::vector<int> replicated;
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (t.attr.DimOfAxis(a) < 0 && t.attr.partial.count(a) == 0) replicated.push_back(a);
  }
  std::vector<std::pair<ReduceOp, int64_t>> partial_axes;
  int64_t slots = 1;
  for (const auto& [axis, op] : t.attr.partial) {
    partial_axes.push_back({op, mesh.axis_size(axis)});
    slots *= mesh.axis_size(axis);
  }
  const int64_t numel = reference::NumElements(t.global_shape);
  std::vector<double> values(static_cast<size_t>(numel * slots), 0.0);
  std::vector<int64_t> filled(static_cast<size_t>(numel), 0);
  const std::vector<int64_t> strides = Strides(t.global_shape);
  auto linear = [&](const std::vector<int64_t>& coord) {
    int64_t r = 0;
    for (int a = 0; a < mesh.ndim(); ++a) r = r * mesh.axis_size(a) + coord[a];
    return r;
  };
  for (size_t r = 0; r < coords.size(); ++r) {
    const Tensor& mine = t.locals[r];
    const int64_t pid = mesh.process_ids()[r];
    const Shape want = LocalShape(t.global_shape, t.attr, mesh, coords[r]);
    if (mine.shape != want) {
      *error = "rank " + std::to_string(pid) + " holds local shape " + IndexText(mine.shape) + ", the layout " +
               ToPlacementString(t.attr, mesh.ndim()) + " of " + IndexText(t.global_shape) + " says " +
               IndexText(want);
      return false;
    }
    std::vector<int64_t> base = coords[r];
    bool is_base = true;
    for (int a : replicated) {
      is_base = is_base && base[a] == 0;
      base[a] = 0;
    }
    if (!is_base) {  // a replica must hold what its coordinate-0 peer holds
      const Tensor& peer = t.locals[linear(base)];
      for (size_t k = 0; k < mine.data.size(); ++k) {
        const double a = peer.data[k], b = mine.data[k];
        const bool same = (std::isnan(a) && std::isnan(b)) || a == b ||
                          std::abs(a - b) <= relative * std::max(std::abs(a), std::abs(b)) + absolute;
        if (!same) {
          *error = "replicas disagree: rank " + std::to_string(pid) + " holds " + Number(b) + " at local element " +
                   std::to_string(k) + " where rank " + std::to_string(mesh.process_ids()[linear(base)]) +
                   " holds " + Number(a);
          return false;
        }
      }
      continue;
    }
    const Shape offset = GlobalOffset(t.global_shape, t.attr, mesh, coords[r]);
    const int64_t slot = PartialSlot(t.attr.partial, mesh, coords[r]);
    ForEachIndex(mine.shape, [&](const std::vector<int64_t>& index, int64_t k) {
      int64_t at = 0;
      for (size_t d = 0; d < index.size(); ++d) at += (offset[d] + index[d]) * strides[d];
      values[at * slots + slot] = mine.data[k];
      ++filled[at];
    });
  }
  *global = Tensor{t.global_shape, std::vector<double>(static_cast<size_t>(numel)), t.dtype};
  for (int64_t at = 0; at < numel; ++at) {
    if (filled[at] != slots) {
      *error = "element " + std::to_string(at) + " is held by " + std::to_string(filled[at]) + " ranks, expected " +
               std::to_string(slots);
      return false;
    }
    global->data[at] = ReduceNested(partial_axes, 0, values.data() + at * slots);
  }
  return true;
}

std::string IndexText(const std::vector<int64_t>& index) {
  std::string s = "[";
  for (size_t i = 0; i < index.size(); ++i) s += (i ? "," : "") + std::to_string(index[i]);
  return s + "]";
}

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace spmd::checker
