#include "train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

// xxHash from the system package (libxxhash-dev), header-only: nothing to link.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "rules/model/error.h"
#include "rules/model/layout.h"
#include "train/device.h"

namespace spmd::train {

using runtime::Communicator;
using runtime::DistTensor;
namespace fs = std::filesystem;

namespace {

constexpr const char* kManifest = "MANIFEST";
constexpr const char* kMagic = "spmdkit-checkpoint";
// Bounds on what a manifest may claim, so that a hostile one cannot ask for unbounded
// memory or time before the files are looked at.
constexpr int64_t kMaxManifestBytes = int64_t{64} << 20;
constexpr int64_t kMaxCount = int64_t{1} << 22;  // parameters, shards
constexpr size_t kMaxRank = 16;                  // dimensions of a tensor
constexpr int64_t kMaxDim = int64_t{1} << 48;

std::mutex fault_mutex;
std::function<int(int64_t, const std::string&)> write_fault;

[[noreturn]] void Fail(const std::string& message) { ThrowInvalid("checkpoint", message); }

std::string Hex(uint64_t h) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h));
  return text;
}

uint64_t Hash(const void* data, size_t size) { return XXH3_64bits(data, size); }

std::string Join(const std::vector<int64_t>& v, char sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? std::string(1, sep) : "") + std::to_string(v[i]);
  return out.empty() ? "-" : out;
}

std::string StepName(int64_t step) {
  char text[32];
  std::snprintf(text, sizeof(text), "step-%08lld", static_cast<long long>(step));
  return text;
}

// The step of a checkpoint directory's name `step-<digits>`, or nothing.
std::optional<int64_t> StepOf(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() < 6 || name.size() > 5 + 18) return std::nullopt;
  int64_t step = 0;
  const char* first = name.data() + 5;
  const char* last = name.data() + name.size();
  auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last || step < 0 || !std::isdigit(static_cast<unsigned char>(*first))) {
    return std::nullopt;
  }
  return step;
}

std::string Errno(int error) { return std::strerror(error); }

// ---- Durable writes ---------------------------------------------------------------------

// Writes `size` bytes to a new file `path`, fsyncs and closes it, checking each call.
void WriteDurably(const std::string& path, const void* data, size_t size, int64_t rank) {
  int injected = 0;
  {
    std::lock_guard<std::mutex> lock(fault_mutex);
    if (write_fault) injected = write_fault(rank, path);
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Fail("cannot create " + path + ": " + Errno(errno));
  auto fail = [&](const std::string& what, int error) {
    ::close(fd);
    Fail("cannot " + what + " " + path + ": " + Errno(error));
  };
  if (injected != 0) fail("write", injected);
  const char* p = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write", n < 0 ? errno : ENOSPC);
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("fsync", errno);
  if (::close(fd) != 0) Fail("cannot close " + path + ": " + Errno(errno));
}

void FsyncDir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) Fail("cannot open directory " + path + ": " + Errno(errno));
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) Fail("cannot fsync directory " + path + ": " + Errno(error));
}

// ---- Agreement over the mesh ------------------------------------------------------------

// Every rank of `group` learns whether any failed (`error` non-empty on it) and, if so, the
// message of the lowest failing rank followed by " (rank R". Returns that text or "".
std::string Agree(const std::string& error, int64_t rank, const runtime::Group& group,
                  Communicator& comm) {
  int64_t first = error.empty() ? INT64_MAX : rank;
  HostAllReduce(&first, 1, ReduceOp::kMin, group, comm);
  if (first == INT64_MAX) return "";
  constexpr int64_t kWords = 96;  // 768 bytes of message
  std::vector<int64_t> words(kWords, 0);
  if (rank == first) std::memcpy(words.data(), error.data(), std::min(error.size(), sizeof(int64_t) * kWords - 1));
  HostBroadcast(words.data(), kWords, first, group, comm);
  std::string text(reinterpret_cast<const char*>(words.data()), sizeof(int64_t) * kWords);
  text.resize(std::strlen(text.c_str()));
  return text + " (rank " + std::to_string(first);
}

