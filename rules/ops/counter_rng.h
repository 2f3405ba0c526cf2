// The counter-based uniform that defines dropout's mask (docs/OPS.md, dropout), bernoulli's
// and fused_dropout_add's draws, and poisson's count (PoissonCount, below).
//
// Element e of a tensor is kept iff Uniform(seed, i) >= p, where i is e's linear
// (row-major) index in the GLOBAL tensor. Uniform is a pure function of (seed, index),
// with no state and no order: a rank computes the numbers of its own elements from their
// global indices, so every sharding of a tensor draws the same number for the same
// element, and a parallel run drops the same elements as one device.
//
// This header is part of dropout's contract, not shared arithmetic: the op is defined by
// this function, as softmax is defined by exp, so the float64 reference and the kernels
// both call it (a kernel with its own generator would compute another op). Changing it
// changes every dropout mask (and the numeric goldens, which pin it).
//
// The generator is splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom
// number generators", 2014) read at position `index` of the stream whose state starts
// at Mix(seed): draw i is Mix(Mix(seed) + (i + 1) * golden gamma). splitmix64's stream
// passes BigCrush, and reading it at any position costs two mixes.
#pragma once

#include <cmath>
#include <cstdint>

namespace spmd::counter_rng {

inline constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;  // 2^64 / golden ratio, odd

// splitmix64's output function: a bijection on 64-bit words.
constexpr uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// One step of the splitmix64 generator from state x: the output for state x + gamma.
constexpr uint64_t SplitMix64(uint64_t x) { return Mix(x + kGamma); }

// The 64 random bits of draw `index` for `seed` (unsigned arithmetic: it wraps by design).
constexpr uint64_t Bits(uint64_t seed, uint64_t index) {
  return Mix(Mix(seed) + (index + 1) * kGamma);
}

// A uniform in [0, 1): the top 53 bits as k * 2^-53, exact in a double. A negative seed
// is its two's-complement word.
constexpr double Uniform(int64_t seed, int64_t index) {
  return static_cast<double>(Bits(static_cast<uint64_t>(seed), static_cast<uint64_t>(index)) >> 11) *
         0x1.0p-53;
}

// poisson's draw (docs/OPS.md, poisson): the count k of a Poisson(rate) variable whose
// cumulative probability first exceeds the uniform u, by inversion from k = 0 upward in
// float64: p = exp(-rate), cdf = p; while u >= cdf: k += 1, p *= rate / k, and stop when
// adding p no longer moves cdf (the tail below 2^-53 of it), else cdf += p. Part of the op's
// contract, as Uniform is of dropout's: the reference and the kernels call it, and the
// numeric goldens pin it with their own implementation. It takes rate in [0, kMaxPoissonRate]
// (exp(-rate) stays a normal double; the loop runs about rate + a few sqrt(rate) times).
inline constexpr double kMaxPoissonRate = 700.0;
inline double PoissonCount(double rate, double u) {
  double p = std::exp(-rate);
  double cdf = p;
  int64_t k = 0;
  while (u >= cdf) {
    ++k;
    p *= rate / static_cast<double>(k);
    const double next = cdf + p;
    if (next == cdf) break;
    cdf = next;
  }
  return static_cast<double>(k);
}

}  // namespace spmd::counter_rng
