#include "rules/model/attrs.h"

#include "rules/model/error.h"

namespace spmd {
namespace {

template <typename T>
const T& Get(const std::map<std::string, AttrValue>& values, const std::string& name,
             const char* kind) {
  auto it = values.find(name);
  if (it == values.end()) ThrowInvalid("attrs." + name, "missing attribute");
  const T* value = std::get_if<T>(&it->second);
  if (value == nullptr) ThrowInvalid("attrs." + name, std::string("expected ") + kind);
  return *value;
}

}  // namespace

bool Attrs::GetBool(const std::string& name) const { return Get<bool>(values_, name, "a bool"); }
int64_t Attrs::GetInt(const std::string& name) const {
  return Get<int64_t>(values_, name, "an int");
}
double Attrs::GetFloat(const std::string& name) const {
  return Get<double>(values_, name, "a float");
}
const std::string& Attrs::GetString(const std::string& name) const {
  return Get<std::string>(values_, name, "a string");
}
const std::vector<int64_t>& Attrs::GetInts(const std::string& name) const {
  return Get<std::vector<int64_t>>(values_, name, "a list of ints");
}
const std::vector<double>& Attrs::GetFloats(const std::string& name) const {
  return Get<std::vector<double>>(values_, name, "a list of floats");
}

Attrs Attrs::With(const std::string& name, AttrValue value) const {
  Attrs copy = *this;
  copy.values_[name] = std::move(value);
  return copy;
}

Attrs Attrs::WithLocal(Localized local) const {
  Attrs copy = *this;
  copy.local_ = std::move(local);
  return copy;
}

const char* LocalFieldName(LocalField field) {
  switch (field) {
    case LocalField::kCount: return "local.count";
    case LocalField::kVocabStart: return "local.vocab_start";
    case LocalField::kExact: return "local.exact";
    case LocalField::kOffset: return "local.offset";
    case LocalField::kGlobalShape: return "local.global_shape";
  }
  return "local";
}

bool Localized::Has(LocalField field) const {
  switch (field) {
    case LocalField::kCount: return count.has_value();
    case LocalField::kVocabStart: return vocab_start.has_value();
    case LocalField::kExact: return exact.has_value();
    case LocalField::kOffset: return offset.has_value();
    case LocalField::kGlobalShape: return global_shape.has_value();
  }
  return false;
}

}  // namespace spmd