// Runs `body`, returning its error's message ("" when it succeeded).
template <typename Body>
std::string Try(Body&& body) {
  try {
    body();
  } catch (const SpmdError& e) {
    // Drop our own "checkpoint: " prefix: Agree's caller adds it back once.
    const std::string what = e.what();
    return e.field() == "checkpoint" ? what.substr(std::strlen("checkpoint: ")) : what;
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// ---- Save -------------------------------------------------------------------------------

// Whether this rank writes its shard of `t`: the replica at coordinate 0 of every axis the
// tensor is not sharded on.
bool Owner(const DistTensor& t) {
  if (!t.has_local()) return false;
  const std::vector<int64_t>& coord = *t.coordinate();
  for (int axis = 0; axis < t.mesh().ndim(); ++axis) {
    bool shards = false;
    for (const auto& dim : t.dist_attr().dims) {
      for (int a : dim) shards = shards || a == axis;
    }
    if (!shards && coord[axis] != 0) return false;
  }
  return true;
}

double Element(const kernels::Tensor& t, int64_t i) {
  return t.dtype() == DType::kFloat64 ? t.data<double>()[i] : static_cast<double>(t.data<float>()[i]);
}

// Writes this rank's shard of `t` (if it owns it) into `dir`; appends its manifest line.
void WriteShard(const DistTensor& t, const std::string& name, const std::string& dir, int64_t rank,
                std::string* lines) {
  if (t.dist_attr().IsPartial()) Fail(name + " is partial; reduce it first");
  if (!Owner(t)) return;
  const kernels::Tensor local = ToHostTensor(t.local());  // t.local() itself on the host
  const std::vector<int64_t> offset = t.local_offset();
  const std::string file = name + "@" + Join(offset, '_') + ".bin";
  std::vector<double> values(local.numel());
  for (int64_t i = 0; i < local.numel(); ++i) {
    values[i] = Element(local, i);
    if (!std::isfinite(values[i])) {
      Fail(name + " holds a non-finite value (" + std::to_string(values[i]) + ") at local element " +
           std::to_string(i) + "; not saved");
    }
  }
  const size_t bytes = values.size() * sizeof(double);
  WriteDurably(dir + "/" + file, values.data(), bytes, rank);
  *lines += "shard " + name + " " + Join(offset, ',') + " " + Join(local.shape(), ',') + " " +
            std::to_string(bytes) + " " + Hex(Hash(values.data(), bytes)) + " " + file + "\n";
}

// Every rank's `lines`, concatenated in group order, on every rank of `group`.
std::string GatherText(const std::string& lines, const runtime::Group& group, Communicator& comm) {
  std::vector<int64_t> counts(group.size(), 1), words(group.size());
  const int64_t mine = static_cast<int64_t>((lines.size() + 8) / 8);  // >= 1 word, NUL-padded
  HostAllGather(&mine, words.data(), counts, group, comm);
  std::vector<int64_t> packed(mine, 0);
  std::memcpy(packed.data(), lines.data(), lines.size());
  int64_t total = 0;
  for (int64_t w : words) total += w;
  std::vector<int64_t> all(total);
  HostAllGather(packed.data(), all.data(), words, group, comm);
  std::string out;
  int64_t at = 0;
  for (int64_t w : words) {
    const char* p = reinterpret_cast<const char*>(all.data() + at);
    out.append(p, strnlen(p, static_cast<size_t>(w) * 8));
    at += w;
  }
  return out;
}

// Moves `from` to `to`, atomically replacing a directory already at `to` (renameat2's
// RENAME_EXCHANGE, then the old one is deleted); where the filesystem cannot exchange,
// the old one is moved aside first.
void RenameIntoPlace(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) == 0) return;
  const int error = errno;
  if (error != EEXIST && error != ENOTEMPTY) Fail("cannot rename " + from + " to " + to + ": " + Errno(error));
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    std::error_code ec;
    fs::remove_all(from, ec);  // now the old checkpoint
    return;
  }
  const std::string aside = from + ".old";
  if (::rename(to.c_str(), aside.c_str()) != 0 || ::rename(from.c_str(), to.c_str()) != 0) {
    Fail("cannot replace " + to + " with " + from + ": " + Errno(errno));
  }
  std::error_code ec;
  fs::remove_all(aside, ec);
}

