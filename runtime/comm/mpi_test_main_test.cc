// The MPI test main hands std::cout and std::cerr back: after RunMpiTests returns, every
// rank (the silenced ones too) writes through the buffers it had before, and the
// exit-time flush of the standard streams never touches the main's dead local stream.
#include "runtime/testing/mpi_test_main.h"

#include <cstdio>
#include <cstring>

namespace {

TEST(MpiTestMain, RunsTheTests) { EXPECT_GE(spmd::runtime::WorldSize(), 1); }

// Overwrites the stack below the caller: whatever a dead local of RunMpiTests left there.
__attribute__((noinline)) int ScribbleStack() {
  volatile char junk[1 << 14];
  std::memset(const_cast<char*>(junk), 0x5a, sizeof junk);
  return junk[123];
}

}  // namespace

int main(int argc, char** argv) {
  std::streambuf* const cout_buffer = std::cout.rdbuf();
  std::streambuf* const cerr_buffer = std::cerr.rdbuf();
  int rank = -1;
  const int code = spmd::runtime::RunMpiTests(argc, argv, "", [&](spmd::runtime::MpiCommunicator* comm) {
    if (comm != nullptr) rank = spmd::runtime::WorldRank();
  });
  if (std::cout.rdbuf() != cout_buffer || std::cerr.rdbuf() != cerr_buffer) {
    std::fprintf(stderr, "rank %d: std::cout or std::cerr still points at the main's local stream\n", rank);
    return 3;
  }
  ScribbleStack();
  // Written after the tests, from every rank; each line must reach the real stream.
  std::cout << "rank " << rank << " wrote after the tests" << std::endl;
  std::cerr << "rank " << rank << " wrote to stderr after the tests" << std::endl;
  return code;
}
