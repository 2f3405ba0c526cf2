#include "rules/engine/dimtrans.h"

#include <optional>

#include "rules/model/error.h"

namespace spmd {

DimTrans DimTrans::InputDim(int dim) {
  DimTrans t;
  t.kind_ = Kind::kInputDim;
  t.input_dim_ = dim;
  return t;
}

DimTrans DimTrans::Singleton() { return DimTrans(); }

DimTrans DimTrans::Flatten(std::vector<DimTrans> parts) {
  if (parts.empty()) return Singleton();
  if (parts.size() == 1) return std::move(parts[0]);
  DimTrans t;
  t.kind_ = Kind::kFlatten;
  t.parts_ = std::move(parts);
  return t;
}

DimTrans DimTrans::Split(DimTrans whole, std::vector<int64_t> shape, int piece) {
  if (shape.size() == 1) return whole;
  if (shape[piece] == 1) return Singleton();
  DimTrans t;
  t.kind_ = Kind::kSplit;
  t.parts_.push_back(std::move(whole));
  t.split_shape_ = std::move(shape);
  t.piece_ = piece;
  return t;
}

std::string DimTrans::ToString() const {
  switch (kind_) {
    case Kind::kInputDim: return "InputDim(" + std::to_string(input_dim_) + ")";
    case Kind::kSingleton: return "Singleton";
    case Kind::kFlatten: {
      std::string s = "Flatten(";
      for (size_t i = 0; i < parts_.size(); ++i) s += (i ? ", " : "") + parts_[i].ToString();
      return s + ")";
    }
    case Kind::kSplit: {
      std::string s = "Split(" + parts_[0].ToString() + ", [";
      for (size_t i = 0; i < split_shape_.size(); ++i) {
        s += (i ? ", " : "") + std::to_string(split_shape_[i]);
      }
      return s + "], " + std::to_string(piece_) + ")";
    }
  }
  return "Singleton";
}

std::vector<DimTrans> ReshapeTransforms(const std::vector<int64_t>& src,
                                        const std::vector<int64_t>& tgt) {
  std::vector<DimTrans> out(tgt.size(), DimTrans::Singleton());
  size_t i = 0, j = 0;
  while (i < src.size() || j < tgt.size()) {
    const bool src_one = i < src.size() && src[i] == 1;
    const bool tgt_one = j < tgt.size() && tgt[j] == 1;
    if (src_one && tgt_one) {  // a size-1 dim matched one-to-one keeps its sharding
      out[j++] = DimTrans::InputDim(static_cast<int>(i++));
      continue;
    }
    if (tgt_one || i >= src.size()) {
      ++j;  // Singleton
      continue;
    }
    if (src_one || j >= tgt.size()) {
      ++i;  // dropped
      continue;
    }
    // Grow the smaller running product until the two match.
    std::vector<DimTrans> group;
    std::vector<size_t> tgt_dims;
    std::vector<int64_t> tgt_sizes;
    int64_t src_product = src[i], tgt_product = tgt[j];
    group.push_back(DimTrans::InputDim(static_cast<int>(i++)));
    tgt_dims.push_back(j);
    tgt_sizes.push_back(tgt[j++]);
    while (src_product != tgt_product) {
      if (src_product < tgt_product) {
        if (src[i] != 1) group.push_back(DimTrans::InputDim(static_cast<int>(i)));
        src_product *= src[i++];
      } else {
        tgt_dims.push_back(j);
        tgt_sizes.push_back(tgt[j]);
        tgt_product *= tgt[j++];
      }
    }
    DimTrans whole = DimTrans::Flatten(std::move(group));
    for (size_t k = 0; k < tgt_dims.size(); ++k) {
      out[tgt_dims[k]] = DimTrans::Split(whole, tgt_sizes, static_cast<int>(k));
    }
  }
  return out;
}

namespace {

// What one output dim inherits: an input dim and the mesh axes that may move with it,
// plus the sizes those axes' product must divide (longest prefix that divides wins).
struct Inherited {
  int dim = -1;
  AxisList axes;
  std::vector<int64_t> must_divide;
};

std::optional<Inherited> Inherit(const DimTrans& t, const std::vector<int64_t>& shape,
                                 const DistAttr& in) {
  switch (t.kind()) {
    case DimTrans::Kind::kSingleton:
      return std::nullopt;
    case DimTrans::Kind::kInputDim:
      return Inherited{t.input_dim(), in.dims[t.input_dim()], {}};
    case DimTrans::Kind::kFlatten: {
      // Only the leading dim may hold a sharding; the others' axes move onto it (§5).
      const DimTrans& lead = t.parts()[0];
      if (lead.kind() != DimTrans::Kind::kInputDim) return std::nullopt;
      Inherited result{lead.input_dim(), in.dims[lead.input_dim()],
                       {shape[lead.input_dim()]}};
      bool all_one = shape[lead.input_dim()] == 1;
      for (size_t p = 1; p < t.parts().size(); ++p) {
        const DimTrans& part = t.parts()[p];
        if (part.kind() != DimTrans::Kind::kInputDim) continue;
        all_one = all_one && shape[part.input_dim()] == 1;
        const AxisList& more = in.dims[part.input_dim()];
        result.axes.insert(result.axes.end(), more.begin(), more.end());
      }
      // Size-1 dims merged into a size-1 dim: its one element sits on the first shard of
      // any sharding, before and after, so the axes carry over whatever their sizes.
      if (all_one) result.must_divide.clear();
      return result;
    }
    case DimTrans::Kind::kSplit: {
      if (t.piece() != 0) return std::nullopt;  // only piece 0 inherits
      auto inner = Inherit(t.parts()[0], shape, in);
      if (inner) inner->must_divide.push_back(t.split_shape()[0]);
      return inner;
    }
  }
  return std::nullopt;
}

// The longest prefix of `axes` whose product of sizes divides every `must_divide`.
AxisList DividingPrefix(const Inherited& h, const Mesh& mesh) {
  AxisList prefix;
  int64_t product = 1;
  for (int axis : h.axes) {
    product *= mesh.axis_size(axis);
    for (int64_t s : h.must_divide) {
      if (s % product != 0) return prefix;
    }
    prefix.push_back(axis);
  }
  return prefix;
}

InferResult Forward(const std::vector<DimTrans>& transforms, const std::vector<int64_t>& shape,
                    const Mesh& mesh, const DistAttr& input) {
  InferResult result;
  DistAttr required = DistAttr::Replicated(static_cast<int>(shape.size()));
  required.partial = input.partial;
  DistAttr out = DistAttr::Replicated(static_cast<int>(transforms.size()));
  out.partial = input.partial;
  for (size_t d = 0; d < transforms.size(); ++d) {
    auto inherited = Inherit(transforms[d], shape, input);
    if (!inherited) continue;
    AxisList axes = DividingPrefix(*inherited, mesh);
    if (axes.empty()) continue;
    required.dims[inherited->dim] = axes;
    out.dims[d] = std::move(axes);
  }
  result.inputs.push_back(std::move(required));
  result.outputs.push_back(std::move(out));
  return result;
}

}  // namespace

InferResult InferDimTransForward(const DimTransSpec& spec, const Mesh& mesh,
                                 const DistAttr& input) {
  return Forward(spec.outputs, spec.input_shape, mesh, input);
}

InferResult InferDimTransReverse(const DimTransSpec& spec, const Mesh& mesh,
                                 const DistAttr& output) {
  DistAttr out = output;
  out.partial.clear();
  std::vector<DimTrans> back;
  bool empty = false;
  for (int64_t s : spec.output_shape) empty = empty || s == 0;
  if (empty) {
    back.assign(spec.input_shape.size(), DimTrans::Singleton());
  } else {
    back = ReshapeTransforms(spec.output_shape, spec.input_shape);
  }
  DistAttr input = Forward(back, spec.output_shape, mesh, out).outputs[0];
  return Forward(spec.outputs, spec.input_shape, mesh, input);
}

}  // namespace spmd
