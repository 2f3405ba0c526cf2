// spmdkit._core: the nanobind bindings behind `import spmdkit` (python/spmdkit/__init__.py
// documents the Python API). infer calls InferForward / InferReverse directly; check_claim,
// plan and explain build the request as the CLI reads it and reuse io/'s validation.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "checker/shrink.h"
#include "checker/simulate.h"
#include "cli/explain.h"
#include "io/case_json.h"
#include "io/infer_io.h"
#include "io/plan_json.h"
#include "python/src/convert.h"
#include "python/src/errors.h"
#include "rules/model/error.h"
#include "rules/engine/registry.h"
#include "rules/reshard/reshard.h"
#include "rules/reshard/reshard_print.h"

namespace spmd::python {
namespace {

namespace nb = nanobind;
using nlohmann::json;

// A claim on a case larger than this many simulated elements is checked on shrunk sizes with
// the same layout, as `spmd check --claim` does.
constexpr int64_t kShrinkAbove = int64_t{1} << 16;

// FindOp looks the name up in a hash map built once.
const OpDecl& ToOp(std::string_view name) {
  const OpDecl* op = FindOp(name);
  if (op == nullptr) throw SpmdError(ErrorType::kUnknownOp, "op", "unknown op '" + std::string(name) + "'");
  return *op;
}

// The op's declared examples (OpDecl::examples) on the palette `sizes`, the shapes and attrs
// the checker generates its cases from: [{"shapes", "attrs", "int_inputs"}]. attrs are
// normalised (every declared attr, defaults filled); int_inputs are the inputs holding ids,
// labels or conditions (value kinds index and bool), which a case never makes partial. An
// example the declaration itself refuses on these sizes (its attrs or value kinds) is left
// out.
nb::list Examples(std::string_view op_name, const std::vector<int64_t>& sizes) {
  const OpDecl& op = ToOp(op_name);
  if (sizes.empty()) ThrowInvalid("sizes", "expected at least one size");
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) ThrowInvalid("sizes[" + std::to_string(i) + "]", "must be >= 0");
  }
  nb::list out;
  for (const Example& example : op.examples(SizePalette{sizes})) {
    Attrs attrs;
    std::vector<InputValues> kinds;
    try {
      attrs = op.NormalizeAttrs(example.attrs);
      kinds = op.InputValueKinds(RuleContext{example.shapes, attrs});
    } catch (const SpmdError&) {
      continue;
    }
    nb::dict attr_dict;
    for (const auto& [name, value] : attrs.values()) {
      std::visit([&](const auto& v) { attr_dict[nb::str(name.c_str())] = nb::cast(v); }, value);
    }
    nb::list int_inputs;
    for (size_t i = 0; i < kinds.size(); ++i) {
      if (IsIntegerKind(kinds[i].kind) || kinds[i].kind == ValueKind::kBool) int_inputs.append(i);
    }
    nb::dict item;
    item["shapes"] = nb::cast(example.shapes);
    item["attrs"] = attr_dict;
    item["int_inputs"] = int_inputs;
    out.append(item);
  }
  return out;
}

// The op's declared attrs: [{"name", "default" (None: required), "aliases"}].
nb::list AttrSpecs(std::string_view op_name) {
  nb::list out;
  for (const AttrSpec& spec : ToOp(op_name).attrs) {
    nb::dict item;
    item["name"] = spec.name;
    item["default"] = nb::none();
    if (spec.default_value) {
      std::visit([&](const auto& v) { item["default"] = nb::cast(v); }, *spec.default_value);
    }
    item["aliases"] = nb::cast(spec.aliases);
    out.append(item);
  }
  return out;
}

bool Reverse(nb::handle direction, nb::handle outputs) {
  if (direction.is_none()) return !outputs.is_none();
  if (!PyUnicode_Check(direction.ptr())) ThrowInvalid("direction", "expected 'forward' or 'reverse'");
  const std::string text = nb::cast<std::string>(direction);
  if (text != "forward" && text != "reverse") {
    ThrowInvalid("direction", "expected 'forward' or 'reverse', got '" + text + "'");
  }
  return text == "reverse";
}

