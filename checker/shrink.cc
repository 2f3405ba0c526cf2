#include "checker/shrink.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>

#include "rules/model/error.h"
#include "rules/model/layout.h"

namespace spmd::checker {
namespace {

// Int attrs that name dims (axes, permutations); any other int attr may be a position or
// a size within a dim (starts, sections, diagonal, target shapes, ignore_index), which a
// shrink would move relative to the data.
bool IsAxisAttr(const std::string& name) {
  return name == "axis" || name == "axes" || name == "perm" || name == "begin_norm_axis" ||
         name == "start_axis" || name == "stop_axis" || name == "decrease_axis";
}

// The layouts one factor has: every dim (input or output) it labels, by its axis list.
struct FactorUse {
  std::vector<AxisList> lists;
  bool in_input = false;
  bool in_output = false;
};

int64_t AxisProduct(const AxisList& axes, const Mesh& mesh) {
  int64_t p = 1;
  for (int a : axes) p *= mesh.axis_size(a);
  return p;
}

// The structure of a size's layouts: for each axis list and each rank, the positions of its
// chunk's begin and end among the sorted distinct boundaries, then each piece between
// consecutive boundaries as 1, 2 or 3 (more) elements: three, not two, so that an
// exclusive scan (cumsum's exclusive) keeps an element reading two others in a piece.
std::vector<int64_t> Structure(int64_t size, const std::vector<AxisList>& lists, const Mesh& mesh,
                               const std::vector<std::vector<int64_t>>& coords) {
  std::vector<Range> ranges;
  std::vector<int64_t> bounds{0, size};
  for (const AxisList& axes : lists) {
    for (const auto& coord : coords) {
      const Range r = DimRangeAt(size, axes, mesh, coord);
      ranges.push_back(r);
      bounds.push_back(r.begin);
      bounds.push_back(r.end);
    }
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  auto at = [&](int64_t b) { return std::lower_bound(bounds.begin(), bounds.end(), b) - bounds.begin(); };
  std::vector<int64_t> out;
  for (const Range& r : ranges) {
    out.push_back(at(r.begin));
    out.push_back(at(r.end));
  }
  out.push_back(-1);
  for (size_t k = 0; k + 1 < bounds.size(); ++k) out.push_back(std::min<int64_t>(bounds[k + 1] - bounds[k], 3));
  return out;
}

// The smallest size with the structure of `size` (and its residue modulo every list's
// axis product), or `size` itself.
int64_t SmallestLike(int64_t size, const std::vector<AxisList>& lists, const Mesh& mesh,
                     const std::vector<std::vector<int64_t>>& coords) {
  if (size <= 3) return size;
  int64_t lcm = 1;
  for (const AxisList& axes : lists) lcm = std::lcm(lcm, AxisProduct(axes, mesh));
  const std::vector<int64_t> want = Structure(size, lists, mesh, coords);
  // The structure is fixed once the quotient passes a bound of a few times the lcm (the
  // boundaries are affine in it); 4096 candidates reach it for any mesh the check can run.
  const int64_t residue = size % lcm;
  for (int64_t k = 0; k < 4096; ++k) {
    const int64_t candidate = residue + k * lcm;
    if (candidate >= size) break;
    if (candidate < 1) continue;
    if (Structure(candidate, lists, mesh, coords) == want) return candidate;
  }
  return size;
}

// Whether two notations of one op force the same factors replicated (in any order).
bool SameForced(const EinsumSpec& a, const EinsumSpec& b) {
  std::vector<FactorId> x = a.forced_replicated, y = b.forced_replicated;
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  x.erase(std::unique(x.begin(), x.end()), x.end());
  y.erase(std::unique(y.begin(), y.end()), y.end());
  return x == y;
}

}  // namespace

int64_t SimulatedElements(const Case& c, const std::vector<Shape>& shapes) {
  const int64_t ranks = std::max<int64_t>(c.mesh.size(), 1);
  const int64_t cap = kMaxSimulatedElements + 1;
  std::vector<Shape> all = shapes;
  try {
    for (Shape& s : InferOutputShapes(*c.op, shapes, c.op->NormalizeAttrs(c.attrs))) all.push_back(std::move(s));
  } catch (const SpmdError&) {
  }
  int64_t total = 0;
  for (const Shape& shape : all) {
    int64_t numel = ranks;
    for (int64_t s : shape) numel = s > 0 && numel > cap / s ? cap : numel * std::max<int64_t>(s, 0);
    total = std::min(cap, total + std::min(numel, cap));
  }
  return total;
}

Shrunk ShrinkCase(const Case& c, const std::vector<DistAttr>& required, const std::vector<DistAttr>& claimed) {
  Shrunk result{c.shapes, false, ""};
  const OpDecl& op = *c.op;
  if (op.dimtrans || !op.einsum) {
    result.why_not = op.name + " maps dims by its shapes (not an einsum rule)";
    return result;
  }
  // argmax's output is a position in the reduced dims, in [0, their size): shrinking them
  // makes a 0 likely, and a 0 hides a doubled share (0 + 0 = 0), so the generated values
  // would no longer make every wrong claim visible in the shrunk case.
  if (op.name == "argmax") {
    result.why_not = "argmax's output is a position whose range is the reduced size";
    return result;
  }
  for (const AttrSpec& a : op.attrs) {
    if ((a.kind == AttrKind::kInt || a.kind == AttrKind::kInts) && !IsAxisAttr(a.name)) {
      result.why_not = op.name + "'s attr " + a.name + " may be a position or size within a dim";
      return result;
    }
  }
  const Attrs attrs = op.NormalizeAttrs(c.attrs);
  const std::optional<EinsumSpec> spec = BuildEinsumSpec(op, c.shapes, attrs);
  const std::vector<Shape> out_shapes = InferOutputShapes(op, c.shapes, attrs);
  if (!spec || spec->inputs.size() != c.shapes.size() || spec->outputs.size() != out_shapes.size() ||
      required.size() != c.shapes.size() || claimed.size() != out_shapes.size()) {
    result.why_not = "the rule's notation does not match the case";
    return result;
  }
  std::map<FactorId, FactorUse> uses;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    if (spec->inputs[i].size() != c.shapes[i].size() || required[i].dims.size() != c.shapes[i].size()) {
      result.why_not = "the rule's notation does not match the case";
      return result;
    }
    for (size_t d = 0; d < c.shapes[i].size(); ++d) {
      if (spec->inputs[i][d] == kBroadcastDim) continue;
      FactorUse& use = uses[spec->inputs[i][d]];
      use.lists.push_back(required[i].dims[d]);
      use.in_input = true;
    }
  }
  for (size_t o = 0; o < out_shapes.size(); ++o) {
    if (spec->outputs[o].size() != out_shapes[o].size() || claimed[o].dims.size() != out_shapes[o].size()) {
      result.why_not = "the rule's notation does not match the case";
      return result;
    }
    for (size_t d = 0; d < out_shapes[o].size(); ++d) {
      if (spec->outputs[o][d] == kBroadcastDim) continue;
      FactorUse& use = uses[spec->outputs[o][d]];
      use.lists.push_back(claimed[o].dims[d]);
      use.in_output = true;
    }
  }
  std::vector<std::vector<int64_t>> coords;
  {
    std::vector<int64_t> coord(c.mesh.ndim(), 0);
    for (int64_t r = 0; r < c.mesh.size(); ++r) {
      coords.push_back(coord);
      for (int a = c.mesh.ndim() - 1; a >= 0; --a) {
        if (++coord[a] < c.mesh.axis_size(a)) break;
        coord[a] = 0;
      }
    }
  }
  std::map<FactorId, int64_t> smallest;
  for (const auto& [f, use] : uses) {
    if (use.in_input) smallest[f] = SmallestLike(spec->factor_sizes[f], use.lists, c.mesh, coords);
  }
  // First every input factor; then, if the declaration disagrees (a factor whose size the
  // attrs constrain, such as a concatenated dim), only those passed through to an output.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::map<FactorId, int64_t> size_of;
    bool any = false;
    for (const auto& [f, s] : smallest) {
      if (attempt == 1 && !uses[f].in_output) continue;
      if (s < spec->factor_sizes[f]) {
        size_of[f] = s;
        any = true;
      }
    }
    if (!any) continue;
    std::vector<Shape> shapes = c.shapes;
    for (size_t i = 0; i < shapes.size(); ++i) {
      for (size_t d = 0; d < shapes[i].size(); ++d) {
        const auto it = size_of.find(spec->inputs[i][d]);
        if (it != size_of.end()) shapes[i][d] = it->second;
      }
    }
    std::vector<Shape> expected = out_shapes;
    for (size_t o = 0; o < expected.size(); ++o) {
      for (size_t d = 0; d < expected[o].size(); ++d) {
        const auto it = size_of.find(spec->outputs[o][d]);
        if (it != size_of.end()) expected[o][d] = it->second;
      }
    }
    try {
      if (InferOutputShapes(op, shapes, attrs) != expected) continue;
      // The rule must read the shrunk case as the full one: the same factors forced whole
      // (logsumexp exchanges its largest reduced dim, so a shrink that changes which dim is
      // largest changes what a rank computes, and with it the verdict).
      const std::optional<EinsumSpec> again = BuildEinsumSpec(op, shapes, attrs);
      if (!again || !SameForced(*again, *spec)) continue;
    } catch (const SpmdError&) {
      continue;
    }
    result.shapes = std::move(shapes);
    result.shrunk = true;
    return result;
  }
  result.why_not = "no size can shrink with the same layout";
  return result;
}

}  // namespace spmd::checker
