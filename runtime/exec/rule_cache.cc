#include "runtime/exec/rule_cache.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "rules/engine/registry.h"

namespace spmd::runtime {
namespace {

// splitmix64's finaliser: every input bit reaches every output bit.
uint64_t Mix(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t MixInts(uint64_t h, const std::vector<int64_t>& v) {
  h = Mix(h, v.size());
  for (int64_t x : v) h = Mix(h, static_cast<uint64_t>(x));
  return h;
}

uint64_t MixString(uint64_t h, const std::string& s) {
  h = Mix(h, s.size());
  for (size_t i = 0; i < s.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, s.data() + i, std::min<size_t>(8, s.size() - i));
    h = Mix(h, word);
  }
  return h;
}

uint64_t MixDouble(uint64_t h, double d) {
  uint64_t bits = 0;
  std::memcpy(&bits, &d, sizeof bits);
  return Mix(h, bits);
}

uint64_t MixAttr(uint64_t h, const AttrValue& value) {
  h = Mix(h, value.index());
  return std::visit(
      [h](const auto& v) -> uint64_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) return Mix(h, v ? 1 : 0);
        if constexpr (std::is_same_v<T, int64_t>) return Mix(h, static_cast<uint64_t>(v));
        if constexpr (std::is_same_v<T, double>) return MixDouble(h, v);
        if constexpr (std::is_same_v<T, std::string>) return MixString(h, v);
        if constexpr (std::is_same_v<T, std::vector<int64_t>>) return MixInts(h, v);
        if constexpr (std::is_same_v<T, std::vector<double>>) {
          uint64_t out = Mix(h, v.size());
          for (double d : v) out = MixDouble(out, d);
          return out;
        }
      },
      value);
}

// The inputs as given to CachedInferForward: TensorArgs, or the caller's DistTensors (read in
// place, so a hit copies no shape or dist attr).
struct ArgsView {
  const std::vector<TensorArg>& args;
  size_t size() const { return args.size(); }
  const Shape& shape(size_t i) const { return args[i].shape; }
  const DistAttr& dist(size_t i) const { return args[i].dist; }
};
struct TensorsView {
  const std::vector<const DistTensor*>& tensors;
  size_t size() const { return tensors.size(); }
  const Shape& shape(size_t i) const { return tensors[i]->shape(); }
  const DistAttr& dist(size_t i) const { return tensors[i]->dist_attr(); }
};

template <typename Inputs>
uint64_t HashRequest(const OpDecl& op, const Mesh& mesh, const Inputs& inputs, const Attrs& attrs) {
  uint64_t h = Mix(0, reinterpret_cast<uintptr_t>(&op));
  h = MixInts(h, mesh.shape());
  h = MixInts(h, mesh.process_ids());
  h = Mix(h, mesh.axis_names().size());
  for (const std::string& name : mesh.axis_names()) h = MixString(h, name);
  h = Mix(h, inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DistAttr& dist = inputs.dist(i);
    h = MixInts(h, inputs.shape(i));
    h = Mix(h, dist.dims.size());
    for (const AxisList& axes : dist.dims) {
      h = Mix(h, axes.size());
      for (int axis : axes) h = Mix(h, static_cast<uint64_t>(axis));
    }
    h = Mix(h, dist.partial.size());
    for (const auto& [axis, reduce] : dist.partial) {
      h = Mix(Mix(h, static_cast<uint64_t>(axis)), static_cast<uint64_t>(reduce));
    }
  }
  h = Mix(h, attrs.values().size());
  for (const auto& [name, value] : attrs.values()) h = MixAttr(MixString(h, name), value);
  return h;
}

template <typename Inputs>
bool SameInputs(const std::vector<TensorArg>& a, const Inputs& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].shape != b.shape(i) || !(a[i].dist == b.dist(i))) return false;
  }
  return true;
}

std::vector<TensorArg> ToArgs(const ArgsView& view) { return view.args; }
std::vector<TensorArg> ToArgs(const TensorsView& view) {
  std::vector<TensorArg> args;
  args.reserve(view.size());
  for (size_t i = 0; i < view.size(); ++i) args.push_back({view.shape(i), view.dist(i)});
  return args;
}

struct Entry {
  uint64_t hash = 0;
  const OpDecl* op = nullptr;  // nullptr: an empty slot
  Mesh mesh{std::vector<int64_t>{1}};
  std::vector<TensorArg> inputs;
  Attrs attrs;
  std::shared_ptr<const ForwardInference> answer;
};

struct ThreadCache {
  std::vector<Entry> slots = std::vector<Entry>(kRuleCacheSlots);
  RuleCacheStats stats;
};

ThreadCache& Cache() {
  thread_local ThreadCache cache;
  return cache;
}

bool CacheEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("SPMD_RULE_CACHE");
    return v == nullptr || std::string(v) != "0";
  }();
  return enabled;
}

// Whether `op` is one of the registry's declarations (built once, never changed or freed).
bool IsRegistered(const OpDecl& op) {
  const std::vector<OpDecl>& all = AllOps();
  return !all.empty() && &op >= all.data() && &op < all.data() + all.size();
}

template <typename Inputs>
std::shared_ptr<const ForwardInference> Lookup(const OpDecl& op, const Mesh& mesh, const Inputs& inputs,
                                               const Attrs& attrs) {
  ThreadCache& cache = Cache();
  if (!CacheEnabled() || !IsRegistered(op)) {
    ++cache.stats.bypassed;
    return std::make_shared<const ForwardInference>(InferForwardWithShapes(op, mesh, ToArgs(inputs), attrs));
  }
  const uint64_t hash = HashRequest(op, mesh, inputs, attrs);
  Entry& slot = cache.slots[hash % static_cast<uint64_t>(kRuleCacheSlots)];
  if (slot.op == &op && slot.hash == hash && slot.mesh == mesh && SameInputs(slot.inputs, inputs) &&
      slot.attrs == attrs) {
    ++cache.stats.hits;
    return slot.answer;
  }
  // Infer first: a refusal throws here and leaves the slot as it was.
  std::vector<TensorArg> args = ToArgs(inputs);
  auto answer = std::make_shared<const ForwardInference>(InferForwardWithShapes(op, mesh, args, attrs));
  ++cache.stats.misses;
  slot.hash = hash;
  slot.op = &op;
  slot.mesh = mesh;
  slot.inputs = std::move(args);
  slot.attrs = attrs;
  slot.answer = answer;
  return answer;
}

}  // namespace

std::shared_ptr<const ForwardInference> CachedInferForward(const OpDecl& op, const Mesh& mesh,
                                                           const std::vector<TensorArg>& inputs,
                                                           const Attrs& attrs) {
  return Lookup(op, mesh, ArgsView{inputs}, attrs);
}

std::shared_ptr<const ForwardInference> CachedInferForward(const OpDecl& op, const Mesh& mesh,
                                                           const std::vector<const DistTensor*>& inputs,
                                                           const Attrs& attrs) {
  return Lookup(op, mesh, TensorsView{inputs}, attrs);
}

RuleCacheStats ThisThreadRuleCacheStats() { return Cache().stats; }

void ResetThisThreadRuleCache() {
  ThreadCache& cache = Cache();
  for (Entry& e : cache.slots) e = Entry{};
  cache.stats = {};
}

}  // namespace spmd::runtime