InferResult Infer(std::string_view op_name, nb::handle mesh_arg, nb::handle inputs, nb::handle attrs_arg,
                  nb::handle outputs, nb::handle direction) {
  const OpDecl& op = ToOp(op_name);
  const bool reverse = Reverse(direction, outputs);
  // A spmdkit.Mesh is used in place (no copy); a list of sizes becomes a Mesh here.
  Mesh built;
  const Mesh& mesh = nb::isinstance<Mesh>(mesh_arg) ? nb::cast<const Mesh&>(mesh_arg) : (built = ToMesh(mesh_arg));
  const Attrs attrs = ToAttrs(attrs_arg);
  if (!reverse) return InferForward(op, mesh, ToTensors(inputs, "inputs", true, mesh.ndim()), attrs);
  std::vector<Shape> shapes;
  for (TensorArg& t : ToTensors(inputs, "inputs", false, mesh.ndim())) shapes.push_back(std::move(t.shape));
  return InferReverse(op, mesh, shapes, ToTensors(outputs, "outputs", true, mesh.ndim()), attrs);
}

json AttrsToJson(const Attrs& attrs) {
  json j = json::object();
  for (const auto& [name, value] : attrs.values()) {
    std::visit([&](const auto& v) { j[name] = v; }, value);
  }
  return j;
}

json TensorToJson(const TensorArg& t, bool with_dist) {
  json j = with_dist ? io::DistAttrToJson(t.dist) : json::object();
  j["shape"] = t.shape;
  return j;
}

// The request as `spmd infer` reads it (the Python values already checked and converted).
json RequestJson(std::string_view op_name, nb::handle mesh_arg, nb::handle inputs, nb::handle attrs_arg,
                 nb::handle outputs, nb::handle direction) {
  const OpDecl& op = ToOp(op_name);
  const bool reverse = Reverse(direction, outputs);
  const Mesh mesh = ToMesh(mesh_arg);
  json j = {{"op", op.name},
            {"mesh_shape", mesh.shape()},
            {"process_ids", mesh.process_ids()},
            {"attrs", AttrsToJson(ToAttrs(attrs_arg))},
            {"direction", reverse ? "reverse" : "forward"}};
  if (!mesh.axis_names().empty()) j["axis_names"] = mesh.axis_names();
  j["inputs"] = json::array();
  for (const TensorArg& t : ToTensors(inputs, "inputs", !reverse, mesh.ndim())) j["inputs"].push_back(TensorToJson(t, !reverse));
  if (reverse) {
    j["outputs"] = json::array();
    for (const TensorArg& t : ToTensors(outputs, "outputs", true, mesh.ndim())) j["outputs"].push_back(TensorToJson(t, true));
  }
  return j;
}

nb::object ToPython(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return nb::none();
    case json::value_t::boolean: return nb::bool_(j.get<bool>());
    case json::value_t::number_integer: return nb::int_(j.get<int64_t>());
    case json::value_t::number_unsigned: return nb::int_(static_cast<int64_t>(j.get<uint64_t>()));
    case json::value_t::number_float: return nb::float_(j.get<double>());
    case json::value_t::string: return nb::str(j.get_ref<const std::string&>().c_str());
    case json::value_t::array: {
      nb::list list;
      for (const json& v : j) list.append(ToPython(v));
      return list;
    }
    case json::value_t::object: {
      nb::dict dict;
      for (const auto& [k, v] : j.items()) dict[nb::str(k.c_str())] = ToPython(v);
      return dict;
    }
    default: return nb::none();
  }
}

std::string Explain(std::string_view op, nb::handle mesh, nb::handle inputs, nb::handle attrs, nb::handle outputs,
                    nb::handle direction) {
  return cli::ExplainText(RequestJson(op, mesh, inputs, attrs, outputs, direction));
}

