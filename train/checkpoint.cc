#include "train/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "rules/error.h"
#include "rules/layout.h"

namespace spmd::train {

using runtime::Communicator;
using runtime::DistTensor;

namespace {

std::string Join(const std::vector<int64_t>& v, char sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? std::string(1, sep) : "") + std::to_string(v[i]);
  return out.empty() ? "-" : out;
}

std::vector<int64_t> Split(const std::string& text, char sep, const std::string& where) {
  std::vector<int64_t> out;
  if (text == "-") return out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, sep)) {
    try {
      size_t used = 0;
      out.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      ThrowInvalid("checkpoint", where + ": '" + text + "' is not a list of integers");
    }
  }
  return out;
}

// Whether this rank writes its shard of a tensor laid out as `attr`: the replica at
// coordinate 0 of every axis the tensor is not sharded on.
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

struct Shard {
  std::vector<int64_t> shape, offset, local;
  std::string file;
};

void WriteShard(const DistTensor& t, const std::string& name, const std::string& dir,
                std::ofstream& index) {
  if (t.dist_attr().IsPartial()) ThrowInvalid("checkpoint", name + " is partial; reduce it first");
  if (!Owner(t)) return;
  const kernels::Tensor& local = t.local();
  const std::vector<int64_t> offset = t.local_offset();
  const std::string file = name + "@" + Join(offset, '_') + ".bin";
  std::vector<double> values(local.numel());
  for (int64_t i = 0; i < local.numel(); ++i) values[i] = Element(local, i);
  std::ofstream out(dir + "/" + file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(double)));
  if (!out) ThrowInvalid("checkpoint", "cannot write " + dir + "/" + file);
  index << "shard " << name << " " << Join(t.shape(), ',') << " " << Join(offset, ',') << " "
        << Join(local.shape(), ',') << " " << file << "\n";
}

// Every index in `dir`: tensor name -> its shards; parameter name -> step.
void ReadIndexes(const std::string& dir, std::map<std::string, std::vector<Shard>>* shards,
                 std::map<std::string, int64_t>* steps) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) ThrowInvalid("checkpoint", "cannot read " + dir + ": " + ec.message());
  int indexes = 0;
  for (const auto& entry : it) {
    const std::string file = entry.path().filename().string();
    if (file.rfind("rank", 0) != 0 || entry.path().extension() != ".txt") continue;
    ++indexes;
    std::ifstream in(entry.path());
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      const std::string where = file + ":" + std::to_string(number);
      std::istringstream words(line);
      std::string kind, name;
      words >> kind >> name;
      if (kind == "step") {
        std::string count;
        words >> count;
        const std::vector<int64_t> v = Split(count, ',', where);
        if (v.size() != 1) ThrowInvalid("checkpoint", where + ": a step line needs one count");
        (*steps)[name] = v[0];
      } else if (kind == "shard") {
        std::string shape, offset, local, shard_file;
        words >> shape >> offset >> local >> shard_file;
        if (shard_file.empty()) ThrowInvalid("checkpoint", where + ": a shard line has 6 fields");
        (*shards)[name].push_back({Split(shape, ',', where), Split(offset, ',', where),
                                   Split(local, ',', where), dir + "/" + shard_file});
      } else if (!kind.empty()) {
        ThrowInvalid("checkpoint", where + ": unknown line kind '" + kind + "'");
      }
    }
  }
  if (indexes == 0) ThrowInvalid("checkpoint", dir + " holds no rank*.txt index");
}