// The checkpoints under `dir`, oldest first.
std::vector<std::pair<int64_t, std::string>> Checkpoints(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) Fail("cannot read " + dir + ": " + ec.message());
  std::vector<std::pair<int64_t, std::string>> found;
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> step = StepOf(name);
    if (step && entry.is_directory(ec)) found.emplace_back(*step, dir + "/" + name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string Manifest(Trainer& trainer, int64_t step, const std::string& shard_lines, int64_t shards) {
  const auto& params = trainer.model().params();
  std::string text = std::string(kMagic) + " " + std::to_string(kCheckpointFormatVersion) + "\n";
  text += "step " + std::to_string(step) + "\n";
  text += "layout " + trainer.model().layout().ToString() + "\n";
  text += "params " + std::to_string(params.size()) + "\n";
  for (size_t i = 0; i < params.size(); ++i) {
    const DistTensor& v = params[i].value.value();
    text += "param " + params[i].name + " " + std::string(ToString(v.dtype())) + " " + Join(v.shape(), ',') +
            " " + std::to_string(trainer.optimizer().step(i)) + "\n";
  }
  text += "shards " + std::to_string(shards) + "\n" + shard_lines;
  text += "checksum " + Hex(Hash(text.data(), text.size())) + "\n";
  return text;
}

// ---- Load -------------------------------------------------------------------------------

struct ShardEntry {
  std::vector<int64_t> offset, local;
  int64_t bytes = 0;
  uint64_t hash = 0;
  std::string file;
};

struct ParamEntry {
  std::string name;
  DType dtype = DType::kFloat64;
  std::vector<int64_t> shape;
  int64_t adam_step = 0;
};

struct ManifestData {
  int64_t step = 0;
  std::vector<ParamEntry> params;
  std::map<std::string, std::vector<ShardEntry>> shards;  // tensor -> its shards
};

bool NameOk(const std::string& name) {
  if (name.empty() || name.size() > 255 || name[0] == '.') return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' && c != '@' && c != ',') {
      return false;
    }
  }
  return true;
}

