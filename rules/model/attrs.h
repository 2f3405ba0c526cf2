// Op attributes: typed values by Paddle attribute name.
//
// Every op declares its attrs (name, kind, default); `NormalizeAttrs` turns what a caller
// gave (JSON, a test) into an `Attrs` holding every declared attr with its declared kind,
// defaults filled in. Rules and references read them with the typed getters, which never
// see an undeclared name or a wrong kind.
//
// Beside the named attrs, an `Attrs` carries the localized part (`Localized`): what an op's
// localizer (rules/engine/op_decl.h) sets when one rank runs the op on its shards. Callers
// never give it (NormalizeAttrs refuses a set field); errors about it name `local.<field>`.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace spmd {

enum class AttrKind { kBool, kInt, kFloat, kString, kInts, kFloats };

using AttrValue =
    std::variant<bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

// The fields of the localized part, each named `local.<field>` in errors.
enum class LocalField { kCount, kVocabStart, kExact, kOffset, kGlobalShape };
inline constexpr LocalField kAllLocalFields[] = {LocalField::kCount, LocalField::kVocabStart, LocalField::kExact,
                                                 LocalField::kOffset, LocalField::kGlobalShape};
// "local.count", "local.vocab_start", "local.exact", "local.offset", "local.global_shape".
const char* LocalFieldName(LocalField field);

// What a shard's run needs of the global op that its local shapes do not say (docs/OPS.md,
// "Localized attrs"). Unset on a whole-tensor run; each op declares which fields its
// localizer sets (OpDecl::localized) and reads no other.
struct Localized {
  std::optional<int64_t> count;        // mean, mean_all: the global count of reduced elements
  std::optional<int64_t> vocab_start;  // lookup_table_v2, embedding_grad, index_select, gather,
                                       // scatter, sharded losses: the first row / class held
  std::optional<bool> exact;           // squeeze, reshape: the sizes are the local ones, literal
  std::optional<std::vector<int64_t>> offset;        // dropout, flash_attention, norm pieces,
                                                     // cumsum: the shard's global offset
  std::optional<std::vector<int64_t>> global_shape;  // with offset: the global shape

  bool Has(LocalField field) const;
  bool empty() const { return !count && !vocab_start && !exact && !offset && !global_shape; }
  bool operator==(const Localized&) const = default;
};

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

  // The named attrs only; the localized part is local().
  const std::map<std::string, AttrValue>& values() const { return values_; }

  const Localized& local() const { return local_; }
  Localized& mutable_local() { return local_; }
  // Returns a copy whose localized part is `local` (the named attrs unchanged).
  Attrs WithLocal(Localized local) const;

  // Equal named attrs and equal localized parts.
  bool operator==(const Attrs&) const = default;

 private:
  std::map<std::string, AttrValue> values_;
  Localized local_;
};

}  // namespace spmd
