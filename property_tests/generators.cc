#include "property_tests/generators.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <variant>

#include <nlohmann/json.hpp>

#include "rules/model/error.h"
#include "rules/engine/registry.h"

namespace spmd::prop {
namespace {

using nlohmann::json;

// ---- Printing ------------------------------------------------------------------------------

json AttrToJson(const AttrValue& value) {
  return std::visit([](const auto& v) -> json {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, double>) {
      if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
      return v;
    } else if constexpr (std::is_same_v<T, std::vector<double>>) {
      json list = json::array();
      for (double d : v) list.push_back(d);
      return list;
    } else {
      return v;
    }
  }, value);
}

json AttrsToJson(const Attrs& attrs) {
  json map = json::object();
  for (const auto& [name, value] : attrs.values()) map[name] = AttrToJson(value);
  return map;
}

json MeshFields(const Mesh& mesh, json request) {
  request["mesh_shape"] = mesh.shape();
  request["process_ids"] = mesh.process_ids();
  return request;
}

json PartialToJson(const PartialMap& partial) {
  json map = json::object();
  for (const auto& [axis, op] : partial) map[std::to_string(axis)] = std::string(ToString(op));
  return map;
}

json TensorToJson(const TensorArg& arg) {
  json mapping = json::array();
  for (const AxisList& axes : arg.dist.dims) mapping.push_back(axes);
  return json{{"shape", arg.shape}, {"dims_mapping", mapping},
              {"partial", PartialToJson(arg.dist.partial)}};
}

// ---- Small generators ------------------------------------------------------------------------
//
// Every choice below is uniform whatever RapidCheck's size is (a rule request is small
// anyway, and the properties need non-trivial ranks from the first case on) and shrinks
// toward its first alternative: Uniform is inRange at the nominal size.

template <class T>
T Uniform(T lo, T hi) {  // [lo, hi)
  return *rc::gen::resize(rc::kNominalSize, rc::gen::inRange<T>(lo, hi));
}

bool Chance(size_t no, size_t yes) { return Uniform<size_t>(0, no + yes) >= no; }

template <class T>
T PickOf(const std::vector<T>& values) {
  return values[Uniform<size_t>(0, values.size())];
}

// A weighted choice that shrinks toward the first entry of non-zero weight.
template <class T>
T PickWeighted(std::initializer_list<std::pair<size_t, T>> pairs) {
  size_t total = 0;
  for (const auto& [weight, value] : pairs) total += weight;
  size_t r = Uniform<size_t>(0, total);
  for (const auto& [weight, value] : pairs) {
    if (r < weight) return value;
    r -= weight;
  }
  return pairs.begin()->second;  // not reached
}

// Returns `values` in a random order (this RapidCheck has no gen::shuffle); shrinks toward
// the given order.
template <class T>
std::vector<T> Shuffled(std::vector<T> values) {
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    std::swap(values[i], values[Uniform<size_t>(i, values.size())]);
  }
  return values;
}

ReduceOp PickReduceOp() {
  return PickWeighted<ReduceOp>({{4, ReduceOp::kSum},
                                 {1, ReduceOp::kAvg},
                                 {2, ReduceOp::kMax},
                                 {1, ReduceOp::kMin},
                                 {1, ReduceOp::kProd},
                                 {1, ReduceOp::kAny},
                                 {1, ReduceOp::kAll}});
}

const std::vector<double>& FloatSet() {
  static const std::vector<double> values = {0.0, 1.0, -1.0, 0.5, 2.0, 1e-5, -2.5};
  return values;
}

const std::vector<std::string>& StringSet() {
  static const std::vector<std::string> values = {"float32",      "float64",       "int64",
                                                  "bool",         "ij,jk->ik",     "abc,acd->abd",
                                                  "ij->ji",       "xyz"};
  return values;
}

int64_t PickSmallInt() { return Uniform<int64_t>(-4, 7); }

