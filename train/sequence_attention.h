// Long-sequence attention: causal multi-head attention with the sequence sharded over one
// mesh axis (docs/LONG_SEQUENCE.md).
//
// q, k, v and the output are [B, S, H, Dh] (batch, sequence, heads, head dim; the layout
// gpt.cc has right after splitting the heads, before its transpose), all four with the
// same dist attr: the sequence dim sharded over exactly the mesh axis `axis` (uneven
// lengths included: the layout's own split, rules/model/layout.h), the head dim not sharded,
// nothing partial; the batch and the heads may be sharded over other axes (they are
// independent here). The ranks along `axis` (Mesh::GroupOf) cooperate; everything else is
// local. Two strategies:
//
//   Ulysses  an all-to-all turns the sequence-sharded q, k, v into head-sharded ones (the
//            whole sequence, 1/n of the local heads per rank), each rank runs plain
//            attention on its heads, and an all-to-all turns the output back. Needs the
//            local head count to be a multiple of n. Backward: the reverse all-to-alls
//            around the local attention backward.
//   Ring     q stays; the k/v blocks travel around the ring of n ranks point to point
//            (n - 1 steps), each rank folding every block into its queries' output with an
//            online softmax (running max and sum, rescaled when the max grows) and keeping
//            the log-sum-exp. Backward: the flash-attention backward from the saved
//            log-sum-exp, the k/v blocks travelling again with their dK/dV accumulators,
//            which one more step returns to their owners.
//   RingZigzag  the ring over the load-balanced causal split: the sequence is cut into 2n
//            chunks and the rank at position r holds chunks r and 2n-1-r. The tensors hold
//            the sequence in that order (ZigzagOrder; the caller permutes tokens once,
//            and positions, labels and anything else position-wise with them), so the
//            layout's plain split gives each rank its two chunks; S must be a multiple of 2n.
//
// The local arithmetic is registered ops run by runtime::Dispatch on the inputs' device
// (host, sim or CUDA tensors alike; nothing is copied to the host): block_attention folds
// a key/value block into the online-softmax state (out, lse), block_attention_grad gives
// one block pair's gradients (docs/OPS.md "Ring attention's block steps"), add sums them.
// Ulysses' all-to-alls are reshards (DistTensor::Reshard: the sequence axis moved from the
// sequence dim to the heads dim); the rings send and receive the tensors' device buffers
// with the Communicator, each step's block op running while the next block travels.
//
// Example (mesh "sp=4", q/k/v [2, 10, 4, 8] laid out [S(1)] on it):
//   Variable o = SequenceAttention(q, k, v, {SequenceStrategy::kUlysses, /*axis=*/0}, comm);
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/comm/communicator.h"
#include "train/autograd.h"

namespace spmd::train {

enum class SequenceStrategy { kUlysses, kRing, kRingZigzag };
std::string_view ToString(SequenceStrategy strategy);  // "ulysses", "ring", "ring_zigzag"

struct SequenceAttentionOptions {
  SequenceStrategy strategy = SequenceStrategy::kRing;
  int axis = 0;        // the mesh axis the sequence is sharded over
  bool causal = true;  // query i sees keys at global positions <= i
  double scale = 0;    // the scores' factor; 0: 1 / sqrt(Dh)
};

// softmax(scale * q k^T + causal mask) v per batch and head, recorded for Backward.
// Collective over the ranks along `axis`; ranks outside the mesh get an Absent output.
// Throws SpmdError(kInvalidArgument) naming the field: "q" / "k" / "v" (not rank 4, not
// float32/float64, shapes, meshes or dist attrs that differ), "q.dist_attr" (the
// sequence not sharded over exactly `axis`, the head dim sharded, a partial axis),
// "axis" (not a mesh axis), "heads" (Ulysses: the local head count not a multiple of
// the group size), "sequence" (zigzag: S not a multiple of 2n).
Variable SequenceAttention(const Variable& q, const Variable& k, const Variable& v,
                           const SequenceAttentionOptions& options, runtime::Communicator& comm);

// The same attention built from registered ops through autograd, as gpt.cc builds its
// default attention (transpose to [B, H, S, Dh], matmul, scale, an additive -1e9 causal
// mask, softmax, matmul, transpose back): the rules shard it by the inputs' layout, no
// strategy of its own. The reference the strategies are proven against. InvalidArgument
// ("q") when q is not rank 4.
Variable DenseAttention(const Variable& q, const Variable& k, const Variable& v, bool causal,
                        double scale, runtime::Communicator& comm);

// The zigzag order of a sequence of `length` over `n` ranks: entry i is the global
// position stored at index i (chunks 0, 2n-1, 1, 2n-2, ...). InvalidArgument ("sequence")
// when length is not a positive multiple of 2n, ("n") when n < 1.
std::vector<int64_t> ZigzagOrder(int64_t length, int64_t n);

}  // namespace spmd::train