class ManifestParser {
 public:
  ManifestParser(std::string path, const std::string& text) : path_(std::move(path)) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) lines_.push_back(line);
  }

  ManifestData Parse() {
    ManifestData m;
    std::vector<std::string> w = Words(2);
    if (w[0] != kMagic) Error("not a spmdkit checkpoint manifest");
    const int64_t version = Int(w[1], 0, INT64_MAX);
    if (version != kCheckpointFormatVersion) {
      Error("format version " + std::to_string(version) + " is not " + std::to_string(kCheckpointFormatVersion));
    }
    m.step = Int(Keyed("step", 2)[1], 0, INT64_MAX);
    if (Next().rfind("layout ", 0) != 0) Error("expected 'layout <description>'");
    ++at_;
    const int64_t params = Int(Keyed("params", 2)[1], 0, kMaxCount);
    std::set<std::string> names;
    for (int64_t i = 0; i < params; ++i) {
      w = Keyed("param", 5);
      ParamEntry p;
      p.name = Name(w[1]);
      std::optional<DType> dtype = ParseDType(w[2]);
      if (!dtype || !IsFloating(*dtype)) Error("'" + w[2] + "' is not a floating dtype");
      p.dtype = *dtype;
      p.shape = List(w[3], 0, kMaxDim);
      p.adam_step = Int(w[4], 0, INT64_MAX);
      if (!names.insert(p.name).second) Error("parameter " + p.name + " is listed twice");
      m.params.push_back(std::move(p));
    }
    const int64_t shards = Int(Keyed("shards", 2)[1], 0, kMaxCount);
    std::set<std::string> files;
    for (int64_t i = 0; i < shards; ++i) {
      w = Keyed("shard", 7);
      ShardEntry s;
      s.offset = List(w[2], INT64_MIN, INT64_MAX);
      s.local = List(w[3], INT64_MIN, INT64_MAX);
      s.bytes = Int(w[4], 0, INT64_MAX);
      if (w[5].size() != 16) Error("'" + w[5] + "' is not a 16-digit hex checksum");
      auto [end, ec] = std::from_chars(w[5].data(), w[5].data() + 16, s.hash, 16);
      if (ec != std::errc() || end != w[5].data() + 16) Error("'" + w[5] + "' is not a 16-digit hex checksum");
      s.file = Name(w[6]);
      if (s.file == kManifest || !files.insert(s.file).second) Error("file " + s.file + " is listed twice");
      m.shards[Name(w[1])].push_back(std::move(s));
    }
    if (Next().rfind("checksum ", 0) != 0 || at_ + 1 != lines_.size()) {
      Error("expected the checksum line to end the manifest");
    }
    return m;
  }

 private:
  [[noreturn]] void Error(const std::string& message) const {
    Fail(path_ + ":" + std::to_string(at_ + 1) + ": " + message);
  }
  const std::string& Next() const {
    if (at_ >= lines_.size()) Error("the manifest ends early");
    return lines_[at_];
  }
  // The next line's words, exactly `count` of them.
  std::vector<std::string> Words(size_t count) {
    const std::string& line = Next();
    std::vector<std::string> words;
    size_t start = 0;
    while (start <= line.size() && words.size() <= count) {
      const size_t end = std::min(line.find(' ', start), line.size());
      words.push_back(line.substr(start, end - start));
      if (words.back().empty()) Error("an empty field (two spaces, or a space at an end)");
      start = end + 1;
    }
    if (words.size() != count) Error("expected " + std::to_string(count) + " fields");
    ++at_;
    return words;
  }
  std::vector<std::string> Keyed(const std::string& key, size_t count) {
    if (Next().rfind(key + " ", 0) != 0) Error("expected a '" + key + "' line");
    return Words(count);
  }
  int64_t Int(const std::string& text, int64_t lo, int64_t hi) const {
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value < lo || value > hi) {
      Error("'" + text + "' is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return value;
  }
  std::vector<int64_t> List(const std::string& text, int64_t lo, int64_t hi) const {
    std::vector<int64_t> out;
    if (text == "-") return out;
    size_t start = 0;
    while (start <= text.size()) {
      if (out.size() >= kMaxRank) Error("'" + text + "' has more than " + std::to_string(kMaxRank) + " dimensions");
      const size_t end = std::min(text.find(',', start), text.size());
      out.push_back(Int(text.substr(start, end - start), lo, hi));
      start = end + 1;
    }
    return out;
  }
  std::string Name(const std::string& text) const {
    if (!NameOk(text)) Error("'" + text + "' is not a plain name ([A-Za-z0-9._@,-], not starting with '.')");
    return text;
  }

  std::string path_;
  std::vector<std::string> lines_;
  size_t at_ = 0;
};

std::string ReadSmallFile(const std::string& path, int64_t limit) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) Fail("cannot read " + path + ": " + ec.message());
  if (size > static_cast<uintmax_t>(limit)) Fail(path + " is " + std::to_string(size) + " bytes; at most " + std::to_string(limit));
  std::ifstream in(path, std::ios::binary);
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (!in || in.peek() != std::char_traits<char>::eof()) Fail("cannot read " + path + " (it changed while read)");
  return text;
}

ManifestData ReadManifest(const std::string& checkpoint) {
  const std::string path = checkpoint + "/" + kManifest;
  const std::string text = ReadSmallFile(path, kMaxManifestBytes);
  // The last line is `checksum <hex>` over every byte before it.
  const size_t last = text.size() >= 2 ? text.rfind('\n', text.size() - 2) : std::string::npos;
  if (text.empty() || text.back() != '\n' || last == std::string::npos ||
      text.compare(last + 1, 9, "checksum ") != 0) {
    Fail(path + ": the manifest does not end in its checksum line (cut short?)");
  }
  const std::string stored = text.substr(last + 10, text.size() - last - 11);
  const std::string actual = Hex(Hash(text.data(), last + 1));
  if (stored != actual) {
    Fail(path + ": checksum " + actual + " of the manifest is not the recorded " + stored +
         " (edited or damaged)");
  }
  ManifestData m = ManifestParser(path, text).Parse();
  const std::optional<int64_t> named = StepOf(fs::path(checkpoint).filename().string());
  if (named && *named != m.step) {
    Fail(path + ": step " + std::to_string(m.step) + " is not the directory's step " + std::to_string(*named));
  }
  return m;
}

