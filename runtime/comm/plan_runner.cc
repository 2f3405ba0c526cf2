#include "runtime/comm/plan_runner.h"

#include <cstddef>
#include <stdexcept>

namespace spmd::runtime::nccl {

void RunPlan(const Plan& plan, std::vector<void*> buffers, const Group& group,
             Transport& transport, kernels::Backend& backend, kernels::Allocator& allocator,
             kernels::Stream stream, ByteCount& handed) {
  if (buffers.empty()) buffers.push_back(nullptr);
  void* scratch = plan.scratch_bytes > 0
                      ? allocator.Allocate(static_cast<size_t>(plan.scratch_bytes), stream)
                      : nullptr;
  buffers[kScratch] = scratch;
  struct Release {
    kernels::Allocator& allocator;
    void* p;
    size_t n;
    kernels::Stream s;
    ~Release() { allocator.Deallocate(p, n, s); }
  } release{allocator, scratch, static_cast<size_t>(plan.scratch_bytes), stream};

  auto at = [&buffers](const Ref& r) -> std::byte* {
    if (r.buffer < 0) return nullptr;
    if (r.buffer >= static_cast<int>(buffers.size())) throw std::logic_error("RunPlan: no such buffer");
    return static_cast<std::byte*>(buffers[r.buffer]) + r.offset;
  };
  for (const Step& step : plan.steps) {
    if (step.local) {
      const Local& l = *step.local;
      const auto e = static_cast<int64_t>(ElementSize(l.dtype));
      switch (l.kind) {
        case Local::Kind::kCopy:
          backend.Copy(at(l.to), at(l.from), static_cast<size_t>(l.count * e), stream);
          break;
        case Local::Kind::kToTruth:
          backend.ToTruth(at(l.from), at(l.to), l.count, l.dtype, stream);
          break;
        case Local::Kind::kDivide:
          backend.Scale(at(l.to), l.count, l.dtype, l.divisor, /*divide=*/true, stream);
          break;
        case Local::Kind::kPackBox:
          backend.CopyBox(at(l.from), l.box.array, l.box.at, at(l.to), l.box.extent,
                          std::vector<int64_t>(l.box.extent.size(), 0), l.box.extent,
                          static_cast<size_t>(e), stream);
          break;
        case Local::Kind::kUnpackBox:
          backend.CopyBox(at(l.from), l.box.extent, std::vector<int64_t>(l.box.extent.size(), 0),
                          at(l.to), l.box.array, l.box.at, l.box.extent, static_cast<size_t>(e),
                          stream);
          break;
      }
      continue;
    }
    for (const Op& op : step.ops) {
      handed.sent += op.payload ? op.handed.sent : 0;
      handed.received += op.payload ? op.handed.received : 0;
    }
    transport.RunGroup(group, step.world, step.ops, buffers);
  }
}

}  // namespace spmd::runtime::nccl
