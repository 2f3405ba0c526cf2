// What a layout-changing collective costs with plain MPI, three ways (docs/RUNTIME.md
// "Benchmark"): the question behind the executor's packing.
//
// Two transitions of a [rows, cols] float32 tensor on all ranks (n must divide both):
// - S(1) -> R, all-gather along dim 1: each rank holds [rows, cols/n] and needs the whole
//   [rows, cols] tensor; every peer's chunk is strided in the result.
// - S(0) -> S(1), all-to-all: each rank holds [rows/n, cols] and needs [rows, cols/n]; the
//   piece for each peer is strided in the source.
// For each:
// - "raw": the collective on contiguous buffers, the same bytes, no rearrangement (the
//   result is not in the target layout: the yardstick of reshard_bench's "raw MPI");
// - "raw + pack": the same collective plus one strided copy pass with memcpy runs (what
//   runtime/exec/reshard_executor.cc does: unpack after the gather, pack before the all-to-all);
// - "derived": MPI derived datatypes (a resized MPI_Type_vector) so that MPI itself reads
//   or writes the strided pieces: MPI_Allgather into the result, MPI_Alltoallw from the
//   source.
// Each time is the median over --reps runs of the slowest rank (a barrier before each, 3
// warm-up runs). The results of "raw + pack" and "derived" are checked against each other.
//
//   mpirun -np 4 --oversubscribe --mca pml ob1 --mca btl self,vader build/bin/layout_bench
//   ... layout_bench --mib 64 --reps 9
#include <mpi.h>
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double TimeIt(const std::function<void()>& run, int reps) {
  std::vector<double> times;
  for (int r = 0; r < reps + 3; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    run();
    double mine = MPI_Wtime() - t0, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (r >= 3) times.push_back(slowest);
  }
  return Median(times);
}

// One Markdown row; ok: whether "raw + pack" and "derived" gave the same result everywhere.
void Row(const char* name, int n, long mib, double raw, double pack, double derived, bool ok) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  int local_ok = ok ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&local_ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (me != 0) return;
  std::printf("| %s | %d | %ld | %.2f | %.2f (%+.0f%%) | %.2f (%+.0f%%) | %s |\n", name, n, mib,
              raw * 1e3, pack * 1e3, 100 * (pack - raw) / raw, derived * 1e3,
              100 * (derived - raw) / raw, all_ok ? "yes" : "NO");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  long mib = 64;
  int reps = 9;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mib") mib = std::atol(argv[++i]);
    if (arg == "--reps") reps = std::atoi(argv[++i]);
  }
  // Freed buffers stay in the heap, as in reshard_bench.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  int me = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const long elements = mib * (1L << 20) / 4;
  long rows = 1;
  while (rows * rows < elements) rows *= 2;
  const long cols = elements / rows;
  if (rows % n != 0 || cols % n != 0) {
    if (me == 0) std::fprintf(stderr, "layout_bench: %d ranks do not divide [%ld, %ld]\n", n, rows, cols);
    MPI_Finalize();
    return 1;
  }
  const long c = cols / n, r = rows / n;
  if (me == 0) {
    std::printf("layout_bench: %d ranks, float32 [%ld, %ld] (%ld MiB), median of %d, ms\n\n", n,
                rows, cols, mib, reps);
    std::printf("| transition | ranks | MiB | raw | raw + pack | derived datatypes | same result |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
  }

  {  // S(1) -> R: all-gather along dim 1.
    std::vector<float> local(rows * c), scratch(rows * cols), packed(rows * cols), derived(rows * cols);
    for (long i = 0; i < rows * c; ++i) local[i] = static_cast<float>(me * rows * c + i);
    MPI_Datatype column, chunk;
    MPI_Type_vector(static_cast<int>(rows), static_cast<int>(c), static_cast<int>(cols), MPI_FLOAT, &column);
    MPI_Type_create_resized(column, 0, c * static_cast<MPI_Aint>(sizeof(float)), &chunk);
    MPI_Type_commit(&chunk);
    const int count = static_cast<int>(rows * c);
    const double raw = TimeIt([&] {
      MPI_Allgather(local.data(), count, MPI_FLOAT, scratch.data(), count, MPI_FLOAT, MPI_COMM_WORLD);
    }, reps);
    const double pack = TimeIt([&] {
      MPI_Allgather(local.data(), count, MPI_FLOAT, scratch.data(), count, MPI_FLOAT, MPI_COMM_WORLD);
      for (int q = 0; q < n; ++q) {
        for (long i = 0; i < rows; ++i) {
          std::memcpy(&packed[i * cols + q * c], &scratch[(q * rows + i) * c], c * sizeof(float));
        }
      }
    }, reps);
    const double typed = TimeIt([&] {
      MPI_Allgather(local.data(), count, MPI_FLOAT, derived.data(), 1, chunk, MPI_COMM_WORLD);
    }, reps);
    Row("S(1) -> R (all_gather dim 1)", n, mib, raw, pack, typed, packed == derived);
    MPI_Type_free(&chunk);
    MPI_Type_free(&column);
  }

  {  // S(0) -> S(1): all-to-all; the piece for peer q is rows [r] x cols [q*c, (q+1)*c).
    std::vector<float> local(r * cols), send(r * cols), recv(rows * c), packed(rows * c), derived(rows * c);
    for (long i = 0; i < r * cols; ++i) local[i] = static_cast<float>(me * r * cols + i);
    MPI_Datatype piece;
    MPI_Type_vector(static_cast<int>(r), static_cast<int>(c), static_cast<int>(cols), MPI_FLOAT, &piece);
    MPI_Type_commit(&piece);
    const int count = static_cast<int>(r * c);
    const double raw = TimeIt([&] {
      MPI_Alltoall(local.data(), count, MPI_FLOAT, recv.data(), count, MPI_FLOAT, MPI_COMM_WORLD);
    }, reps);
    const double pack = TimeIt([&] {
      for (int q = 0; q < n; ++q) {
        for (long i = 0; i < r; ++i) {
          std::memcpy(&send[(q * r + i) * c], &local[i * cols + q * c], c * sizeof(float));
        }
      }
      MPI_Alltoall(send.data(), count, MPI_FLOAT, packed.data(), count, MPI_FLOAT, MPI_COMM_WORLD);
    }, reps);
    std::vector<int> send_counts(n, 1), recv_counts(n, count), send_displs(n), recv_displs(n);
    std::vector<MPI_Datatype> send_types(n, piece), recv_types(n, MPI_FLOAT);
    for (int q = 0; q < n; ++q) {
      send_displs[q] = static_cast<int>(q * c * sizeof(float));
      recv_displs[q] = static_cast<int>(q * count * sizeof(float));
    }
    const double typed = TimeIt([&] {
      MPI_Alltoallw(local.data(), send_counts.data(), send_displs.data(), send_types.data(),
                    derived.data(), recv_counts.data(), recv_displs.data(), recv_types.data(),
                    MPI_COMM_WORLD);
    }, reps);
    Row("S(0) -> S(1) (all_to_all)", n, mib, raw, pack, typed, packed == derived);
    MPI_Type_free(&piece);
  }
  MPI_Finalize();
  return 0;
}