std::vector<int64_t> PickInts(bool allow_permutation = true) {
  const int n = Uniform(0, 5);
  std::vector<int64_t> list;
  if (allow_permutation && Chance(3, 2)) {  // a permutation of 0..n-1 (transpose's perm, axis lists)
    for (int i = 0; i < n; ++i) list.push_back(i);
    return Shuffled(list);
  }
  for (int i = 0; i < n; ++i) list.push_back(PickSmallInt());
  return list;
}

std::vector<double> PickFloats() {
  const int n = Uniform(0, 5);
  std::vector<double> list;
  for (int i = 0; i < n; ++i) list.push_back(PickOf(FloatSet()));
  return list;
}

const std::vector<AttrKind>& AllKinds() {
  static const std::vector<AttrKind> kinds = {AttrKind::kBool,   AttrKind::kInt,
                                              AttrKind::kFloat,  AttrKind::kString,
                                              AttrKind::kInts,   AttrKind::kFloats};
  return kinds;
}

AttrValue PickAttrValue(AttrKind kind) {
  switch (kind) {
    case AttrKind::kBool: return Chance(1, 1);
    case AttrKind::kInt: return PickSmallInt();
    case AttrKind::kFloat: return PickOf(FloatSet());
    case AttrKind::kString: return PickOf(StringSet());
    case AttrKind::kInts: return PickInts();
    case AttrKind::kFloats: return PickFloats();
  }
  return false;
}

AttrValue PickWrongKindValue(AttrKind kind) {
  std::vector<AttrKind> others;
  for (AttrKind k : AllKinds()) {
    if (k != kind) others.push_back(k);
  }
  return PickAttrValue(PickOf(others));
}

// How an attr appears in a request.
enum class AttrUse { kOmitted, kDeclared, kAlias, kWrongKind, kNonFinite, kTwice, kHuge };

// Integers far outside any sensible range. All odd or negative, so that none of them
// divides a (power-of-two) huge dim size: an op that allocates per piece (split_with_num)
// then fails its size check instead of allocating 2^40 outputs.
const std::vector<int64_t>& HugeInts() {
  static const std::vector<int64_t> values = {205891132094649,  // 3^30
                                              -205891132094649,
                                              std::numeric_limits<int64_t>::max(),
                                              std::numeric_limits<int64_t>::min()};
  return values;
}

Attrs DrawAttrs(const OpDecl& op, bool arbitrary) {
  Attrs attrs;
  for (const AttrSpec& spec : op.attrs) {
    const bool has_alias = !spec.aliases.empty();
    const bool is_float = spec.kind == AttrKind::kFloat || spec.kind == AttrKind::kFloats;
    const bool is_int = spec.kind == AttrKind::kInt || spec.kind == AttrKind::kInts;
    const size_t omit = spec.default_value ? 3 : (arbitrary ? 1 : 0);
    const AttrUse use = PickWeighted<AttrUse>({
        {omit, AttrUse::kOmitted},
        {6, AttrUse::kDeclared},
        {has_alias ? 2u : 0u, AttrUse::kAlias},
        {arbitrary ? 2u : 0u, AttrUse::kWrongKind},
        {arbitrary && is_float ? 1u : 0u, AttrUse::kNonFinite},
        {arbitrary && has_alias ? 1u : 0u, AttrUse::kTwice},
        {arbitrary && is_int ? 1u : 0u, AttrUse::kHuge},
    });
    switch (use) {
      case AttrUse::kOmitted:
        break;
      case AttrUse::kDeclared:
        attrs.Set(spec.name, PickAttrValue(spec.kind));
        break;
      case AttrUse::kAlias:
        attrs.Set(PickOf(spec.aliases), PickAttrValue(spec.kind));
        break;
      case AttrUse::kWrongKind:
        attrs.Set(spec.name, PickWrongKindValue(spec.kind));
        break;
      case AttrUse::kNonFinite: {
        const double v = PickOf(std::vector<double>{std::numeric_limits<double>::infinity(),
                                                    -std::numeric_limits<double>::infinity(),
                                                    std::numeric_limits<double>::quiet_NaN()});
        attrs.Set(spec.name, spec.kind == AttrKind::kFloat ? AttrValue(v)
                                                           : AttrValue(std::vector<double>{v}));
        break;
      }
      case AttrUse::kTwice:
        attrs.Set(spec.name, PickAttrValue(spec.kind));
        attrs.Set(PickOf(spec.aliases), PickAttrValue(spec.kind));
        break;
      case AttrUse::kHuge:
        if (spec.kind == AttrKind::kInt) {
          attrs.Set(spec.name, PickOf(HugeInts()));
        } else {
          std::vector<int64_t> list = PickInts(/*allow_permutation=*/false);
          list.insert(list.begin() + Uniform<size_t>(0, list.size() + 1), PickOf(HugeInts()));
          attrs.Set(spec.name, list);
        }
        break;
    }
  }
  if (arbitrary && Chance(5, 1)) {
    // An undeclared name: a typo, or another op's attr (which may be declared here: then
    // it is one more value of some kind).
    static const std::vector<std::string> names = {"not_an_attr", "axis", "keepdim", "perm",
                                                   "shape", "equation", "dtype", "Axis"};
    const std::string name = PickOf(names);
    attrs.Set(name, PickAttrValue(PickOf(AllKinds())));
  }
  return attrs;
}

