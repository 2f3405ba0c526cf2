#include "cli/explain.h"

#include <cstdio>
#include <iostream>
#include <iterator>
#include <map>

#include <nlohmann/json.hpp>

#include "rules/model/error.h"
#include "io/infer_io.h"

namespace spmd::cli {
namespace {

// printf into a string (the explanation is built in full, then printed or returned).
template <typename... Args>
void Appendf(std::string& out, const char* format, Args... args) {
  if constexpr (sizeof...(Args) == 0) {
    out += format;
  } else {
    const int n = std::snprintf(nullptr, 0, format, args...);
    const size_t old = out.size();
    out.resize(old + static_cast<size_t>(n) + 1);
    std::snprintf(out.data() + old, static_cast<size_t>(n) + 1, format, args...);
    out.resize(old + static_cast<size_t>(n));
  }
}

std::string Axes(const AxisList& axes) {
  if (axes.empty()) return "replicated";
  std::string s = axes.size() > 1 ? "axes " : "axis ";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? "," : "") + std::to_string(axes[i]);
  return s;
}

void ExplainEinsum(std::string& out, const OpDecl& op, const io::RuleRequest& r, const EinsumSpec& spec, const InferResult& result) {
  Appendf(out, "rule       einsum notation %s\n", spec.ToString().c_str());
  // The merged factor map, read back from the required inputs (and the outputs for
  // factors only outputs carry).
  std::map<FactorId, AxisList> factors;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    for (size_t d = 0; d < spec.inputs[i].size(); ++d) {
      if (spec.inputs[i][d] != kBroadcastDim) factors[spec.inputs[i][d]] = result.inputs[i].dims[d];
    }
  }
  Appendf(out, "factors   ");
  for (const auto& [factor, axes] : factors) {
    Appendf(out, " %s: %s;", EinsumSpec::FactorName(factor).c_str(), Axes(axes).c_str());
  }
  Appendf(out, "\n");
  if (!spec.forced_replicated.empty()) {
    Appendf(out, "           %s must be whole on every rank (the local kernel needs it)\n",
                EinsumSpec::NotationString(spec.forced_replicated).c_str());
  }
  for (int i : spec.unread_inputs) {
    Appendf(out, "           input %d is never read (only its shape): required as given\n", i);
  }
  for (const auto& [i, o] : spec.accumulated) {
    Appendf(out, "           input %d is added into output %d: required partial where that output is\n", i, o);
  }
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    for (const auto& [axis, reduce] : result.outputs[o].partial) {
      std::string why = "a partial input the op keeps";
      for (const auto& [factor, axes] : factors) {
        for (int a : axes) {
          if (a == axis && !Contains(spec.outputs[o], factor)) {
            why = "factor " + EinsumSpec::FactorName(factor) + " is contracted and sharded by axis " + std::to_string(axis);
          }
        }
      }
      Appendf(out, "           %s %zu is partial(%s) on axis %d: %s\n", op.outputs.size() > o ? op.outputs[o].c_str() : "output", o,
                  std::string(ToString(reduce)).c_str(), axis, why.c_str());
    }
  }
  (void)r;
}

}  // namespace

std::string ExplainText(const nlohmann::json& j) {
  std::string out;
  const io::RuleRequest r = io::ParseRuleRequest(j);
  const OpDecl& op = *r.op;
  const int k = r.mesh.ndim();
  Appendf(out, "op         %s on %s\n", op.name.c_str(), ToString(r.mesh).c_str());
  std::vector<Shape> shapes;
  for (const TensorArg& t : r.inputs) shapes.push_back(t.shape);
  InferResult result;
  if (r.reverse) {
    result = InferReverse(op, r.mesh, shapes, r.outputs, r.attrs);
    for (size_t o = 0; o < r.outputs.size(); ++o) {
      Appendf(out, "given      output %zu %s\n", o, ToPlacementString(r.outputs[o].dist, k).c_str());
    }
  } else {
    result = InferForward(op, r.mesh, r.inputs, r.attrs);
    for (size_t i = 0; i < r.inputs.size(); ++i) {
      Appendf(out, "given      input %zu %s\n", i, ToPlacementString(r.inputs[i].dist, k).c_str());
    }
  }
  const Attrs attrs = op.NormalizeAttrs(r.attrs);
  if (auto spec = BuildEinsumSpec(op, shapes, attrs)) {
    ExplainEinsum(out, op, r, *spec, result);
  } else {
    const DimTransSpec transforms = op.dimtrans(RuleContext{shapes, attrs});
    Appendf(out, "rule       DimTrans\n");
    for (size_t d = 0; d < transforms.outputs.size(); ++d) {
      Appendf(out, "           out dim %zu = %s\n", d, transforms.outputs[d].ToString().c_str());
    }
  }
  for (size_t i = 0; i < result.inputs.size(); ++i) {
    const bool same = r.reverse || result.inputs[i] == r.inputs[i].dist;
    Appendf(out, "required   input %zu %s%s\n", i, ToPlacementString(result.inputs[i], k).c_str(),
                same ? "" : "   (resharded from the given one)");
  }
  for (size_t o = 0; o < result.outputs.size(); ++o) {
    Appendf(out, "output     %zu %s   %s\n", o, ToPlacementString(result.outputs[o], k).c_str(),
                ToString(result.outputs[o]).c_str());
  }
  return out;
}

int Explain(const std::vector<std::string>& args) {
  if (args.size() != 1 || args[0] == "--help") {
    std::cerr << "usage: spmd explain JSON   (a request as for `spmd infer`; - reads stdin)\n";
    return args.size() == 1 ? 0 : 2;
  }
  std::string text = args[0];
  if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), {});
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  try {
    if (j.is_discarded()) ThrowInvalid("line", "not valid JSON");
    std::cout << ExplainText(j);
    return 0;
  } catch (const SpmdError& e) {
    std::cerr << "spmd explain: " << ToString(e.type()) << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    // A request the parser did not foresee is still bad input, never an abort.
    std::cerr << "spmd explain: InvalidArgument: line: " << EscapeForText(e.what()) << "\n";
    return 2;
  }
}

}  // namespace spmd::cli
