#include "cli/cuda_train.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "rules/model/error.h"

#if defined(SPMD_HAVE_NCCL)
#include <mpi.h>

#include "kernels/cuda/cuda.h"
#include "runtime/comm/cuda_staging.h"
#include "runtime/comm/nccl_communicator.h"
#include "runtime/comm/staged_communicator.h"
#include "train/device_cuda.h"
#endif

namespace spmd::cli {

namespace {

// SPMD_CUDA_COLLECTIVES: "auto" (unset), "nccl" or "staged".
std::string CollectivesSetting() {
  const char* v = std::getenv("SPMD_CUDA_COLLECTIVES");
  const std::string setting = v == nullptr || *v == '\0' ? "auto" : v;
  ChooseCollectives({}, setting, true);  // refuses a bad value
  return setting;
}

}  // namespace

CollectivesChoice ChooseCollectives(const std::vector<int64_t>& identity_and_gpu, const std::string& setting,
                                    bool mpirun_world) {
  if (setting != "auto" && setting != "nccl" && setting != "staged") {
    ThrowInvalid("SPMD_CUDA_COLLECTIVES", "'" + setting + "' is not auto, nccl or staged");
  }
  if (identity_and_gpu.size() % 2 != 0) ThrowInvalid("identity_and_gpu", "expected pairs");
  CollectivesChoice choice;
  std::set<std::pair<int64_t, int64_t>> seen;
  for (size_t i = 0; i < identity_and_gpu.size(); i += 2) {
    choice.shared |= !seen.insert({identity_and_gpu[i], identity_and_gpu[i + 1]}).second;
  }
  choice.nccl = setting == "nccl" || (setting == "auto" && !choice.shared && mpirun_world);
  if (choice.nccl) {
    choice.description = "collectives: NCCL";
  } else {
    choice.description = std::string("collectives staged through host memory over MPI") +
                         (setting == "staged"  ? " (SPMD_CUDA_COLLECTIVES=staged)"
                          : choice.shared      ? " (ranks share a GPU)"
                                               : " (not launched by mpirun)");
  }
  return choice;
}

#if defined(SPMD_HAVE_NCCL)

bool CudaTrainingBuilt() { return true; }

void ExecCudaProgramIfAsked(int, char**) {}

int PrepareCudaTraining() {
  CollectivesSetting();  // refused here, with the flags, rather than after the agreement
  std::string reason;
  if (kernels::cuda::DeviceCount(&reason) <= 0) {
    ThrowUnsupported("--device", "cuda: no usable GPU (" + reason + ")");
  }
  train::EnableCudaTraining();
  return runtime::DefaultNcclDevice();
}

std::unique_ptr<runtime::Communicator> MakeCudaCommunicator(runtime::Communicator& host, int device,
                                                            bool mpirun_world, std::string* description) {
  // Who else is on this GPU: (host identity, GPU) of every rank.
  const char* hostid = std::getenv("NCCL_HOSTID");
  std::string identity;
  if (hostid != nullptr && *hostid != '\0') {
    identity = hostid;
  } else {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    identity = name;
  }
  const int64_t mine[2] = {static_cast<int64_t>(std::hash<std::string>{}(identity) >> 1), device};
  const int64_t world = host.world_size();
  std::vector<int64_t> all(static_cast<size_t>(2 * world));
  runtime::Group group;
  for (int64_t r = 0; r < world; ++r) group.push_back(r);
  const std::vector<int64_t> counts(static_cast<size_t>(world), 2);
  host.AllGather(mine, all.data(), counts, DType::kInt64, group);
  host.Synchronize();
  const CollectivesChoice choice = ChooseCollectives(all, CollectivesSetting(), mpirun_world);
  *description = choice.description;
  const kernels::Device cuda = kernels::Device::Cuda(device);
  if (choice.nccl) return std::make_unique<runtime::NcclCommunicator>(MPI_COMM_WORLD, host.options(), device);
  return std::make_unique<runtime::StagedCommunicator>(host, cuda, kernels::cuda::NewStream(cuda),
                                                       runtime::CudaHostStaging());
}

#else

bool CudaTrainingBuilt() { return false; }

void ExecCudaProgramIfAsked(int argc, char** argv) {
  std::string device;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--device") device = argv[i + 1];
  }
  if (device != "cuda") return;
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return;
  const std::string cuda = (self.parent_path() / "spmd-train-cuda").string();
  if (access(cuda.c_str(), X_OK) != 0) return;
  argv[0] = const_cast<char*>(cuda.c_str());
  execv(cuda.c_str(), argv);
}

int PrepareCudaTraining() {
  CollectivesSetting();
  ThrowInvalid("--device", "cuda: this build has no CUDA and NCCL (configure with -DSPMD_WITH_CUDA=ON on a "
                           "machine with the CUDA toolkit and NCCL)");
}

std::unique_ptr<runtime::Communicator> MakeCudaCommunicator(runtime::Communicator&, int, bool, std::string*) {
  ThrowInvalid("--device", "cuda: this build has no CUDA and NCCL");
}

#endif

}  // namespace spmd::cli
