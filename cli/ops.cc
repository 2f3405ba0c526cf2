#include "cli/ops.h"

#include <charconv>
#include <cstdint>
#include <iostream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "rules/engine/registry.h"

namespace spmd::cli {
namespace {

std::string KindName(AttrKind kind) {
  switch (kind) {
    case AttrKind::kBool: return "bool";
    case AttrKind::kInt: return "int";
    case AttrKind::kFloat: return "float";
    case AttrKind::kString: return "string";
    case AttrKind::kInts: return "ints";
    case AttrKind::kFloats: return "floats";
  }
  return "?";
}

// The shortest text that reads back as `v`, written as the docs write numbers: `1e-5`,
// `10000.0`, `1.7976931348623157e308`.
std::string FloatText(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  const size_t e = s.find('e');
  if (e == std::string::npos) {
    if (s.find_first_of(".ni") == std::string::npos) s += ".0";  // not nan / inf
    return s;
  }
  std::string mantissa = s.substr(0, e);
  std::string exponent = s.substr(e + 1);
  const bool negative = !exponent.empty() && exponent[0] == '-';
  if (!exponent.empty() && (exponent[0] == '+' || exponent[0] == '-')) exponent.erase(0, 1);
  exponent.erase(0, std::min(exponent.find_first_not_of('0'), exponent.size() - 1));
  return mantissa + "e" + (negative ? "-" : "") + exponent;
}

std::string ValueText(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          return FloatText(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return "\"" + v + "\"";
        } else {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) {
            if (i > 0) out += ", ";
            if constexpr (std::is_same_v<T, std::vector<double>>) {
              out += FloatText(v[i]);
            } else {
              out += std::to_string(v[i]);
            }
          }
          return out + "]";
        }
      },
      value);
}

nlohmann::json ValueJson(const AttrValue& value) {
  return std::visit([](const auto& v) { return nlohmann::json(v); }, value);
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string Signature(const OpDecl& op) {
  std::string inputs = Join(op.inputs);
  if (op.variadic_inputs) inputs += " (1 or more)";
  return inputs + " -> " + Join(op.outputs);
}

int Usage(std::ostream& out, int code) {
  out << "usage: spmd ops --markdown | --json\n"
         "  --markdown  every op's inputs, outputs and attrs as a markdown table (the attrs\n"
         "              cell as docs/OPS.md and docs/SEMANTICS.md write it)\n"
         "  --json      one JSON object per op and line: name, inputs, variadic_inputs,\n"
         "              outputs, attrs (name, kind, default or required: true, aliases)\n";
  return code;
}

}  // namespace

std::string AttrsCell(const OpDecl& op) {
  if (op.attrs.empty()) return "none";
  std::string cell;
  for (const AttrSpec& a : op.attrs) {
    if (!cell.empty()) cell += ", ";
    cell += a.name + ": " + KindName(a.kind);
    cell += a.default_value ? " = " + ValueText(*a.default_value) : " (required)";
    if (!a.aliases.empty()) cell += (a.aliases.size() == 1 ? " (alias " : " (aliases ") + Join(a.aliases) + ")";
  }
  return cell;
}

int Ops(const std::vector<std::string>& args) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) return Usage(std::cout, 0);
  if (args.size() != 1 || (args[0] != "--markdown" && args[0] != "--json")) {
    std::cerr << "spmd ops: InvalidArgument: arguments: expected --markdown or --json\n";
    return Usage(std::cerr, 2);
  }
  if (args[0] == "--markdown") {
    std::cout << "| op | inputs -> outputs | attrs |\n|---|---|---|\n";
    for (const OpDecl& op : AllOps()) {
      std::cout << "| " << op.name << " | " << Signature(op) << " | " << AttrsCell(op) << " |\n";
    }
    return 0;
  }
  for (const OpDecl& op : AllOps()) {
    nlohmann::json attrs = nlohmann::json::array();
    for (const AttrSpec& a : op.attrs) {
      nlohmann::json j = {{"name", a.name}, {"kind", KindName(a.kind)}, {"aliases", a.aliases}};
      if (a.default_value) {
        j["default"] = ValueJson(*a.default_value);
      } else {
        j["required"] = true;
      }
      attrs.push_back(std::move(j));
    }
    const nlohmann::json line = {{"name", op.name},       {"inputs", op.inputs},
                                 {"variadic_inputs", op.variadic_inputs},
                                 {"outputs", op.outputs}, {"attrs", std::move(attrs)}};
    std::cout << line.dump() << "\n";
  }
  return 0;
}

}  // namespace spmd::cli
