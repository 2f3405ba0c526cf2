#include "train/data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "rules/ops/counter_rng.h"
#include "rules/model/error.h"

namespace spmd::train {

std::string_view ToString(DataFormat format) {
  return format == DataFormat::kUint16 ? "uint16" : "bytes";
}

DataFormat ParseDataFormat(const std::string& text, const std::string& field) {
  if (text == "bytes") return DataFormat::kBytes;
  if (text == "uint16") return DataFormat::kUint16;
  ThrowInvalid(field, "'" + text + "' is not bytes or uint16");
}

DataFormat FormatForPath(const std::string& path) {
  const std::string_view suffix = ".bin";
  return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0
             ? DataFormat::kUint16
             : DataFormat::kBytes;
}

namespace {

std::string Fraction(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

}  // namespace

// The read-only mapping of the whole file; unmapped with the last corpus that shares it.
struct TokenCorpus::Mapping {
  const unsigned char* bytes = nullptr;
  size_t length = 0;
  Mapping(const unsigned char* b, size_t n) : bytes(b), length(n) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (bytes != nullptr) ::munmap(const_cast<unsigned char*>(bytes), length);
  }
};

TokenCorpus TokenCorpus::Open(const std::string& path, DataFormat format, double val_fraction,
                              int64_t sequence, const std::string& field) {
  if (!(val_fraction >= 0 && val_fraction < 1)) {
    ThrowInvalid("val_fraction", Fraction(val_fraction) + " is not in [0, 1)");
  }
  if (sequence < 1) ThrowInvalid("sequence", "must be at least 1");
  const std::string name = "'" + path + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ThrowInvalid(field, name + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    ThrowInvalid(field, name + " is not a regular file");
  }
  const auto length = static_cast<size_t>(st.st_size);
  if (length == 0) {
    ::close(fd);
    ThrowInvalid(field, name + " is empty");
  }
  if (format == DataFormat::kUint16 && length % 2 != 0) {
    ::close(fd);
    ThrowInvalid(field, name + " has " + std::to_string(length) +
                            " bytes: not a whole number of uint16 tokens");
  }
  void* at = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (at == MAP_FAILED) ThrowInvalid(field, name + ": cannot map: " + std::strerror(map_errno));

  TokenCorpus corpus;
  corpus.mapping_ = std::make_shared<const Mapping>(static_cast<const unsigned char*>(at), length);
  corpus.path_ = path;
  corpus.format_ = format;
  corpus.size_ = static_cast<int64_t>(format == DataFormat::kUint16 ? length / 2 : length);
  const auto val = static_cast<int64_t>(std::floor(val_fraction * static_cast<double>(corpus.size_)));
  corpus.train_size_ = corpus.size_ - val;
  const int64_t window = sequence + 1;
  if (corpus.train_size_ < window) {
    ThrowInvalid(field, name + " has " + std::to_string(corpus.size_) + " tokens: its training split (" +
                            std::to_string(corpus.train_size_) + ") is too short for one sequence of " +
                            std::to_string(sequence) + " tokens and its label (" + std::to_string(window) +
                            " tokens)");
  }
  if (val_fraction > 0 && val < window) {
    ThrowInvalid(field, name + " has " + std::to_string(corpus.size_) + " tokens: its validation split (" +
                            std::to_string(val) + ", the last " + Fraction(val_fraction) +
                            ") is too short for one sequence of " + std::to_string(sequence) +
                            " tokens and its label (" + std::to_string(window) +
                            " tokens); raise the validation fraction or give a longer file");
  }
  int64_t most = 0;
  for (int64_t i = 0; i < corpus.size_; ++i) most = std::max(most, corpus.token(i));
  corpus.max_token_ = most;
  return corpus;
}

int64_t TokenCorpus::token(int64_t index) const {
  const unsigned char* b = mapping_->bytes;
  if (format_ == DataFormat::kBytes) return b[index];
  return static_cast<int64_t>(b[2 * index]) | (static_cast<int64_t>(b[2 * index + 1]) << 8);  // little-endian
}

void TokenCorpus::Batch(Split split, int64_t rows, int64_t sequence, uint64_t seed, int64_t step,
                        kernels::Tensor* tokens, kernels::Tensor* labels) const {
  if (rows < 1) ThrowInvalid("rows", "must be at least 1");
  const int64_t begin = split_begin(split), size = split_size(split);
  if (sequence < 1 || size < sequence + 1) {
    ThrowInvalid("sequence", std::to_string(sequence) + " needs a split of at least sequence + 1 tokens; the " +
                                 std::string(split == Split::kTrain ? "training" : "validation") +
                                 " split has " + std::to_string(size));
  }
  const auto windows = static_cast<uint64_t>(size - sequence);  // starts begin .. begin + size - sequence - 1
  using counter_rng::SplitMix64;
  const uint64_t stream = SplitMix64(SplitMix64(seed) + (split == Split::kTrain ? 0x7472u : 0x76616cu));
  const uint64_t per_step = SplitMix64(stream + static_cast<uint64_t>(step));
  std::vector<int64_t> t(rows * sequence), l(rows * sequence);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start = begin + static_cast<int64_t>(SplitMix64(per_step + static_cast<uint64_t>(r)) % windows);
    for (int64_t i = 0; i < sequence; ++i) {
      t[r * sequence + i] = token(start + i);
      l[r * sequence + i] = token(start + i + 1);
    }
  }
  *tokens = kernels::Tensor::FromVector({rows, sequence}, t);
  *labels = kernels::Tensor::FromVector({rows, sequence}, l);
}

}  // namespace spmd::train