int64_t PickDimSize() {
  switch (PickWeighted<int>({{16, 0}, {1, 1}, {1, 2}})) {
    case 1: return 0;
    case 2: return 7;
    default: return Uniform<int64_t>(1, 7);
  }
}

Shape PickShape() {
  const int rank = Uniform(0, 5);
  Shape shape;
  for (int d = 0; d < rank; ++d) shape.push_back(PickDimSize());
  return shape;
}

Shape PickRelatedShape(const Shape& base) {
  const int rank = static_cast<int>(base.size());
  enum Kind { kSame, kSuffix, kOnes, kSwap, kDropLast, kLastOne, kPrepend, kAppend,
              kFromLast, kProduct, kUnrelated };
  const Kind kind = PickWeighted<Kind>({{6, kSame},
                                        {3, kSuffix},
                                        {3, kOnes},
                                        {rank >= 2 ? 3u : 0u, kSwap},
                                        {rank >= 1 ? 1u : 0u, kDropLast},
                                        {rank >= 1 ? 2u : 0u, kLastOne},
                                        {1, kPrepend},
                                        {1, kAppend},
                                        {rank >= 1 ? 2u : 0u, kFromLast},
                                        {3, kProduct},
                                        {2, kUnrelated}});
  Shape shape = base;
  switch (kind) {
    case kSame:
      break;
    case kSuffix:
      shape.erase(shape.begin(), shape.begin() + (rank - Uniform(0, rank + 1)));
      break;
    case kOnes:
      for (int64_t& s : shape) {
        if (Chance(2, 1)) s = 1;
      }
      break;
    case kSwap:
      std::swap(shape[rank - 1], shape[rank - 2]);
      break;
    case kDropLast:
      shape.pop_back();
      break;
    case kLastOne:
      shape.back() = 1;
      break;
    case kPrepend:
      shape.insert(shape.begin(), PickDimSize());
      break;
    case kAppend:
      shape.push_back(PickDimSize());
      break;
    case kFromLast:  // [base.back(), n]: the k of matmul's y, an embedding table
      shape = {base.back(), PickDimSize()};
      break;
    case kProduct: {  // [prod(base[begin:])]: normalisation parameters
      int64_t product = 1;
      for (int d = Uniform(0, rank + 1); d < rank; ++d) product *= base[d];
      shape = {product};
      break;
    }
    case kUnrelated:
      shape = PickShape();
      break;
  }
  return shape;
}