// a + b, or nothing on overflow.
std::optional<int64_t> Add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The global value of `name` (as float64) assembled from its shards, each checked.
std::vector<double> Assemble(const std::string& checkpoint, const std::string& name,
                             const std::vector<int64_t>& shape, const ManifestData& m) {
  auto found = m.shards.find(name);
  if (found == m.shards.end()) Fail("no shard of " + name + " in the manifest");
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;  // the model's own shape: no overflow
  std::vector<double> global(numel, 0.0);
  std::vector<bool> covered(numel, false);
  for (const ShardEntry& s : found->second) {
    const std::string file = checkpoint + "/" + s.file;
    if (s.offset.size() != shape.size() || s.local.size() != shape.size()) {
      Fail(file + ": the shard of " + name + " has " + std::to_string(s.offset.size()) + "-d offset and " +
           std::to_string(s.local.size()) + "-d shape; the tensor has " + std::to_string(shape.size()) + " dimensions");
    }
    int64_t count = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      const std::optional<int64_t> end = Add(s.offset[d], s.local[d]);
      if (s.offset[d] < 0 || s.local[d] < 0 || !end || *end > shape[d]) {
        Fail(file + ": the shard at offset [" + Join(s.offset, ',') + "] of shape [" + Join(s.local, ',') +
             "] lies outside " + name + " [" + Join(shape, ',') + "]");
      }
      count *= s.local[d];  // <= numel
    }
    if (s.bytes != count * static_cast<int64_t>(sizeof(double))) {
      Fail(file + ": " + std::to_string(s.bytes) + " bytes recorded for " + std::to_string(count) + " float64 values");
    }
    std::error_code ec;
    const uintmax_t size = fs::file_size(file, ec);
    if (ec) Fail("cannot read " + file + ": " + ec.message());
    if (size != static_cast<uintmax_t>(s.bytes)) {
      Fail(file + " is " + std::to_string(size) + " bytes; the manifest says " + std::to_string(s.bytes) + " (cut short?)");
    }
    std::vector<double> values(count);
    std::ifstream in(file, std::ios::binary);
    in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(s.bytes));
    if (!in) Fail("cannot read " + file);
    const uint64_t hash = Hash(values.data(), static_cast<size_t>(s.bytes));
    if (hash != s.hash) {
      Fail(file + ": checksum " + Hex(hash) + " is not the recorded " + Hex(s.hash) + " (damaged or swapped)");
    }
    // Row-major walk over the shard's box.
    std::vector<int64_t> index(shape.size(), 0);
    for (int64_t k = 0; k < count; ++k) {
      if (!std::isfinite(values[k])) {
        Fail(name + " in " + file + " holds a non-finite value (" + std::to_string(values[k]) + ") at element " +
             std::to_string(k));
      }
      int64_t flat = 0;
      for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + s.offset[d] + index[d];
      if (covered[flat]) Fail(file + " overlaps another shard of " + name);
      covered[flat] = true;
      global[flat] = values[k];
      for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
        if (++index[d] < s.local[d]) break;
        index[d] = 0;
      }
    }
  }
  for (bool c : covered) {
    if (!c) Fail("the shards of " + name + " do not cover it");
  }
  return global;
}

