#include "kernels/cuda/reduce_plan.h"

#include <algorithm>
#include <string>

#include "kernels/cpu/internal.h"
#include "rules/model/error.h"

namespace spmd::kernels::cuda {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Pieces of at least `min_piece` elements, enough to give about `want` pieces in all over
// `outputs` outputs, at most kMaxReduceSplits; then the chunk, and the pieces recounted so
// that none is empty.
void Split(int64_t len, int64_t outputs, int64_t min_piece, int64_t want, ReduceLaunch& launch) {
  int64_t splits = 1;
  if (len > min_piece && outputs < want) {
    splits = std::min(CeilDiv(len, min_piece), CeilDiv(want, std::max<int64_t>(outputs, 1)));
    splits = std::clamp<int64_t>(splits, 1, kMaxReduceSplits);
  }
  launch.chunk = len <= 0 ? 0 : CeilDiv(len, splits);
  launch.splits = len <= 0 ? 1 : CeilDiv(len, launch.chunk);
}

}  // namespace

ReduceLayout ArrangeReduce(const Shape& x, const std::vector<bool>& reduced) {
  ReduceLayout layout;
  int64_t out_count = 1;
  int64_t count = 1;
  for (size_t d = 0; d < x.size(); ++d) (reduced[d] ? count : out_count) *= x[d];
  if (NumElements(x) == 0) {  // nothing to read: every output is the identity
    layout.outer = out_count;
    layout.len = 0;
    return layout;
  }
  std::vector<int64_t> sizes;
  std::vector<bool> flags;
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] == 1) continue;
    if (!sizes.empty() && flags.back() == reduced[d]) {
      sizes.back() *= x[d];
    } else {
      sizes.push_back(x[d]);
      flags.push_back(reduced[d]);
    }
  }
  int groups = 0;
  for (bool f : flags) groups += f ? 1 : 0;
  if (groups == 0) {
    layout.outer = out_count;
    return layout;
  }
  if (groups == 1) {
    size_t g = 0;
    while (!flags[g]) ++g;
    layout.outer = 1;
    for (size_t i = 0; i < g; ++i) layout.outer *= sizes[i];
    layout.len = sizes[g];
    for (size_t i = g + 1; i < sizes.size(); ++i) layout.inner *= sizes[i];
    return layout;
  }
  for (size_t d = 0; d < x.size(); ++d) {
    if (!reduced[d]) layout.perm.push_back(static_cast<int64_t>(d));
  }
  for (size_t d = 0; d < x.size(); ++d) {
    if (reduced[d]) layout.perm.push_back(static_cast<int64_t>(d));
  }
  layout.outer = out_count;
  layout.len = count;
  return layout;
}

ReduceLaunch PlanReduceLaunch(const ReduceLayout& layout) {
  ReduceLaunch launch;
  if (layout.inner == 1) {
    launch.rows = true;
    if (layout.len <= 1024) {
      launch.warp_rows = true;
      launch.splits = 1;
      launch.chunk = layout.len;
      return launch;
    }
    // Blocks of 256 threads: about 1024 blocks in flight, each piece >= 4096 elements.
    Split(layout.len, layout.outer, 4096, 1024, launch);
    return launch;
  }
  launch.rows = false;
  // One thread per column: about 64K threads in flight, each piece >= 256 elements.
  const int64_t columns = layout.outer * layout.inner;
  Split(layout.len, columns, 256, 65536, launch);
  return launch;
}

}  // namespace spmd::kernels::cuda
