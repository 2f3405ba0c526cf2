// Localized attrs: what an op's localizer (rules/engine/op_decl.h) adds when one rank runs the
// op on its shards, and the references read (docs/OPS.md, "Localized attrs"). Never
// accepted from callers: NormalizeAttrs rejects names starting with "__".
#pragma once

namespace spmd {

inline constexpr const char* kLocalCount = "__count";             // mean, mean_all: global count
inline constexpr const char* kLocalVocabStart = "__vocab_start";  // lookup_table_v2: first row held
inline constexpr const char* kLocalExact = "__exact";             // squeeze, reshape: sizes are literal
// dropout (and flash_attention, of q): the shard's global offset, and the global shape
inline constexpr const char* kLocalOffset = "__offset";
inline constexpr const char* kLocalGlobalShape = "__global_shape";

}  // namespace spmd