// The first difference between the checkpoint's parameter set and the model's, or "".
std::string ParamSetDifference(const ManifestData& m, const std::vector<NamedParam>& params) {
  std::map<std::string, const NamedParam*> model;
  for (const NamedParam& p : params) model[p.name] = &p;
  std::set<std::string> saved;
  for (const ParamEntry& p : m.params) {
    saved.insert(p.name);
    auto it = model.find(p.name);
    if (it == model.end()) return "parameter " + p.name + " in the checkpoint is not in the model";
    const DistTensor& v = it->second->value.value();
    if (v.shape() != p.shape) {
      return "parameter " + p.name + " has shape [" + Join(p.shape, ',') + "] in the checkpoint; the model's is [" +
             Join(v.shape(), ',') + "]";
    }
    if (v.dtype() != p.dtype) {
      return "parameter " + p.name + " is " + std::string(ToString(p.dtype)) + " in the checkpoint; the model's is " +
             std::string(ToString(v.dtype()));
    }
  }
  for (const NamedParam& p : params) {
    if (!saved.count(p.name)) return "parameter " + p.name + " of the model is not in the checkpoint";
  }
  std::set<std::string> tensors;
  for (const ParamEntry& p : m.params) tensors.insert({p.name, p.name + ".adam_m", p.name + ".adam_v"});
  for (const auto& [tensor, shards] : m.shards) {
    if (!tensors.count(tensor)) return "tensor " + tensor + " in the checkpoint is no parameter's or its state's";
  }
  return "";
}

}  // namespace

void SetCheckpointWriteFaultForTesting(std::function<int(int64_t, const std::string&)> fault) {
  std::lock_guard<std::mutex> lock(fault_mutex);
  write_fault = std::move(fault);
}

std::string LatestCheckpoint(const std::string& dir) {
  const auto found = Checkpoints(dir);
  return found.empty() ? "" : found.back().second;
}

std::string SaveCheckpoint(Trainer& trainer, const std::string& dir, const SaveOptions& options,
                           Communicator& comm) {
  if (options.step < 0) ThrowInvalid("options.step", "a negative step");
  if (options.keep < 0) ThrowInvalid("options.keep", "a negative count");
  const runtime::Group group = trainer.model().layout().mesh().process_ids();
  const int64_t rank = comm.rank();
  const bool root = rank == group[0];
  const std::string name = StepName(options.step);
  const std::string target = dir + "/" + name;
  auto fail = [&](const std::string& agreed) {
    Fail(agreed + ", saving step " + std::to_string(options.step) + "; the checkpoints in " + dir + " are unchanged)");
  };
  // 1. The first rank makes a fresh temporary directory beside the target.
  int64_t nonce = 0;
  std::string error;
  if (root) {
    error = Try([&] {
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) Fail("cannot create " + dir + ": " + ec.message());
      fs::directory_iterator it(dir, ec);
      if (ec) Fail("cannot read " + dir + ": " + ec.message());
      for (const auto& entry : it) {  // a crashed save's leftovers
        if (entry.path().filename().string().rfind(".tmp-step-", 0) == 0) fs::remove_all(entry.path(), ec);
      }
      nonce = static_cast<int64_t>(std::random_device{}() & 0x7fffffff);
      const std::string tmp = dir + "/.tmp-" + name + "-" + std::to_string(nonce);
      if (!fs::create_directory(tmp, ec) || ec) Fail("cannot create " + tmp + ": " + ec.message());
    });
  }
  if (const std::string agreed = Agree(error, rank, group, comm); !agreed.empty()) fail(agreed);
  HostBroadcast(&nonce, 1, group[0], group, comm);
  const std::string tmp = dir + "/.tmp-" + name + "-" + std::to_string(nonce);
  // 2. Every rank writes its shards durably.
  std::string lines;
  error = Try([&] {
    const auto& params = trainer.model().params();
    for (size_t i = 0; i < params.size(); ++i) {
      WriteShard(params[i].value.value(), params[i].name, tmp, rank, &lines);
      WriteShard(trainer.optimizer().first_moment(i), params[i].name + ".adam_m", tmp, rank, &lines);
      WriteShard(trainer.optimizer().second_moment(i), params[i].name + ".adam_v", tmp, rank, &lines);
    }
    FsyncDir(tmp);
  });
  std::string agreed = Agree(error, rank, group, comm);
  if (!agreed.empty()) {
    std::error_code ec;
    if (root) fs::remove_all(tmp, ec);
    fail(agreed);
  }
  const std::string all_lines = GatherText(lines, group, comm);
  // 3. The first rank writes the manifest last and renames the directory into place.
  if (root) {
    error = Try([&] {
      const int64_t shards = std::count(all_lines.begin(), all_lines.end(), '\n');
      const std::string manifest = Manifest(trainer, options.step, all_lines, shards);
      WriteDurably(tmp + "/" + kManifest, manifest.data(), manifest.size(), rank);
      FsyncDir(tmp);
      RenameIntoPlace(tmp, target);
      FsyncDir(dir);
    });
    if (!error.empty()) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
  }
  agreed = Agree(error, rank, group, comm);
  if (!agreed.empty()) fail(agreed);
  // 4. Only now, older checkpoints beyond `keep` go (best effort: a leftover older
  // checkpoint costs space, not correctness).
  if (root && options.keep > 0) {
    std::error_code ec;
    std::vector<std::pair<int64_t, std::string>> found;
    try {
      found = Checkpoints(dir);
    } catch (const SpmdError& e) {
      std::fprintf(stderr, "checkpoint: warning: %s; older checkpoints not pruned\n", e.what());
    }
    for (size_t i = 0; i + static_cast<size_t>(options.keep) < found.size(); ++i) {
      if (found[i].second == target) continue;
      fs::remove_all(found[i].second, ec);
      if (ec) std::fprintf(stderr, "checkpoint: warning: cannot delete %s: %s\n", found[i].second.c_str(), ec.message().c_str());
    }
  }
  return target;
}