// Usually `shapes` as they are; sometimes one dim made negative (dynamic, D5) or huge.
std::vector<Shape> Roughen(std::vector<Shape> shapes) {
  if (shapes.empty() || !Chance(8, 1)) return shapes;
  Shape& shape = shapes[Uniform<size_t>(0, shapes.size())];
  if (shape.empty()) return shapes;
  shape[Uniform<size_t>(0, shape.size())] = PickOf(std::vector<int64_t>{
      -1, -2, int64_t{1} << 31, int64_t{1} << 40, int64_t{1} << 62});
  return shapes;
}

size_t PickInputCount(const OpDecl& op) {
  return op.variadic_inputs ? Uniform<size_t>(1, 4) : op.inputs.size();
}

size_t PickArbitraryInputCount(const OpDecl& op) {
  const size_t declared = PickInputCount(op);
  switch (PickWeighted<int>({{10, 0}, {1, 1}, {1, 2}, {declared > 0 ? 1u : 0u, 3}})) {
    case 1: return 0;
    case 2: return declared + 1;
    case 3: return declared - 1;
    default: return declared;
  }
}

// One of the op's declared examples (the shapes and attrs the soundness checker uses),
// sized from a random palette of 1 to 4 sizes (PickDimSize: 0 to 7); nothing when the
// declaration gives none.
std::optional<Example> PickExample(const OpDecl& op) {
  SizePalette palette;
  const int n = Uniform(1, 5);
  for (int i = 0; i < n; ++i) palette.sizes.push_back(PickDimSize());
  std::vector<Example> examples;
  try {
    examples = op.examples(palette);
  } catch (const SpmdError&) {
    return std::nullopt;
  }
  if (examples.empty()) return std::nullopt;
  return examples[Uniform<size_t>(0, examples.size())];
}

std::vector<TensorArg> DrawInputs(const Mesh& mesh, const std::vector<Shape>& shapes,
                                  DistMode mode) {
  std::vector<TensorArg> inputs;
  for (const Shape& shape : shapes) {
    const int rank = static_cast<int>(shape.size());
    inputs.push_back(TensorArg{shape, mode == DistMode::kReplicated
                                          ? DistAttr::Replicated(rank)
                                          : *GenDistAttr(mesh, rank)});
  }
  // Sometimes every input is partial on the same axes with the same reduce op (what
  // add's and subtract's acceptance needs; independent draws rarely agree).
  if (mode == DistMode::kAny && inputs.size() > 1 && Chance(2, 1)) {
    PartialMap shared;
    for (int axis = 0; axis < mesh.ndim(); ++axis) {
      if (Chance(1, 1)) {
        shared[axis] = PickWeighted<ReduceOp>(
            {{3, ReduceOp::kSum}, {1, ReduceOp::kMax}, {1, ReduceOp::kMin}});
      }
    }
    for (TensorArg& input : inputs) {
      for (const auto& [axis, reduce] : shared) {
        for (AxisList& axes : input.dist.dims) std::erase(axes, axis);
        input.dist.partial[axis] = reduce;
      }
    }
  }
  return inputs;
}

}  // namespace

// ---- Printing ------------------------------------------------------------------------------

std::string ToJsonLine(const ForwardRequest& request) {
  json line{{"op", request.op ? request.op->name : "?"}, {"direction", "forward"}};
  line["attrs"] = AttrsToJson(request.attrs);
  line = MeshFields(request.mesh, line);
  line["inputs"] = json::array();
  for (const TensorArg& arg : request.inputs) line["inputs"].push_back(TensorToJson(arg));
  line["outputs"] = json::array();
  return line.dump();
}

std::string ToJsonLine(const ReverseRequest& request) {
  json line{{"op", request.op ? request.op->name : "?"}, {"direction", "reverse"}};
  line["attrs"] = AttrsToJson(request.attrs);
  line = MeshFields(request.mesh, line);
  line["inputs"] = json::array();
  for (const Shape& shape : request.input_shapes) line["inputs"].push_back(json{{"shape", shape}});
  line["outputs"] = json::array();
  for (const TensorArg& arg : request.outputs) line["outputs"].push_back(TensorToJson(arg));
  return line.dump();
}