// The global value of `name` assembled from its shards, as `dtype`.
kernels::Tensor Assemble(const std::string& name, const std::vector<int64_t>& shape, DType dtype,
                         const std::map<std::string, std::vector<Shard>>& shards) {
  auto found = shards.find(name);
  if (found == shards.end()) ThrowInvalid("checkpoint", "no shard of " + name);
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  std::vector<double> global(numel, 0.0);
  std::vector<bool> covered(numel, false);
  for (const Shard& s : found->second) {
    if (s.shape != shape || s.offset.size() != shape.size() || s.local.size() != shape.size()) {
      ThrowInvalid("checkpoint", name + " in " + s.file + " has shape [" + Join(s.shape, ',') +
                                     "]; the model's is [" + Join(shape, ',') + "]");
    }
    int64_t count = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (s.offset[d] < 0 || s.local[d] < 0 || s.offset[d] + s.local[d] > shape[d]) {
        ThrowInvalid("checkpoint", s.file + ": the shard lies outside the tensor");
      }
      count *= s.local[d];
    }
    std::vector<double> values(count);
    std::ifstream in(s.file, std::ios::binary);
    in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(count * sizeof(double)));
    if (!in || in.peek() != std::char_traits<char>::eof()) {
      ThrowInvalid("checkpoint", s.file + " is missing or does not hold " + std::to_string(count) + " values");
    }
    // Row-major walk over the shard's box.
    std::vector<int64_t> index(shape.size(), 0);
    for (int64_t k = 0; k < count; ++k) {
      int64_t flat = 0;
      for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + s.offset[d] + index[d];
      if (covered[flat]) ThrowInvalid("checkpoint", s.file + " overlaps another shard of " + name);
      covered[flat] = true;
      global[flat] = values[k];
      for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
        if (++index[d] < s.local[d]) break;
        index[d] = 0;
      }
    }
  }
  for (bool c : covered) {
    if (!c) ThrowInvalid("checkpoint", "the shards of " + name + " do not cover it");
  }
  if (dtype == DType::kFloat64) return kernels::Tensor::FromVector(shape, global);
  return kernels::Tensor::FromVector(shape, std::vector<float>(global.begin(), global.end()));
}

}  // namespace

void SaveCheckpoint(Trainer& trainer, const std::string& dir, Communicator& comm) {
  const Mesh& mesh = trainer.model().layout().mesh();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) ThrowInvalid("checkpoint", "cannot create " + dir + ": " + ec.message());
  const std::string index_path = dir + "/rank" + std::to_string(comm.rank()) + ".txt";
  {
    std::ofstream index(index_path);
    if (!index) ThrowInvalid("checkpoint", "cannot write " + index_path);
    const auto& params = trainer.model().params();
    for (size_t i = 0; i < params.size(); ++i) {
      WriteShard(params[i].value.value(), params[i].name, dir, index);
      WriteShard(trainer.optimizer().first_moment(i), params[i].name + ".adam_m", dir, index);
      WriteShard(trainer.optimizer().second_moment(i), params[i].name + ".adam_v", dir, index);
      if (comm.rank() == mesh.process_ids()[0]) {
        index << "step " << params[i].name << " " << trainer.optimizer().step(i) << "\n";
      }
    }
    if (!index) ThrowInvalid("checkpoint", "cannot write " + index_path);
  }
  comm.Barrier(mesh.process_ids());
}

void LoadCheckpoint(Trainer& trainer, const std::string& dir, Communicator& comm) {
  std::map<std::string, std::vector<Shard>> shards;
  std::map<std::string, int64_t> steps;
  ReadIndexes(dir, &shards, &steps);
  const Layout& layout = trainer.model().layout();
  const auto& params = trainer.model().params();
  for (size_t i = 0; i < params.size(); ++i) {
    // Copies: SetValue below replaces the value this would refer to.
    const Shape shape = params[i].value.value().shape();
    const DType dtype = params[i].value.value().dtype();
    const DistAttr attr = params[i].value.value().dist_attr();
    const int rank = static_cast<int>(shape.size());
    auto place = [&](const std::string& name, const DistAttr& to) {
      return DistTensor::ShardTensor(Assemble(name, shape, dtype, shards), layout.mesh(), to,
                                     comm.rank());
    };
    params[i].value.SetValue(place(params[i].name, attr));
    const DistAttr state = layout.State(params[i].role, rank);
    auto step = steps.find(params[i].name);
    if (step == steps.end()) ThrowInvalid("checkpoint", "no step count of " + params[i].name);
    trainer.optimizer().Restore(i, place(params[i].name + ".adam_m", state),
                                place(params[i].name + ".adam_v", state), step->second, comm);
  }
}

}  // namespace spmd::train
