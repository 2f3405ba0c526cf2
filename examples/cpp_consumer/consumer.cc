// Uses the installed spmdkit: one rule (matmul's forward inference on a 2x2 mesh) and one
// Dispatch (matmul on 4 thread ranks), whose result must equal the unsharded CPU kernel's.
// Exits 0 when it does, 1 otherwise.
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "rules/model/dist_attr.h"
#include "rules/engine/registry.h"
#include "runtime/exec/dispatch.h"
#include "runtime/comm/thread_communicator.h"

namespace {

int Run() {
  const spmd::Mesh mesh({2, 2});
  const spmd::OpDecl& matmul = *spmd::FindOp("matmul");

  // The rule: x [8, 6] sharded rows on axis 0 and columns on axis 1, y [6, 4] replicated.
  const spmd::DistAttr x_attr = spmd::ParsePlacementString("[S(0), S(1)]", 2, "x");
  const spmd::DistAttr y_attr = spmd::DistAttr::Replicated(2);
  const spmd::InferResult r =
      spmd::InferForward(matmul, mesh, {{{8, 6}, x_attr}, {{6, 4}, y_attr}}, spmd::Attrs());
  std::printf("rule: matmul x %s, y %s -> required y %s, out %s\n",
              spmd::ToPlacementString(x_attr, 2).c_str(), spmd::ToPlacementString(y_attr, 2).c_str(),
              spmd::ToPlacementString(r.inputs[1], 2).c_str(),
              spmd::ToPlacementString(r.outputs[0], 2).c_str());

  // The Dispatch: the same inputs as DistTensors on 4 ranks (threads of this process).
  std::vector<double> xv(8 * 6), yv(6 * 4);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.25 * static_cast<double>(i % 7) - 0.5;
  for (size_t i = 0; i < yv.size(); ++i) yv[i] = 0.5 * static_cast<double>(i % 5) - 1.0;
  const auto x = spmd::kernels::Tensor::FromVector<double>({8, 6}, xv);
  const auto y = spmd::kernels::Tensor::FromVector<double>({6, 4}, yv);
  const spmd::kernels::Tensor want =
      spmd::kernels::RunCpuKernel("matmul", {x, y}, matmul.NormalizeAttrs(spmd::Attrs()))[0];

  std::vector<double> max_error(4, -1.0);
  spmd::runtime::RunRanks(4, [&](spmd::runtime::Communicator& comm) {
    using spmd::runtime::DistTensor;
    const DistTensor dx = DistTensor::ShardTensor(x, mesh, x_attr, comm.rank());
    const DistTensor dy = DistTensor::ShardTensor(y, mesh, y_attr, comm.rank());
    const std::vector<DistTensor> out = spmd::runtime::Dispatch("matmul", {dx, dy}, spmd::Attrs(), comm);
    const spmd::kernels::Tensor got = *out[0].ToGlobal(comm);
    double err = got.shape() == want.shape() ? 0.0 : INFINITY;
    for (int64_t i = 0; err == 0.0 && i < got.numel(); ++i) {
      err = std::fmax(err, std::fabs(got.data<double>()[i] - want.data<double>()[i]));
    }
    max_error[comm.rank()] = err;
  });
  double worst = 0.0;
  for (double e : max_error) worst = std::fmax(worst, e < 0 ? INFINITY : e);
  std::printf("dispatch: matmul [8,6] x [6,4] on 4 thread ranks, max |error| vs the unsharded kernel %g\n",
              worst);
  if (!(worst <= 1e-12)) {
    std::printf("FAILED\n");
    return 1;
  }
  std::printf("ok\n");
  return 0;
}

}  // namespace

int main() {
  try {
    return Run();
  } catch (const std::exception& e) {  // SpmdError, CommError: name the failure, exit 1
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
}