std::string ToString(const Attrs& attrs) { return AttrsToJson(attrs).dump(); }

std::string ToString(const InferResult& result) {
  std::string s = "inputs: [";
  for (size_t i = 0; i < result.inputs.size(); ++i) {
    s += (i ? "; " : "") + spmd::ToString(result.inputs[i]);
  }
  s += "] outputs: [";
  for (size_t i = 0; i < result.outputs.size(); ++i) {
    s += (i ? "; " : "") + spmd::ToString(result.outputs[i]);
  }
  return s + "]";
}

void showValue(const ForwardRequest& request, std::ostream& os) { os << ToJsonLine(request); }
void showValue(const ReverseRequest& request, std::ostream& os) { os << ToJsonLine(request); }
void showValue(const std::optional<ForwardRequest>& request, std::ostream& os) {
  if (request) {
    os << ToJsonLine(*request);
  } else {
    os << "(no accepted request)";
  }
}

// ---- Building blocks ----------------------------------------------------------------------

rc::Gen<Mesh> GenMesh() {
  return rc::gen::exec([] {
    const int ndim = Uniform(1, 5);
    std::vector<int64_t> shape;
    int64_t total = 1;
    for (int a = 0; a < ndim; ++a) {
      const int64_t max = std::min<int64_t>(4, 16 / total);
      shape.push_back(Uniform<int64_t>(1, max + 1));
      total *= shape.back();
    }
    std::vector<int64_t> ids;  // empty: 0..n-1 row-major
    const int kind = PickWeighted<int>({{6, 0}, {2, 1}, {2, 2}});
    if (kind == 1) {  // 0..n-1 in another order
      for (int64_t i = 0; i < total; ++i) ids.push_back(i);
      ids = Shuffled(ids);
    } else if (kind == 2) {  // n distinct ids of a larger world
      const int64_t base = Uniform<int64_t>(0, 9);
      const int64_t stride = Uniform<int64_t>(1, 4);
      for (int64_t i = 0; i < total; ++i) ids.push_back(base + stride * i);
      ids = Shuffled(ids);
    }
    return Mesh(shape, ids);
  });
}


rc::Gen<int64_t> GenDimSize() { return rc::gen::exec(PickDimSize); }

rc::Gen<Shape> GenShape() { return rc::gen::exec(PickShape); }

rc::Gen<Shape> GenRelatedShape(const Shape& base) {
  return rc::gen::exec([base] { return PickRelatedShape(base); });
}

rc::Gen<std::vector<Shape>> GenShapes(size_t count) {
  return rc::gen::exec([count] {
    std::vector<Shape> shapes;
    for (size_t i = 0; i < count; ++i) {
      shapes.push_back(i == 0 ? PickShape() : PickRelatedShape(shapes[Uniform<size_t>(0, i)]));
    }
    return shapes;
  });
}

rc::Gen<DistAttr> GenDistAttr(const Mesh& mesh, int rank, bool allow_partial) {
  const int ndim = mesh.ndim();
  return rc::gen::exec([ndim, rank, allow_partial] {
    DistAttr attr = DistAttr::Replicated(rank);
    std::vector<int> axes(ndim);
    for (int a = 0; a < ndim; ++a) axes[a] = a;
    for (int axis : Shuffled(axes)) {
      enum Role { kReplicate, kShard, kPartial };
      const Role role = PickWeighted<Role>({{3, kReplicate},
                                            {rank > 0 ? 4u : 0u, kShard},
                                            {allow_partial ? 2u : 0u, kPartial}});
      if (role == kShard) {
        attr.dims[Uniform(0, rank)].push_back(axis);
      } else if (role == kPartial) {
        attr.partial[axis] = PickReduceOp();
      }
    }
    return attr;
  });
}

