// Op attributes: typed values by Paddle attribute name.
//
// Every op declares its attrs (name, kind, default); `NormalizeAttrs` turns what a caller
// gave (JSON, a test) into an `Attrs` holding every declared attr with its declared kind,
// defaults filled in. Rules and references read them with the typed getters, which never
// see an undeclared name or a wrong kind.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace spmd {

enum class AttrKind { kBool, kInt, kFloat, kString, kInts, kFloats };

using AttrValue =
    std::variant<bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

class Attrs {
 public:
  Attrs() = default;

  // Returns the attr `name`; throws SpmdError(kInvalidArgument, "attrs.<name>") when it
  // is missing or of another kind.
  bool GetBool(const std::string& name) const;
  int64_t GetInt(const std::string& name) const;
  double GetFloat(const std::string& name) const;
  const std::string& GetString(const std::string& name) const;
  const std::vector<int64_t>& GetInts(const std::string& name) const;
  const std::vector<double>& GetFloats(const std::string& name) const;
  bool Has(const std::string& name) const { return values_.count(name) != 0; }

  // Returns a copy with `name` set to `value` (attrs are values; this never mutates).
  Attrs With(const std::string& name, AttrValue value) const;
  void Set(const std::string& name, AttrValue value) { values_[name] = std::move(value); }

  const std::map<std::string, AttrValue>& values() const { return values_; }
  bool operator==(const Attrs&) const = default;

 private:
  std::map<std::string, AttrValue> values_;
};

}  // namespace spmd