// The claim's dist attrs; a placements string needs the output's rank, from the declared
// output shapes.
std::vector<DistAttr> ClaimAttrs(const OpDecl& op, const Mesh& mesh, const std::vector<TensorArg>& inputs,
                                 const Attrs& attrs, nb::handle claims) {
  if (!PyList_Check(claims.ptr()) && !PyTuple_Check(claims.ptr())) {
    ThrowInvalid("claim_outputs", "expected a list");
  }
  std::vector<Shape> shapes;
  for (const TensorArg& t : inputs) shapes.push_back(t.shape);
  std::vector<Shape> out_shapes;
  std::vector<DistAttr> result;
  const nb::sequence seq = nb::borrow<nb::sequence>(claims);
  size_t o = 0;
  for (nb::handle claim : seq) {
    const std::string field = "claim_outputs[" + std::to_string(o) + "]";
    if (PyUnicode_Check(claim.ptr()) && out_shapes.empty()) {
      out_shapes = InferOutputShapes(op, shapes, op.NormalizeAttrs(attrs));
    }
    const int rank = o < out_shapes.size() ? static_cast<int>(out_shapes[o].size()) : 0;
    if (PyDict_Check(claim.ptr())) {
      RefuseUnknownKeys(claim, field, {"dims_mapping", "partial"});
      DistAttr d;
      PyObject* mapping = PyDict_GetItemString(claim.ptr(), "dims_mapping");
      if (mapping == nullptr) ThrowInvalid(field + ".dims_mapping", "is missing");
      d.dims = ToDimsMapping(mapping, field + ".dims_mapping");
      if (PyObject* partial = PyDict_GetItemString(claim.ptr(), "partial")) d.partial = ToPartial(partial, field + ".partial");
      result.push_back(std::move(d));
    } else {
      result.push_back(ToDistAttr(claim, rank, field, mesh.ndim()));
    }
    ++o;
  }
  return result;
}

nb::dict CheckClaim(std::string_view op_name, nb::handle mesh_arg, nb::handle inputs_arg, nb::handle claims,
                    nb::handle attrs_arg, uint64_t seed) {
  const OpDecl& op = ToOp(op_name);
  const Mesh mesh = ToMesh(mesh_arg);
  const Attrs attrs = ToAttrs(attrs_arg);
  const std::vector<TensorArg> inputs = ToTensors(inputs_arg, "inputs", true, mesh.ndim());
  json j = {{"op", op.name},
            {"mesh_shape", mesh.shape()},
            {"process_ids", mesh.process_ids()},
            {"attrs", AttrsToJson(attrs)},
            {"seed", seed}};
  j["inputs"] = json::array();
  for (const TensorArg& t : inputs) j["inputs"].push_back(TensorToJson(t, true));
  j["claim_outputs"] = json::array();
  for (const DistAttr& d : ClaimAttrs(op, mesh, inputs, attrs, claims)) j["claim_outputs"].push_back(io::DistAttrToJson(d));
  // From here on what `spmd check --claim` does: validate, shrink a large case, 4 seeds.
  std::vector<DistAttr> claimed;
  checker::Case c = io::CaseFromJson(j, &claimed);
  nb::dict result;
  result["shapes"] = ToPython(json(c.shapes));
  if (checker::SimulatedElements(c, c.shapes) > kShrinkAbove) {
    const checker::Shrunk shrunk = checker::ShrinkCase(c, c.inputs, claimed);
    if (shrunk.shrunk) c.shapes = shrunk.shapes;
  }
  result["checked_shapes"] = ToPython(json(c.shapes));
  checker::Outcome outcome;
  for (int k = 0; k < 4; ++k) {
    outcome = checker::CheckClaim(c, c.inputs, claimed);
    if (outcome.verdict != checker::Verdict::kSound) break;
    ++c.seed;
  }
  result["verdict"] = outcome.verdict == checker::Verdict::kSound     ? "SOUND"
                      : outcome.verdict == checker::Verdict::kUnsound ? "UNSOUND"
                                                                      : "NOT_APPLICABLE";
  result["note"] = outcome.note;
  if (outcome.counterexample) {
    const checker::Counterexample& e = *outcome.counterexample;
    nb::dict ce;
    ce["what"] = e.what;
    ce["output"] = e.output;
    ce["process_id"] = e.process_id;
    ce["index"] = e.index;
    ce["expected"] = e.expected;
    ce["got"] = e.got;
    ce["message"] = e.message;
    result["counterexample"] = ce;
    result["replay"] = io::ReplayCommand(c);
  } else {
    result["counterexample"] = nb::none();
    result["replay"] = nb::none();
  }
  return result;
}

// Renames a planner error's field to the Python argument's name (from -> src, to -> dst).
[[noreturn]] void RenamePlanError(const SpmdError& e) {
  const std::string& field = e.field();
  std::string message = e.what();
  if (!field.empty() && message.rfind(field + ": ", 0) == 0) message = message.substr(field.size() + 2);
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"from", "src"}, {"to", "dst"}}) {
    if (field == from || field.rfind(from + ".", 0) == 0 || field.rfind(from + "[", 0) == 0) {
      throw SpmdError(e.type(), to + field.substr(from.size()), message);
    }
  }
  throw e;
}