rc::Gen<DistAttr> GenArbitraryDistAttr(const Mesh& mesh, int rank) {
  const int ndim = mesh.ndim();
  return rc::gen::exec([mesh, ndim, rank] {
    DistAttr attr = *GenDistAttr(mesh, rank);
    const int breaks = PickWeighted<int>({{8, 0}, {3, 1}, {1, 2}});
    for (int b = 0; b < breaks; ++b) {
      enum Break { kLength, kOutOfRange, kTwiceInDims, kShardedAndPartial, kPartialOutOfRange };
      const Break kind = PickOf(std::vector<Break>{kLength, kOutOfRange, kTwiceInDims,
                                                   kShardedAndPartial, kPartialOutOfRange});
      const std::vector<int> bad_axes = {-1, ndim, -3, ndim + 1, 64};
      const int dims = attr.rank();
      switch (kind) {
        case kLength:
          attr.dims.resize(std::max(0, dims + PickOf(std::vector<int>{1, -1, 2, -2})));
          break;
        case kOutOfRange:
          if (dims > 0) attr.dims[Uniform(0, dims)].push_back(PickOf(bad_axes));
          break;
        case kTwiceInDims:
          if (dims > 0) {
            const int axis = Uniform(0, ndim);
            attr.dims[Uniform(0, dims)].push_back(axis);
            attr.dims[Uniform(0, dims)].push_back(axis);
          }
          break;
        case kShardedAndPartial:
          if (dims > 0) {
            const int axis = Uniform(0, ndim);
            attr.dims[Uniform(0, dims)].push_back(axis);
            attr.partial[axis] = PickReduceOp();
          }
          break;
        case kPartialOutOfRange:
          attr.partial[PickOf(bad_axes)] = PickReduceOp();
          break;
      }
    }
    return attr;
  });
}

rc::Gen<AttrValue> GenAttrValue(AttrKind kind) {
  return rc::gen::exec([kind] { return PickAttrValue(kind); });
}

rc::Gen<AttrValue> GenWrongKindValue(AttrKind kind) {
  return rc::gen::exec([kind] { return PickWrongKindValue(kind); });
}

rc::Gen<Attrs> GenAttrs(const OpDecl& op) {
  const OpDecl* p = &op;
  return rc::gen::exec([p] { return DrawAttrs(*p, false); });
}

rc::Gen<Attrs> GenArbitraryAttrs(const OpDecl& op) {
  const OpDecl* p = &op;
  return rc::gen::exec([p] { return DrawAttrs(*p, true); });
}

rc::Gen<size_t> GenInputCount(const OpDecl& op) {
  const OpDecl* p = &op;
  return rc::gen::exec([p] { return PickInputCount(*p); });
}

rc::Gen<size_t> GenArbitraryInputCount(const OpDecl& op) {
  const OpDecl* p = &op;
  return rc::gen::exec([p] { return PickArbitraryInputCount(*p); });
}

// ---- Requests ------------------------------------------------------------------------------

rc::Gen<ForwardRequest> GenArbitraryForward(const OpDecl& op) {
  const OpDecl* p = &op;
  return rc::gen::exec([p] {
    ForwardRequest request{p, *GenMesh(), {}, {}};
    // Sometimes a declared example (shapes and attrs that fit), with one attr redrawn
    // arbitrarily: the rule then gets past its early checks more often.
    std::optional<Example> example;
    if (p->examples && Chance(2, 1)) example = PickExample(*p);
    std::vector<Shape> shapes =
        example ? example->shapes : *GenShapes(PickArbitraryInputCount(*p));
    for (const Shape& shape : Roughen(std::move(shapes))) {
      request.inputs.push_back(
          TensorArg{shape, *GenArbitraryDistAttr(request.mesh, static_cast<int>(shape.size()))});
    }
    request.attrs = DrawAttrs(*p, true);
    if (example) {
      Attrs attrs = example->attrs;
      if (!request.attrs.values().empty() && Chance(1, 2)) {
        const auto& values = request.attrs.values();
        auto it = std::next(values.begin(), static_cast<long>(Uniform<size_t>(0, values.size())));
        attrs.Set(it->first, it->second);
      }
      request.attrs = attrs;
    }
    return request;
  });
}

