// rules/model/half.h in CUDA device code: compiled by nvcc in CUDA builds (that it compiles is
// the first check). On a machine with a GPU it converts every 2-byte pattern to float and
// back, and a sweep of float32 values to both types, on the device, and compares with the
// host conversions and with CUDA's own round-to-nearest intrinsics (__float2bfloat16_rn,
// __float2half_rn). Without a GPU it reports a skip (ctest SKIP_RETURN_CODE 77).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "rules/model/half.h"

namespace {

__global__ void Convert(const float* in, int n, unsigned short* bf, unsigned short* fp,
                        unsigned short* bf_cuda, unsigned short* fp_cuda) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  bf[i] = spmd::FloatToBFloat16Bits(in[i]);
  fp[i] = spmd::FloatToFloat16Bits(in[i]);
  const __nv_bfloat16 b = __float2bfloat16_rn(in[i]);
  const __half h = __float2half_rn(in[i]);
  std::memcpy(&bf_cuda[i], &b, 2);
  std::memcpy(&fp_cuda[i], &h, 2);
}

__global__ void Widen(int n, float* from_bf, float* from_fp) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  from_bf[i] = spmd::BFloat16BitsToFloat(static_cast<unsigned short>(i));
  from_fp[i] = spmd::Float16BitsToFloat(static_cast<unsigned short>(i));
}

bool IsNanFloat(float f) { return f != f; }

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped (the header compiled for the device)\n");
    return 77;
  }
  // Every 2-byte pattern to float on the device == on the host, bit for bit.
  const int kPatterns = 65536;
  float *d_bf = nullptr, *d_fp = nullptr;
  cudaMalloc(&d_bf, kPatterns * sizeof(float));
  cudaMalloc(&d_fp, kPatterns * sizeof(float));
  Widen<<<kPatterns / 256, 256>>>(kPatterns, d_bf, d_fp);
  std::vector<float> bf(kPatterns), fp(kPatterns);
  cudaMemcpy(bf.data(), d_bf, kPatterns * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(fp.data(), d_fp, kPatterns * sizeof(float), cudaMemcpyDeviceToHost);
  int failures = 0;
  for (int i = 0; i < kPatterns; ++i) {
    const float hb = spmd::BFloat16BitsToFloat(static_cast<unsigned short>(i));
    const float hf = spmd::Float16BitsToFloat(static_cast<unsigned short>(i));
    if (std::memcmp(&hb, &bf[i], 4) != 0 || std::memcmp(&hf, &fp[i], 4) != 0) ++failures;
  }
  // float32 values: every 2^-k step pattern of 1 in 4099 bit patterns, all signs and exponents.
  std::vector<float> in;
  for (unsigned long long u = 0; u < (1ull << 32); u += 4099) {
    float f;
    const unsigned int bits = static_cast<unsigned int>(u);
    std::memcpy(&f, &bits, 4);
    in.push_back(f);
  }
  const int n = static_cast<int>(in.size());
  float* d_in = nullptr;
  unsigned short *d_out[4] = {};
  cudaMalloc(&d_in, n * sizeof(float));
  for (auto& p : d_out) cudaMalloc(&p, n * sizeof(unsigned short));
  cudaMemcpy(d_in, in.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  Convert<<<(n + 255) / 256, 256>>>(d_in, n, d_out[0], d_out[1], d_out[2], d_out[3]);
  std::vector<unsigned short> out[4];
  for (int k = 0; k < 4; ++k) {
    out[k].resize(n);
    cudaMemcpy(out[k].data(), d_out[k], n * sizeof(unsigned short), cudaMemcpyDeviceToHost);
  }
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  int nan_payloads = 0;
  for (int i = 0; i < n; ++i) {
    if (out[0][i] != spmd::FloatToBFloat16Bits(in[i]) || out[1][i] != spmd::FloatToFloat16Bits(in[i])) ++failures;
    if (IsNanFloat(in[i])) {  // CUDA may canonicalise NaN payloads: NaN for NaN is the contract
      const bool b = IsNanFloat(spmd::BFloat16BitsToFloat(out[2][i]));
      const bool h = IsNanFloat(spmd::Float16BitsToFloat(out[3][i]));
      if (!b || !h) ++failures;
      ++nan_payloads;
    } else if (out[0][i] != out[2][i] || out[1][i] != out[3][i]) {
      if (failures < 10) std::printf("%a: ours %04x %04x, CUDA %04x %04x\n", in[i], out[0][i], out[1][i], out[2][i], out[3][i]);
      ++failures;
    }
  }
  std::printf("%d patterns widened, %d floats narrowed (%d NaN), %d failures\n", kPatterns, n,
              nan_payloads, failures);
  return failures == 0 ? 0 : 1;
}