nb::tuple Plan(nb::handle mesh_arg, nb::handle shape_arg, nb::handle src_arg, nb::handle dst_arg,
               std::string_view dtype_name, nb::handle dst_mesh_arg) {
  const Mesh mesh = ToMesh(mesh_arg);
  const Mesh to_mesh = dst_mesh_arg.is_none() ? mesh : ToMesh(dst_mesh_arg);
  const std::vector<int64_t> shape = ToInts(shape_arg, "shape");
  const std::optional<DType> dtype = ParseDType(dtype_name);
  if (!dtype) {
    ThrowInvalid("dtype", "unknown dtype '" + std::string(dtype_name) +
                              "' (float64, float32, int64, bool, bfloat16, float16)");
  }
  const int rank = static_cast<int>(shape.size());
  const DistAttr src = ToDistAttr(src_arg, rank, "src", mesh.ndim());
  const DistAttr dst = ToDistAttr(dst_arg, rank, "dst", to_mesh.ndim());
  ReshardPlan plan;
  try {
    plan = PlanReshard(mesh, src, to_mesh, dst, shape, *dtype);
  } catch (const SpmdError& e) {
    RenamePlanError(e);
  }
  return nb::make_tuple(ToPython(io::ToJson(plan)), ToString(plan));
}

nb::object DimsMappingOf(const DistAttr& d) {
  return ToPython(io::DistAttrToJson(DistAttr{d.dims, {}})["dims_mapping"]);
}

nb::dict PartialOf(const DistAttr& d) {
  nb::dict result;
  for (const auto& [axis, op] : d.partial) result[nb::int_(axis)] = nb::str(std::string(ToString(op)).c_str());
  return result;
}

int NdimOf(nb::handle mesh) {
  if (nb::isinstance<Mesh>(mesh)) return nb::cast<const Mesh&>(mesh).ndim();
  const int64_t n = ToInt(mesh, "mesh");
  if (n < 0 || n > kMaxMeshAxes) ThrowInvalid("mesh", "expected a spmdkit.Mesh or a number of mesh axes");
  return static_cast<int>(n);
}

}  // namespace
}  // namespace spmd::python

