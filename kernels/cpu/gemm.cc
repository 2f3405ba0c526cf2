#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <vector>

#if SPMD_WITH_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace spmd::kernels::cpu::internal {
namespace {

#if SPMD_WITH_OPENBLAS
// How a view is handed to BLAS: row-major with leading dimension ld, transposed or not;
// nothing for views BLAS cannot take (a broadcast stride of 0, neither stride 1).
struct BlasView {
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};

std::optional<BlasView> AsBlas(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if (cs == 1 && rs >= std::max<int64_t>(cols, 1)) return BlasView{CblasNoTrans, rs};
  if (rs == 1 && cs >= std::max<int64_t>(rows, 1)) return BlasView{CblasTrans, cs};
  if (rows == 1 && cs == 1) return BlasView{CblasNoTrans, std::max<int64_t>(cols, 1)};
  if (cols == 1 && rs == 1) return BlasView{CblasTrans, std::max<int64_t>(rows, 1)};
  return std::nullopt;
}

// One BLAS thread per process: ranks are processes (or threads) of their own, and
// OpenBLAS's own threads would oversubscribe the cores.
void OneBlasThread() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// beta 0 overwrites C (BLAS does not read C then, so NaN garbage in a fresh buffer is
// harmless); beta 1 accumulates.
void BlasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
              const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
              bool overwrite) {
  cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), overwrite ? 0.0f : 1.0f, c,
              static_cast<int>(ldc));
}
void BlasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
              const double* a, int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc,
              bool overwrite) {
  cblas_dgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), overwrite ? 0.0 : 1.0, c,
              static_cast<int>(ldc));
}

// C += A . B through BLAS when every view allows it and the sizes fit its int; false
// otherwise (the blocked kernel below runs instead).
template <typename T>
bool TryBlas(int64_t m, int64_t n, int64_t k, const MatrixView<T>& a, const MatrixView<T>& b,
             T* c, int64_t c_rs, int64_t c_cs, bool overwrite) {
  constexpr int64_t kIntMax = 0x7fffffff;
  for (int64_t v : {m, n, k, a.rs, a.cs, b.rs, b.cs, c_rs, c_cs}) {
    if (v < 0 || v > kIntMax) return false;
  }
  std::optional<BlasView> av = AsBlas(m, k, a.rs, a.cs);
  std::optional<BlasView> bv = AsBlas(k, n, b.rs, b.cs);
  if (!av || !bv) return false;
  OneBlasThread();
  if (c_cs == 1 && c_rs >= n) {
    BlasGemm(av->trans, bv->trans, m, n, k, a.p, av->ld, b.p, bv->ld, c, c_rs, overwrite);
    return true;
  }
  if (c_rs == 1 && c_cs >= m) {
    // C^T = B^T . A^T, row-major with leading dimension c_cs.
    auto flip = [](CBLAS_TRANSPOSE t) { return t == CblasNoTrans ? CblasTrans : CblasNoTrans; };
    BlasGemm(flip(bv->trans), flip(av->trans), n, m, k, b.p, bv->ld, a.p, av->ld, c, c_cs,
             overwrite);
    return true;
  }
  return false;
}
#endif

// Register block: MR rows by NR columns of C live in accumulators across the K loop.
// NR * sizeof(T) = 32 bytes: two SSE registers (one AVX register) per row.
constexpr int64_t kMr = 4;
template <typename T>
constexpr int64_t kNr = 32 / sizeof(T);
// Cache blocks: a KC x NC panel of B (L2/L3), an MC x KC panel of A (L2).
constexpr int64_t kKc = 256;
constexpr int64_t kMc = 128;
constexpr int64_t kNc = 2048;

// Packs B[p0:p0+kc, j0:j0+nc] as column panels of NR: panel j holds kc rows of NR values
// (zero-padded past nc).
template <typename T>
void PackB(const MatrixView<T>& b, int64_t p0, int64_t kc, int64_t j0, int64_t nc, T* out) {
  constexpr int64_t nr = kNr<T>;
  for (int64_t jp = 0; jp < nc; jp += nr) {
    const int64_t w = std::min(nr, nc - jp);
    for (int64_t p = 0; p < kc; ++p) {
      const T* row = b.p + (p0 + p) * b.rs + (j0 + jp) * b.cs;
      T* dst = out + p * nr;
      if (b.cs == 1) {
        for (int64_t j = 0; j < w; ++j) dst[j] = row[j];
      } else {
        for (int64_t j = 0; j < w; ++j) dst[j] = row[j * b.cs];
      }
      for (int64_t j = w; j < nr; ++j) dst[j] = T(0);
    }
    out += kc * nr;
  }
}