rc::Gen<ReverseRequest> GenArbitraryReverse(const OpDecl& op) {
  const OpDecl* p = &op;
  return rc::gen::exec([p] {
    ReverseRequest request{p, *GenMesh(), {}, {}, {}};
    request.input_shapes = Roughen(*GenShapes(PickArbitraryInputCount(*p)));
    request.attrs = DrawAttrs(*p, true);
    // What the declaration says the outputs are, when it says anything for these inputs.
    std::optional<std::vector<int>> ranks;
    std::optional<std::vector<Shape>> shapes;
    NoteRequest("(building the outputs of a reverse request) " + ToJsonLine(request));
    try {
      const Attrs normalized = p->NormalizeAttrs(request.attrs);
      // Only for plain shapes: the builders assume the checks InferReverse makes first
      // (sizes >= 0, at most 2^62 elements).
      bool plain = true;
      for (const Shape& shape : request.input_shapes) {
        for (int64_t s : shape) plain = plain && s >= 0 && s <= 64;
      }
      if (plain && (request.input_shapes.size() == p->inputs.size() ||
                    (p->variadic_inputs && !request.input_shapes.empty()))) {
        auto build = [&] {
          ranks = OutputRanks(*p, request.input_shapes, normalized);
          shapes = OutputShapes(*p, request.input_shapes, normalized);
        };
        // In fork mode a builder that crashes leaves the outputs to chance; the rule's own
        // call crashes the same way and NeverCrashes reports it.
        if (!ForkMode() || CrashInChild(build).empty()) build();
      }
    } catch (...) {  // the properties judge what the rule throws, not the generator
      ranks.reset();
      shapes.reset();
    }
    size_t count = ranks ? ranks->size() : p->outputs.size();
    if (Chance(8, 1)) count = Uniform<size_t>(0, 4);
    std::vector<Shape> output_shapes;
    for (size_t o = 0; o < count; ++o) {
      Shape shape;
      const int how = PickWeighted<int>({{shapes && o < shapes->size() ? 6u : 0u, 0},
                                         {ranks && o < ranks->size() ? 3u : 0u, 1},
                                         {1, 2}});
      if (how == 0) {
        shape = (*shapes)[o];
      } else if (how == 1) {  // the right rank, other sizes
        for (int d = 0; d < (*ranks)[o]; ++d) shape.push_back(PickDimSize());
      } else {
        shape = PickShape();
      }
      output_shapes.push_back(std::move(shape));
    }
    for (const Shape& shape : Roughen(std::move(output_shapes))) {
      request.outputs.push_back(
          TensorArg{shape, *GenArbitraryDistAttr(request.mesh, static_cast<int>(shape.size()))});
    }
    return request;
  });
}

rc::Gen<std::optional<ForwardRequest>> GenAccepted(const OpDecl& op, DistMode mode, int tries) {
  const OpDecl* p = &op;
  return rc::gen::exec([p, mode, tries] {
    // The mesh is drawn once; shapes, attrs and dist attrs are redrawn until the rule
    // accepts them.
    const Mesh mesh = *GenMesh();
    for (int t = 0; t < tries; ++t) {
      ForwardRequest request{p, mesh, {}, {}};
      std::optional<Example> example;
      if (p->examples && Chance(1, 1)) example = PickExample(*p);
      if (example) {
        request.inputs = DrawInputs(mesh, example->shapes, mode);
        request.attrs = example->attrs;
      } else {
        request.inputs = DrawInputs(mesh, *GenShapes(PickInputCount(*p)), mode);
        request.attrs = DrawAttrs(*p, false);
      }
      NoteRequest(ToJsonLine(request));
      // In fork mode a crashing candidate is skipped here: NeverCrashes reports crashes.
      if (ForkMode() && !CrashInChild([&] { InferForward(*p, mesh, request.inputs, request.attrs); }).empty()) {
        continue;
      }
      try {
        InferForward(*p, mesh, request.inputs, request.attrs);
        return std::optional<ForwardRequest>(std::move(request));
      } catch (const SpmdError&) {
      }
    }
    return std::optional<ForwardRequest>();
  });
}