int64_t LoadCheckpoint(Trainer& trainer, const std::string& dir, Communicator& comm) {
  const Layout& layout = trainer.model().layout();
  const runtime::Group group = layout.mesh().process_ids();
  const auto& params = trainer.model().params();
  // 1. Read and check everything; nothing changes yet.
  ManifestData m;
  std::vector<std::array<std::vector<double>, 3>> values(params.size());
  const std::string error = Try([&] {
    std::error_code ec;
    const std::string checkpoint = fs::exists(dir + "/" + kManifest, ec) ? dir : LatestCheckpoint(dir);
    if (checkpoint.empty()) Fail(dir + " holds no checkpoint (no step-* directory, no " + kManifest + ")");
    m = ReadManifest(checkpoint);
    const std::string difference = ParamSetDifference(m, params);
    if (!difference.empty()) Fail(difference);
    for (size_t i = 0; i < params.size(); ++i) {
      const Shape shape = params[i].value.value().shape();
      values[i][0] = Assemble(checkpoint, params[i].name, shape, m);
      values[i][1] = Assemble(checkpoint, params[i].name + ".adam_m", shape, m);
      values[i][2] = Assemble(checkpoint, params[i].name + ".adam_v", shape, m);
    }
  });
  if (const std::string agreed = Agree(error, comm.rank(), group, comm); !agreed.empty()) {
    Fail(agreed + ", loading " + dir + "; the trainer is unchanged)");
  }
  std::map<std::string, int64_t> adam_steps;
  for (const ParamEntry& p : m.params) adam_steps[p.name] = p.adam_step;
  // 2. Lay every tensor out as this trainer's layout says.
  for (size_t i = 0; i < params.size(); ++i) {
    // Copies: SetValue below replaces the value these would refer to.
    const Shape shape = params[i].value.value().shape();
    const DType dtype = params[i].value.value().dtype();
    const DistAttr attr = params[i].value.value().dist_attr();
    auto place = [&](const std::vector<double>& global, const DistAttr& to) {
      kernels::Tensor t = dtype == DType::kFloat64
                              ? kernels::Tensor::FromVector(shape, global)
                              : kernels::Tensor::FromVector(shape, std::vector<float>(global.begin(), global.end()));
      return OnDevice(DistTensor::ShardTensor(t, layout.mesh(), to, comm.rank()), comm.device(), comm.stream());
    };
    params[i].value.SetValue(place(values[i][0], attr));
    const DistAttr state = layout.State(params[i].role, static_cast<int>(shape.size()));
    trainer.optimizer().Restore(i, place(values[i][1], state), place(values[i][2], state),
                                adam_steps.at(params[i].name), comm);
  }
  return m.step;
}

}  // namespace spmd::train
