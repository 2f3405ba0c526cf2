#include "rules/model/dist_attr.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>

#include "rules/model/error.h"

namespace spmd {
namespace {

constexpr std::array<std::pair<ReduceOp, std::string_view>, 7> kReduceOpNames = {{
    {ReduceOp::kSum, "sum"},
    {ReduceOp::kAvg, "avg"},
    {ReduceOp::kMax, "max"},
    {ReduceOp::kMin, "min"},
    {ReduceOp::kProd, "prod"},
    {ReduceOp::kAny, "any"},
    {ReduceOp::kAll, "all"},
}};

std::string JoinAxes(const AxisList& axes) {
  std::string out;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(axes[i]);
  }
  return out;
}

// Prefixes `name` with `field.` unless `field` is empty (the conversions take no field).
std::string Sub(const std::string& field, const std::string& name) {
  return field.empty() ? name : field + "." + name;
}

// Returns, per mesh axis, its placement; throws when an axis is out of range or used
// twice, since the conversion would then lose information.
std::vector<Placement> PlacementsOf(const DistAttr& attr, int mesh_ndim,
                                    const std::string& field) {
  std::vector<Placement> placements(std::max(mesh_ndim, 0));
  std::vector<bool> used(placements.size(), false);
  auto claim = [&](int axis, const std::string& where) {
    if (axis < 0 || axis >= mesh_ndim) {
      ThrowInvalid(where, "mesh axis " + std::to_string(axis) + " is not in [0, " +
                              std::to_string(mesh_ndim) + ") in " + ToString(attr));
    }
    if (used[axis]) {
      ThrowInvalid(where, "mesh axis " + std::to_string(axis) + " is used twice in " +
                              ToString(attr));
    }
    used[axis] = true;
  };
  for (size_t d = 0; d < attr.dims.size(); ++d) {
    const AxisList& axes = attr.dims[d];
    for (size_t k = 0; k < axes.size(); ++k) {
      claim(axes[k], Sub(field, "dims_mapping[" + std::to_string(d) + "]"));
      placements[axes[k]] = Placement{Placement::Kind::kShard, static_cast<int>(d),
                                      static_cast<int>(k), ReduceOp::kSum};
    }
  }
  for (const auto& [axis, op] : attr.partial) {
    claim(axis, Sub(field, "partial"));
    placements[axis] = Placement{Placement::Kind::kPartial, -1, 0, op};
  }
  return placements;
}

DistAttr AttrOfPlacements(const std::vector<Placement>& placements, int rank,
                          const std::string& field) {
  if (rank < 0) ThrowInvalid(field, "tensor rank " + std::to_string(rank) + " is negative");
  // by_dim[d][k] = the mesh axis at co-shard position k of dim d, or -1 while unclaimed.
  std::vector<std::vector<int>> by_dim(rank);
  DistAttr attr = DistAttr::Replicated(rank);
  for (size_t axis = 0; axis < placements.size(); ++axis) {
    const Placement& p = placements[axis];
    if (p.kind == Placement::Kind::kPartial) {
      attr.partial[static_cast<int>(axis)] = p.reduce;
      continue;
    }
    if (p.kind != Placement::Kind::kShard) continue;
    if (p.dim < 0 || p.dim >= rank) {
      ThrowInvalid(field + "[" + std::to_string(axis) + "]",
                   "S(" + std::to_string(p.dim) + ") is not a dim of a rank-" +
                       std::to_string(rank) + " tensor");
    }
    // A position beyond the number of mesh axes can never be part of 0..k-1.
    if (p.order < 0 || p.order >= static_cast<int>(placements.size())) {
      ThrowInvalid(field, "mesh axis " + std::to_string(axis) + " claims co-shard position #" +
                              std::to_string(p.order) + " of dim " + std::to_string(p.dim) +
                              "; positions are 0..k-1");
    }
    std::vector<int>& slots = by_dim[p.dim];
    if (static_cast<int>(slots.size()) <= p.order) slots.resize(p.order + 1, -1);
    if (slots[p.order] != -1) {
      ThrowInvalid(field, "mesh axes " + std::to_string(slots[p.order]) + " and " +
                              std::to_string(axis) + " both claim position #" +
                              std::to_string(p.order) + " of dim " + std::to_string(p.dim));
    }
    slots[p.order] = static_cast<int>(axis);
  }
  for (int d = 0; d < rank; ++d) {
    for (size_t k = 0; k < by_dim[d].size(); ++k) {
      if (by_dim[d][k] == -1) {
        ThrowInvalid(field, "dim " + std::to_string(d) + " has no mesh axis at co-shard " +
                                "position #" + std::to_string(k) + "; positions are 0..k-1");
      }
    }
    attr.dims[d].assign(by_dim[d].begin(), by_dim[d].end());
  }
  return attr;
}

std::string PlacementText(const Placement& p, const DistAttr& attr) {
  switch (p.kind) {
    case Placement::Kind::kReplicate: return "R";
    case Placement::Kind::kPartial: return "P(" + std::string(ToString(p.reduce)) + ")";
    case Placement::Kind::kShard: break;
  }
  std::string out = "S(" + std::to_string(p.dim) + ")";
  // The position only matters (and is only printed) when the dim is co-sharded.
  if (attr.dims[p.dim].size() > 1) out += "#" + std::to_string(p.order);
  return out;
}

// A one-pass reader of the placement text; every failure names the field and the column.
class PlacementReader {
 public:
  PlacementReader(std::string_view text, const std::string& field)
      : text_(text), field_(field) {}

