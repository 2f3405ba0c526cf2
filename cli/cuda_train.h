// spmd-train --device cuda: the GPU each rank trains on and the communicator that carries
// its collectives (docs/TRAINING.md "Devices", docs/DECISIONS.md "spmd-train --device cuda:
// NCCL, or MPI staging for ranks sharing a GPU"). Not yet run on a GPU.
//
// Two programs from the same sources: spmd-train links neither CUDA nor NCCL (loading
// libnccl costs every process about 0.2 s, on every CPU and sim run), and spmd-train-cuda,
// built with CUDA and NCCL, links both (SPMD_HAVE_NCCL). spmd-train given --device cuda
// replaces itself (execv, before MPI starts) with the spmd-train-cuda next to it.
#pragma once

#include <memory>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"

namespace spmd::cli {

// Whether this program was built with CUDA and NCCL (spmd-train-cuda).
bool CudaTrainingBuilt();

// In a program without CUDA: when the last --device in argv is cuda and an executable
// spmd-train-cuda lies next to this program, execv's it with the same arguments (does not
// return; if execv fails, returns and the flags are refused as usual). Else does nothing.
void ExecCudaProgramIfAsked(int argc, char** argv);

// Registers CUDA training (train/device_cuda.h) and returns this rank's GPU: the node-local
// rank (OMPI_COMM_WORLD_LOCAL_RANK) modulo the visible GPUs. Throws InvalidArgument
// ("--device") in a build without CUDA and NCCL, Unsupported ("--device") where no GPU is
// usable (with CUDA's reason), InvalidArgument ("SPMD_CUDA_COLLECTIVES") for a value other
// than auto, nccl or staged. Local: call it where every rank's refusal is agreed on.
int PrepareCudaTraining();

// How the collectives go, from every rank's {host identity, GPU} pair (flat, rank order),
// SPMD_CUDA_COLLECTIVES's value (auto, nccl, staged; InvalidArgument naming it otherwise)
// and whether the world is mpirun's. `shared`: two ranks have the same pair.
struct CollectivesChoice {
  bool nccl = false;
  bool shared = false;
  std::string description;  // for the run's header line
};
CollectivesChoice ChooseCollectives(const std::vector<int64_t>& identity_and_gpu, const std::string& setting,
                                    bool mpirun_world);

// The communicator training uses on CUDA device `device`, over `host` (the MPI world;
// `mpirun_world`: it is MPI_COMM_WORLD, which the NCCL bootstrap uses). Collective over
// `host`: the ranks all-gather (host identity, GPU), the host identity being NCCL_HOSTID
// where set, else the host name, as NCCL tells hosts apart. Then
//   - NCCL (runtime/comm/nccl_communicator.h: rank 0's ncclUniqueId broadcast over MPI) when no
//     two ranks have the same identity and GPU, which one NCCL communicator refuses
//     ("Duplicate GPU detected");
//   - else (ranks sharing a GPU, or not launched by mpirun) the staged communicator: the
//     device buffers copied through host memory and moved by MPI
//     (runtime/comm/staged_communicator.h with runtime/comm/cuda_staging.h).
// SPMD_CUDA_COLLECTIVES=nccl or staged forces one (nccl on a shared GPU without distinct
// NCCL_HOSTID fails in NCCL's setup, naming the rank). `*description` says which, for the
// run's header line. `host` must outlive the result.
std::unique_ptr<runtime::Communicator> MakeCudaCommunicator(runtime::Communicator& host, int device,
                                                            bool mpirun_world, std::string* description);

}  // namespace spmd::cli
