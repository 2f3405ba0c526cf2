// Training data from a file: a token corpus, its held-out validation split, and batches
// drawn from it deterministically.
//
// Formats:
//   bytes   any file; each byte is a token (vocabulary 256): text trains a byte-level model.
//   uint16  a binary token file, little-endian uint16 per token, as nanoGPT's prepare.py
//           writes train.bin / val.bin (GPT-2's 50257 tokens fit).
// FormatForPath picks uint16 for a name ending in ".bin", bytes otherwise.
//
// The file is memory-mapped read-only, never copied: a multi-gigabyte token file costs
// address space, not memory. The last `val_fraction` of its tokens (rounded down) are the
// validation split, the rest the training split; a window of sequence + 1 tokens (the
// inputs and their next-token labels) never crosses from one to the other.
//
// Batches: row r of step s starts at an offset drawn uniformly over the split's windows by
// a counter-based hash of (seed, split, s, r) (rules/ops/counter_rng.h), so every rank builds
// the same global batch with no communication and keeps its shard (Layout::Tokens), and a
// run resumed at step s draws what the uninterrupted run drew.
//
// Example: a 10-byte file "abcdefghij", val_fraction 0.2, sequence 3: training split
// "abcdefgh" (windows of 4 start at 0..4), validation split "ij" (too short: Open throws).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kernels/tensor.h"

namespace spmd::train {

enum class DataFormat { kBytes, kUint16 };
std::string_view ToString(DataFormat format);  // "bytes", "uint16"
// "bytes" or "uint16"; InvalidArgument (`field`) otherwise.
DataFormat ParseDataFormat(const std::string& text, const std::string& field = "format");
// uint16 for a path ending in ".bin", bytes otherwise.
DataFormat FormatForPath(const std::string& path);

enum class Split { kTrain, kValidation };

class TokenCorpus {
 public:
  // Maps `path` and scans its tokens. InvalidArgument naming `field` (message starting
  // with the path) when the file cannot be opened or is not a regular file, is empty,
  // holds an odd number of bytes as uint16, or when the training split (or, with
  // val_fraction > 0, the validation split) has fewer than sequence + 1 tokens;
  // InvalidArgument ("val_fraction") outside [0, 1), ("sequence") below 1.
  static TokenCorpus Open(const std::string& path, DataFormat format, double val_fraction,
                          int64_t sequence, const std::string& field = "data");

  const std::string& path() const { return path_; }
  DataFormat format() const { return format_; }
  int64_t size() const { return size_; }  // tokens in the file
  int64_t split_begin(Split split) const { return split == Split::kTrain ? 0 : train_size_; }
  int64_t split_size(Split split) const {
    return split == Split::kTrain ? train_size_ : size_ - train_size_;
  }
  int64_t max_token() const { return max_token_; }  // the largest token in the file
  int64_t token(int64_t index) const;               // 0 <= index < size()

  // int64 [rows, sequence] tokens and labels of `step`: row r is the window starting at
  // the offset drawn from (seed, split, step, r), labels the tokens one further.
  // InvalidArgument ("sequence") when the split has fewer than sequence + 1 tokens or
  // sequence < 1, ("rows") when rows < 1.
  void Batch(Split split, int64_t rows, int64_t sequence, uint64_t seed, int64_t step,
             kernels::Tensor* tokens, kernels::Tensor* labels) const;

 private:
  struct Mapping;
  std::shared_ptr<const Mapping> mapping_;
  std::string path_;
  DataFormat format_ = DataFormat::kBytes;
  int64_t size_ = 0, train_size_ = 0, max_token_ = 0;
};

}  // namespace spmd::train