  // Returns the placements and, per entry, whether it carried an explicit `#k`.
  std::vector<std::pair<Placement, bool>> ReadList() {
    std::vector<std::pair<Placement, bool>> entries;
    Expect('[');
    if (!Accept(']')) {
      do {
        entries.push_back(ReadEntry());
      } while (Accept(','));
      Expect(']');
    }
    SkipSpace();
    if (pos_ != text_.size()) Fail("unexpected text after ']'");
    return entries;
  }

 private:
  std::pair<Placement, bool> ReadEntry() {
    SkipSpace();
    if (Accept('R')) return {Placement{}, false};
    if (Accept('P')) return {ReadPartial(), false};
    if (!Accept('S')) Fail("expected R, S(d) or P(op)");
    Placement p{Placement::Kind::kShard, 0, 0, ReduceOp::kSum};
    Expect('(');
    p.dim = ReadInt();
    Expect(')');
    const bool has_order = Accept('#');
    if (has_order) p.order = ReadInt();
    return {p, has_order};
  }

  Placement ReadPartial() {
    Placement p{Placement::Kind::kPartial, -1, 0, ReduceOp::kSum};
    if (!Accept('(')) return p;  // bare `P` is P(sum)
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isalpha(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    const std::string_view name = text_.substr(start, pos_ - start);
    const std::optional<ReduceOp> op = ParseReduceOp(name);
    if (!op) Fail("unknown reduce op '" + std::string(name) + "'");
    p.reduce = *op;
    Expect(')');
    return p;
  }

  int ReadInt() {
    SkipSpace();
    const size_t start = pos_;
    int value = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      if (pos_ - start >= 6) Fail("number too large");  // no tensor has a million dims
      value = value * 10 + (text_[pos_++] - '0');
    }
    if (pos_ == start) Fail("expected a non-negative integer");
    return value;
  }

  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool Accept(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void Expect(char c) {
    if (!Accept(c)) Fail(std::string("expected '") + c + "'");
  }
  [[noreturn]] void Fail(const std::string& what) const {
    ThrowInvalid(field_, "bad placement text '" + std::string(text_) + "': " + what +
                             " at column " + std::to_string(pos_));
  }

  std::string_view text_;
  const std::string& field_;
  size_t pos_ = 0;
};

}  // namespace

std::string_view ToString(ReduceOp op) {
  for (const auto& [value, name] : kReduceOpNames) {
    if (value == op) return name;
  }
  return "sum";
}

std::optional<ReduceOp> ParseReduceOp(std::string_view name) {
  for (const auto& [value, known] : kReduceOpNames) {
    if (known == name) return value;
  }
  return std::nullopt;
}

bool DistAttr::IsReplicated() const {
  return partial.empty() &&
         std::all_of(dims.begin(), dims.end(), [](const AxisList& a) { return a.empty(); });
}

int DistAttr::DimOfAxis(int axis) const {
  for (size_t d = 0; d < dims.size(); ++d) {
    if (std::find(dims[d].begin(), dims[d].end(), axis) != dims[d].end()) {
      return static_cast<int>(d);
    }
  }
  return -1;
}

namespace {

// One number of a key: a byte below 255, or 255 and then the number in four bytes.
void PutKeyNumber(std::string& key, int64_t value) {
  if (value >= 0 && value < 255) {
    key.push_back(static_cast<char>(value));
    return;
  }
  key.push_back(static_cast<char>(255));
  const auto wide = static_cast<int32_t>(value);
  key.append(reinterpret_cast<const char*>(&wide), sizeof wide);
}

}  // namespace

void AppendKey(std::string& key, const std::vector<DistAttr>& attrs) {
  PutKeyNumber(key, static_cast<int64_t>(attrs.size()));
  for (const DistAttr& attr : attrs) AppendKey(key, attr);
}

void AppendKey(std::string& key, const DistAttr& attr) {
  auto put = [&](int64_t value) { PutKeyNumber(key, value); };
  put(static_cast<int64_t>(attr.dims.size()));
  for (const AxisList& axes : attr.dims) {
    put(static_cast<int64_t>(axes.size()));
    for (int axis : axes) put(axis);
  }
  put(static_cast<int64_t>(attr.partial.size()));
  for (const auto& [axis, op] : attr.partial) {
    put(axis);
    put(static_cast<int64_t>(op));
  }
}

bool IsValid(const DistAttr& attr, int mesh_ndim, int rank) {
  if (attr.rank() != rank || mesh_ndim < 0 || mesh_ndim > 64) return false;
  // The same range and uniqueness checks as PlacementsOf, on a bit mask, building nothing.
  uint64_t used = 0;
  auto claim = [&](int axis) {
    if (axis < 0 || axis >= mesh_ndim || (used >> axis & 1) != 0) return false;
    used |= uint64_t{1} << axis;
    return true;
  };
  for (const AxisList& axes : attr.dims) {
    for (int axis : axes) {
      if (!claim(axis)) return false;
    }
  }
  for (const auto& [axis, op] : attr.partial) {
    if (!claim(axis)) return false;
  }
  return true;
}

void Validate(const DistAttr& attr, const Mesh& mesh, int rank, const std::string& field) {
  if (IsValid(attr, mesh.ndim(), rank)) return;
  if (attr.rank() != rank) {
    ThrowInvalid(Sub(field, "dims_mapping"),
                 "has " + std::to_string(attr.rank()) + " entries, the tensor has rank " +
                     std::to_string(rank));
  }
  // Range and uniqueness are exactly what the placement form needs to exist.
  PlacementsOf(attr, mesh.ndim(), field);
}

std::vector<Placement> ToPlacements(const DistAttr& attr, int mesh_ndim) {
  return PlacementsOf(attr, mesh_ndim, "");
}

DistAttr FromPlacements(const std::vector<Placement>& placements, int rank) {
  return AttrOfPlacements(placements, rank, "placements");
}

std::vector<int64_t> ToFlatDimsMapping(const DistAttr& attr) {
  std::vector<int64_t> flat;
  flat.reserve(attr.dims.size());
  for (size_t d = 0; d < attr.dims.size(); ++d) {
    const AxisList& axes = attr.dims[d];
    if (axes.size() > 1) {
      ThrowInvalid("dims_mapping[" + std::to_string(d) + "]",
                   "dim is co-sharded on [" + JoinAxes(axes) +
                       "]; the flat form has one axis per dim (use the list form)");
    }
    flat.push_back(axes.empty() ? -1 : axes[0]);
  }
  return flat;
}

DistAttr FromFlatDimsMapping(const std::vector<int64_t>& dims_mapping,
                             const PartialMap& partial) {
  DistAttr attr{std::vector<AxisList>(dims_mapping.size()), partial};
  for (size_t d = 0; d < dims_mapping.size(); ++d) {
    const int64_t axis = dims_mapping[d];
    // The bound only keeps the int cast exact; Validate checks the mesh's real range.
    if (axis < -1 || axis >= kMaxMeshAxes) {
      ThrowInvalid("dims_mapping[" + std::to_string(d) + "]",
                   std::to_string(axis) + " is neither -1 nor a mesh axis");
    }
    if (axis >= 0) attr.dims[d] = {static_cast<int>(axis)};
  }
  return attr;
}

std::vector<int64_t> PartialDims(const DistAttr& attr) {
  std::vector<int64_t> axes;
  for (const auto& [axis, op] : attr.partial) axes.push_back(axis);
  return axes;
}

std::string ToPlacementString(const DistAttr& attr, int mesh_ndim) {
  std::string out = "[";
  const std::vector<Placement> placements = ToPlacements(attr, mesh_ndim);
  for (size_t i = 0; i < placements.size(); ++i) {
    if (i > 0) out += ", ";
    out += PlacementText(placements[i], attr);
  }
  return out + "]";
}

std::string ToString(const DistAttr& attr) {
  std::string out = "dims=[";
  for (size_t d = 0; d < attr.dims.size(); ++d) {
    if (d > 0) out += ",";
    out += "[" + JoinAxes(attr.dims[d]) + "]";
  }
  out += "] partial={";
  bool first = true;
  for (const auto& [axis, op] : attr.partial) {
    if (!first) out += ",";
    first = false;
    out += std::to_string(axis) + ":" + std::string(ToString(op));
  }
  return out + "}";
}

DistAttr ParsePlacementString(std::string_view text, int rank, const std::string& field) {
  const std::vector<std::pair<Placement, bool>> entries =
      PlacementReader(text, field).ReadList();
  std::vector<Placement> placements;
  std::vector<int> axes_per_dim(std::max(rank, 0), 0);
  for (const auto& [p, has_order] : entries) {
    placements.push_back(p);
    if (p.kind == Placement::Kind::kShard && p.dim >= 0 && p.dim < rank) ++axes_per_dim[p.dim];
  }
  // `S(0)` twice without positions has no defined order; refuse rather than guess one.
  for (const auto& [p, has_order] : entries) {
    if (p.kind == Placement::Kind::kShard && !has_order && p.dim < rank &&
        axes_per_dim[p.dim] > 1) {
      ThrowInvalid(field, "bad placement text '" + std::string(text) + "': dim " +
                              std::to_string(p.dim) +
                              " is co-sharded, so each S(d) needs its position #k");
    }
  }
  return AttrOfPlacements(placements, rank, field);
}

}  // namespace spmd