// Packs A[i0:i0+mc, p0:p0+kc] as row panels of MR: panel i holds kc columns of MR values.
template <typename T>
void PackA(const MatrixView<T>& a, int64_t i0, int64_t mc, int64_t p0, int64_t kc, T* out) {
  for (int64_t ip = 0; ip < mc; ip += kMr) {
    const int64_t h = std::min(kMr, mc - ip);
    for (int64_t p = 0; p < kc; ++p) {
      const T* col = a.p + (i0 + ip) * a.rs + (p0 + p) * a.cs;
      T* dst = out + p * kMr;
      for (int64_t i = 0; i < h; ++i) dst[i] = col[i * a.rs];
      for (int64_t i = h; i < kMr; ++i) dst[i] = T(0);
    }
    out += kc * kMr;
  }
}

// acc[MR][NR] = sum over p of a[p][r] * b[p][j]; then C += acc (the h x w valid part).
template <typename T>
void MicroKernel(int64_t kc, const T* __restrict a, const T* __restrict b, T* c, int64_t c_rs,
                 int64_t c_cs, int64_t h, int64_t w) {
  constexpr int64_t nr = kNr<T>;
  T acc[kMr][nr] = {};
  for (int64_t p = 0; p < kc; ++p) {
    const T* ap = a + p * kMr;
    const T* bp = b + p * nr;
    for (int64_t r = 0; r < kMr; ++r) {
      const T av = ap[r];
      for (int64_t j = 0; j < nr; ++j) acc[r][j] += av * bp[j];
    }
  }
  if (c_cs == 1) {
    for (int64_t r = 0; r < h; ++r) {
      T* row = c + r * c_rs;
      for (int64_t j = 0; j < w; ++j) row[j] += acc[r][j];
    }
  } else {
    for (int64_t r = 0; r < h; ++r) {
      for (int64_t j = 0; j < w; ++j) c[r * c_rs + j * c_cs] += acc[r][j];
    }
  }
}

}  // namespace

template <typename T>
void Gemm(int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b, T* c, int64_t c_rs,
          int64_t c_cs, bool overwrite) {
  if (m <= 0 || n <= 0) return;
#if SPMD_WITH_OPENBLAS
  if (k > 0 && TryBlas(m, n, k, a, b, c, c_rs, c_cs, overwrite)) return;
#endif
  if (overwrite) {  // the blocked kernel accumulates: start from zeros
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * c_rs + j * c_cs] = T(0);
    }
  }
  if (k <= 0) return;
  constexpr int64_t nr = kNr<T>;
  const int64_t nc_max = std::min(kNc, (n + nr - 1) / nr * nr);
  const int64_t kc_max = std::min(kKc, k);
  const int64_t mc_max = std::min(kMc, (m + kMr - 1) / kMr * kMr);
  std::vector<T> packed_b(static_cast<size_t>(kc_max * nc_max));
  std::vector<T> packed_a(static_cast<size_t>(mc_max * kc_max));
  for (int64_t j0 = 0; j0 < n; j0 += kNc) {
    const int64_t nc = std::min(kNc, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kKc) {
      const int64_t kc = std::min(kKc, k - p0);
      PackB(b, p0, kc, j0, nc, packed_b.data());
      for (int64_t i0 = 0; i0 < m; i0 += kMc) {
        const int64_t mc = std::min(kMc, m - i0);
        PackA(a, i0, mc, p0, kc, packed_a.data());
        for (int64_t jp = 0; jp < nc; jp += nr) {
          const T* bp = packed_b.data() + (jp / nr) * kc * nr;
          for (int64_t ip = 0; ip < mc; ip += kMr) {
            const T* ap = packed_a.data() + (ip / kMr) * kc * kMr;
            T* cp = c + (i0 + ip) * c_rs + (j0 + jp) * c_cs;
            MicroKernel(kc, ap, bp, cp, c_rs, c_cs, std::min(kMr, mc - ip), std::min(nr, nc - jp));
          }
        }
      }
    }
  }
}

template void Gemm<float>(int64_t, int64_t, int64_t, MatrixView<float>, MatrixView<float>,
                          float*, int64_t, int64_t, bool);
template void Gemm<double>(int64_t, int64_t, int64_t, MatrixView<double>, MatrixView<double>,
                           double*, int64_t, int64_t, bool);

}  // namespace spmd::kernels::cpu::internal
