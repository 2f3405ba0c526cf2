// C += A . B for strided matrices: the one matrix-multiply routine under matmul, bmm,
// matmul_grad and einsum. Internal to kernels/cpu.
#pragma once

#include <cstdint>

namespace spmd::kernels::cpu::internal {

// A matrix view: element (i, j) at p[i * rs + j * cs]. Any strides (transposes, a stride
// of 0 for a broadcast row) are fine: blocks are packed before the inner kernel.
template <typename T>
struct MatrixView {
  const T* p;
  int64_t rs;
  int64_t cs;
};

// C[m, n] += A[m, k] . B[k, n], C element (i, j) at c[i * c_rs + j * c_cs]; with
// `overwrite`, C = A . B instead (C's old contents are not read: a fresh output needs no
// zero fill; k == 0 writes zeros). T is float or
// double; accumulation is in T (float32 accumulates in float). With OpenBLAS
// (SPMD_WITH_OPENBLAS, one BLAS thread per process) every call whose views BLAS can take
// (one unit stride each, no broadcast stride of 0, sizes within int) goes to
// cblas_sgemm/cblas_dgemm, transposes folded into the call; the rest, and every call
// without OpenBLAS, run the blocked kernel here: panels of B and A packed contiguously, a
// 4-row register-blocked inner kernel, each C element summing its terms in increasing k
// within one K block.
template <typename T>
void Gemm(int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b, T* c, int64_t c_rs,
          int64_t c_cs, bool overwrite = false);

extern template void Gemm<float>(int64_t, int64_t, int64_t, MatrixView<float>,
                                 MatrixView<float>, float*, int64_t, int64_t, bool);
extern template void Gemm<double>(int64_t, int64_t, int64_t, MatrixView<double>,
                                  MatrixView<double>, double*, int64_t, int64_t, bool);

}  // namespace spmd::kernels::cpu::internal