// ---- What the declarations say about outputs --------------------------------------------

std::vector<int> OutputRanks(const OpDecl& op, const std::vector<Shape>& input_shapes,
                             const Attrs& normalized_attrs) {
  std::vector<int> ranks;
  for (const Shape& shape : OutputShapes(op, input_shapes, normalized_attrs)) {
    ranks.push_back(static_cast<int>(shape.size()));
  }
  return ranks;
}

std::vector<Shape> OutputShapes(const OpDecl& op, const std::vector<Shape>& input_shapes,
                                const Attrs& normalized_attrs) {
  return InferOutputShapes(op, input_shapes, normalized_attrs);
}

// ---- Crashes ----------------------------------------------------------------------------------

namespace {

std::string g_request;            // the request about to run
const char* g_request_c = "";     // what the signal handler prints

void PrintRequestOnCrash(int signal) {
  const char prefix[] = "\n*** crashed while running the rule on this request:\n";
  [[maybe_unused]] auto a = write(2, prefix, sizeof prefix - 1);
  [[maybe_unused]] auto b = write(2, g_request_c, std::strlen(g_request_c));
  [[maybe_unused]] auto c = write(2, "\n", 1);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

[[maybe_unused]] const bool g_handler_installed = [] {
  for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
    std::signal(signal, PrintRequestOnCrash);
  }
  return true;
}();

}  // namespace

void NoteRequest(std::string line) {
  g_request_c = "";
  g_request = std::move(line);
  g_request_c = g_request.c_str();
}

bool ForkMode() {
  static const bool on = [] {
    const char* value = std::getenv("SPMD_PROP_FORK");
    return value != nullptr && *value != '\0' && std::string(value) != "0";
  }();
  return on;
}

std::string CrashInChild(const std::function<void()>& call) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(signal, SIG_DFL);
    try {
      call();
    } catch (...) {
    }
    std::_Exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return "";  // no child: run in process
  if (WIFSIGNALED(status)) return "a crash (signal " + std::to_string(WTERMSIG(status)) + ")";
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    return "a crash (exit status " + std::to_string(WEXITSTATUS(status)) + ")";
  }
  return "";
}

const std::vector<const OpDecl*>& OpsUnderTest() {
  static const std::vector<const OpDecl*> ops = [] {
    std::vector<const OpDecl*> selected;
    const char* filter = std::getenv("SPMD_PROP_OPS");
    std::vector<std::string> names;
    if (filter != nullptr && *filter != '\0') {
      std::stringstream list(filter);
      std::string name;
      while (std::getline(list, name, ',')) {
        if (!name.empty()) names.push_back(name);
      }
    }
    // `name` selects an op, `-name` drops one; with no selection every op is selected.
    std::vector<std::string> included, excluded;
    for (const std::string& name : names) {
      (name[0] == '-' ? excluded : included).push_back(name[0] == '-' ? name.substr(1) : name);
    }
    auto has = [](const std::vector<std::string>& list, const std::string& name) {
      return std::find(list.begin(), list.end(), name) != list.end();
    };
    for (const OpDecl& op : AllOps()) {
      if ((included.empty() || has(included, op.name)) && !has(excluded, op.name)) {
        selected.push_back(&op);
      }
    }
    return selected;
  }();
  return ops;
}

}  // namespace spmd::prop