NB_MODULE(_core, m) {
  using namespace spmd;
  using namespace spmd::python;
  m.doc() = "spmdkit's C++ core (use the spmdkit package)";
  RegisterErrors(m);

  nb::class_<Mesh>(m, "Mesh", "A logical device mesh: axis sizes, process ids (row-major by default), axis names.")
      .def("__init__",
           [](Mesh* self, nb::handle shape, nb::handle process_ids, nb::handle axis_names) {
             std::vector<int64_t> ids;
             if (!process_ids.is_none()) ids = ToInts(process_ids, "process_ids");
             std::vector<std::string> names;
             if (!axis_names.is_none()) names = nb::cast<std::vector<std::string>>(axis_names);
             new (self) Mesh(ToInts(shape, "mesh_shape"), std::move(ids), std::move(names));
           },
           nb::arg("shape"), nb::arg("process_ids") = nb::none(), nb::arg("axis_names") = nb::none())
      .def_prop_ro("shape", &Mesh::shape)
      .def_prop_ro("process_ids", &Mesh::process_ids)
      .def_prop_ro("axis_names", &Mesh::axis_names)
      .def_prop_ro("ndim", &Mesh::ndim)
      .def_prop_ro("size", &Mesh::size)
      .def("__eq__", [](const Mesh& a, nb::handle b) { return nb::isinstance<Mesh>(b) && a == nb::cast<const Mesh&>(b); })
      .def("__repr__", [](const Mesh& m) { return "spmdkit.Mesh(" + ToString(m) + ")"; });

  nb::class_<DistAttr>(m, "DistAttr",
                       "How one tensor is laid out over a mesh: the mesh axes sharding each dim, and "
                       "the partial axes.")
      .def("__init__",
           [](DistAttr* self, nb::handle dims_mapping, nb::handle partial) {
             new (self) DistAttr{ToDimsMapping(dims_mapping, "dims_mapping"), ToPartial(partial, "partial")};
           },
           nb::arg("dims_mapping"), nb::arg("partial") = nb::none())
      .def_static("from_placements",
                  [](nb::handle text, int rank) { return ToDistAttr(text, rank, "dist", -1); },
                  nb::arg("placements"), nb::arg("rank"),
                  "Parses a DTensor-style placements string like \"[S(0), P(sum)]\" for a tensor of `rank` dims.")
      .def_prop_ro("dims_mapping", &DimsMappingOf)
      .def_prop_ro("partial", &PartialOf)
      .def_prop_ro("rank", &DistAttr::rank)
      .def("placements", [](const DistAttr& d, nb::handle mesh) { return ToPlacementString(d, NdimOf(mesh)); },
           nb::arg("mesh"), "The placements string, one entry per mesh axis: \"[S(0), P(sum)]\".")
      .def("to_dict", [](const DistAttr& d) { return ToPython(io::DistAttrToJson(d)); },
           "The JSON form of `spmd infer`: {\"dims_mapping\": [...], \"partial\": {\"0\": \"sum\"}}.")
      .def("__eq__", [](const DistAttr& a, nb::handle b) { return nb::isinstance<DistAttr>(b) && a == nb::cast<const DistAttr&>(b); })
      .def("__repr__", [](const DistAttr& d) {
        return "spmdkit.DistAttr(" + nb::cast<std::string>(nb::repr(DimsMappingOf(d))) +
               (d.partial.empty() ? "" : ", partial=" + nb::cast<std::string>(nb::repr(PartialOf(d)))) + ")";
      });

  nb::class_<InferResult>(m, "InferResult", "A rule's answer: the required input and the output dist attrs.")
      .def_ro("inputs", &InferResult::inputs)
      .def_ro("outputs", &InferResult::outputs)
      .def("to_dict", [](const InferResult& r) {
        nb::dict d;
        nb::list ins, outs;
        for (const DistAttr& a : r.inputs) ins.append(ToPython(io::DistAttrToJson(a)));
        for (const DistAttr& a : r.outputs) outs.append(ToPython(io::DistAttrToJson(a)));
        d["inputs"] = ins;
        d["outputs"] = outs;
        return d;
      }, "The JSON answer of `spmd infer` for this result.")
      .def("__repr__", [](const InferResult& r) {
        auto list = [](const std::vector<DistAttr>& v) {
          std::string s = "[";
          for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + ToString(v[i]);
          return s + "]";
        };
        return "spmdkit.InferResult(inputs=" + list(r.inputs) + ", outputs=" + list(r.outputs) + ")";
      });

  m.def("infer", &Infer, nb::arg("op"), nb::arg("mesh"), nb::arg("inputs"), nb::arg("attrs") = nb::none(),
        nb::arg("outputs") = nb::none(), nb::arg("direction") = nb::none(),
        "Forward: the rule's required input dist attrs and the outputs' dist attrs for `inputs`.\n"
        "Reverse (direction=\"reverse\", or when `outputs` is given): `inputs` give the shapes only,\n"
        "`outputs` the output tensors; the answer holds the input dist attrs the outputs need.");
  m.def("explain", &Explain, nb::arg("op"), nb::arg("mesh"), nb::arg("inputs"), nb::arg("attrs") = nb::none(),
        nb::arg("outputs") = nb::none(), nb::arg("direction") = nb::none());
  m.def("check_claim", &CheckClaim, nb::arg("op"), nb::arg("mesh"), nb::arg("inputs"), nb::arg("claim_outputs"),
        nb::arg("attrs") = nb::none(), nb::arg("seed") = 1);
  m.def("plan", &Plan, nb::arg("mesh"), nb::arg("shape"), nb::arg("src"), nb::arg("dst"),
        nb::arg("dtype") = "float32", nb::arg("dst_mesh") = nb::none());
  m.def("infer_json", [](std::string_view line) { return io::InferLine(line); }, nb::arg("line"),
        "`spmd infer` on one line of JSON text (the CLI's path): the answer line.");
  m.def("examples", &Examples, nb::arg("op"), nb::arg("sizes"),
        "The op's declared examples on the size palette `sizes` (the checker's cases): a list "
        "of {'shapes', 'attrs' (normalised), 'int_inputs' (inputs holding ids, labels or "
        "conditions)}.");
  m.def("attr_specs", &AttrSpecs, nb::arg("op"),
        "The op's declared attrs: a list of {'name', 'default' (None: required), 'aliases'}.");
  m.def("ops", [] {
    std::vector<std::string> names;
    for (const OpDecl& op : AllOps()) names.push_back(op.name);
    return names;
  });
}

