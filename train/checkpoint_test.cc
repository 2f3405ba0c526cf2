// Crash-safe checkpoints (train/checkpoint.h) on thread ranks: a checkpoint saved on one
// generated layout loads on another with the same values and step; a resumed run equals
// an uninterrupted one; every damaged, swapped, edited, mismatched or hostile checkpoint
// is a typed error naming the file or tensor on every rank (never a crash); a failed save
// on any rank is an error on every rank and leaves the previous checkpoint loadable.
#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <regex>
#include <string>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "rules/model/error.h"
#include "runtime/exec/dist_tensor.h"
#include "runtime/comm/thread_communicator.h"
#include "train/gpt.h"
#include "train/layout.h"

namespace spmd::train {
namespace {

namespace fs = std::filesystem;
using runtime::DistTensor;

GptConfig Config(int64_t layers = 1) {
  GptConfig c;
  c.layers = layers;
  c.width = 12;
  c.heads = 3;   // uneven over tp = 2
  c.vocab = 13;  // uneven over tp = 2
  c.sequence = 5;
  c.mlp_ratio = 2;
  return c;
}
const BatchSpec kBatch{4, 5, 11};

struct Job {
  GptConfig config = Config();
  std::string mesh = "dp=1";
  Strategy strategy;
  std::string load;  // loaded first when set; training then starts at its step
  int64_t steps = 0;  // trained after the load
  std::string save;   // saved after training when set
  int keep = 0;
};

struct RankResult {
  std::string error;  // the SpmdError a checkpoint call threw on this rank
  int64_t step = 0;   // the steps trained, after the load
  std::vector<std::vector<double>> params;
};

// Runs `job` on thread ranks. A checkpoint error ends a rank's job with its message
// recorded; a rank that hangs or disagrees makes RunRanks throw (a test failure).
std::vector<RankResult> RunJob(const Job& job) {
  const Mesh mesh = ParseNamedMesh(job.mesh);
  std::vector<RankResult> results(mesh.size());
  runtime::CommOptions options;
  options.timeout_s = 30;
  runtime::RunRanks(
      mesh.size(),
      [&](runtime::Communicator& comm) {
        RankResult& r = results[comm.rank()];
        Trainer trainer(job.config, Layout(mesh, job.strategy), TrainOptions{}, comm);
        try {
          if (!job.load.empty()) r.step = LoadCheckpoint(trainer, job.load, comm);
          for (int64_t s = 0; s < job.steps; ++s, ++r.step) trainer.Step(kBatch, r.step, comm);
          if (!job.save.empty()) SaveCheckpoint(trainer, job.save, {r.step, job.keep}, comm);
        } catch (const SpmdError& e) {
          r.error = e.what();
          return;
        }
        r.params = trainer.GatherParams(comm);
      },
      options);
  return results;
}

// The one error every rank reported (each rank must report one).
std::string ErrorOnEveryRank(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_NE(results[r].error, "") << "rank " << r << " reported no error";
    EXPECT_EQ(results[r].error.rfind("checkpoint: ", 0), 0u) << results[r].error;
  }
  return results.empty() ? "" : results[0].error;
}

std::string LoadError(const std::string& dir, const GptConfig& config = Config(), const std::string& mesh = "dp=1") {
  Job job;
  job.config = config;
  job.mesh = mesh;
  job.load = dir;
  return ErrorOnEveryRank(RunJob(job));
}

std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "spmd_ckpt_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(dir);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}
std::string Hex(uint64_t h) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h));
  return text;
}

// Recomputes every shard's checksum and the manifest's own, as a forger would: what is
// left to catch is what the checksums cannot (a NaN, a hostile offset).
void Reseal(const std::string& checkpoint, std::string manifest) {
  std::string out;
  std::istringstream in(manifest);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("checksum ", 0) == 0) break;
    if (line.rfind("shard ", 0) == 0) {
      std::vector<std::string> w;
      std::istringstream words(line);
      for (std::string word; words >> word;) w.push_back(word);
      if (w.size() == 7 && fs::exists(checkpoint + "/" + w[6])) {
        const std::string bytes = ReadFile(checkpoint + "/" + w[6]);
        w[5] = Hex(XXH3_64bits(bytes.data(), bytes.size()));
        line = w[0];
        for (size_t i = 1; i < w.size(); ++i) line += " " + w[i];
      }
    }
    out += line + "\n";
  }
  out += "checksum " + Hex(XXH3_64bits(out.data(), out.size())) + "\n";
  WriteFile(checkpoint + "/MANIFEST", out);
}

std::vector<std::string> ShardFiles(const std::string& checkpoint) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(checkpoint)) {
    if (e.path().extension() == ".bin") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

struct LayoutCase {
  const char* mesh;
  Strategy strategy;
};
const LayoutCase kLayouts[] = {
    {"dp=1", {0, false}},      {"dp=2", {0, false}},      {"dp=2", {1, false}},
    {"dp=2", {3, false}},      {"tp=2", {0, true}},       {"dp=2,tp=2", {1, true}},
    {"dp=4", {3, false}},      {"dp=3", {2, false}},      {"sp=2", {0, false}},
    {"dp=2,tp=2", {3, false}},
};

// Saved on one generated layout after k steps, loaded on another: the same parameter
// values (bit for bit) and step; one more step there equals one more step without the
// checkpoint (so the AdamW moments and step counts came back too).
RC_GTEST_PROP(Checkpoint, LoadsOnAnyLayoutWithTheSameValues, ()) {
  const LayoutCase from = *rc::gen::elementOf(std::vector<LayoutCase>(std::begin(kLayouts), std::end(kLayouts)));
  const LayoutCase to = *rc::gen::elementOf(std::vector<LayoutCase>(std::begin(kLayouts), std::end(kLayouts)));
  const int64_t k = *rc::gen::inRange<int64_t>(0, 3);
  const std::string dir = TempDir("prop");
  Job save;
  save.mesh = from.mesh;
  save.strategy = from.strategy;
  save.steps = k;
  save.save = dir;
  const std::vector<RankResult> saved = RunJob(save);
  RC_ASSERT(saved[0].error == "");
  Job load;
  load.mesh = to.mesh;
  load.strategy = to.strategy;
  load.load = dir;
  const std::vector<RankResult> loaded = RunJob(load);
  RC_ASSERT(loaded[0].error == "");
  RC_ASSERT(loaded[0].step == k);
  RC_ASSERT(loaded[0].params == saved[0].params);
  load.steps = 1;
  Job whole = save;
  whole.save = "";
  whole.steps = k + 1;
  const std::vector<RankResult> continued = RunJob(load), uninterrupted = RunJob(whole);
  for (size_t p = 0; p < uninterrupted[0].params.size(); ++p) {
    for (size_t e = 0; e < uninterrupted[0].params[p].size(); ++e) {
      RC_ASSERT(std::abs(continued[0].params[p][e] - uninterrupted[0].params[p][e]) <= 1e-9);
    }
  }
  fs::remove_all(dir);
}

// 2 steps, saved, resumed for 2 more on the same layout: exactly the 4-step run.
TEST(Checkpoint, ResumedRunEqualsUninterruptedRun) {
  const std::string dir = TempDir("resume");
  Job first{Config(), "dp=2,tp=2", Strategy{1, true}, "", 2, dir};
  ASSERT_EQ(RunJob(first)[0].error, "");
  ASSERT_TRUE(fs::exists(dir + "/step-00000002/MANIFEST"));
  Job second{Config(), "dp=2,tp=2", Strategy{1, true}, dir, 2};
  Job whole{Config(), "dp=2,tp=2", Strategy{1, true}, "", 4};
  const auto resumed = RunJob(second);
  ASSERT_EQ(resumed[0].error, "");
  EXPECT_EQ(resumed[0].step, 4);
  EXPECT_EQ(resumed[0].params, RunJob(whole)[0].params);
  fs::remove_all(dir);
}

// Flip one byte in each shard file in turn: each load is refused naming that file.
TEST(Checkpoint, AFlippedByteInAnyShardIsRefusedNamingTheFile) {
  const std::string dir = TempDir("flip");
  ASSERT_EQ(RunJob({Config(), "dp=2,tp=2", Strategy{1, true}, "", 1, dir})[0].error, "");
  const std::string checkpoint = dir + "/step-00000001";
  const std::vector<std::string> files = ShardFiles(checkpoint);
  ASSERT_GT(files.size(), 40u);
  std::mt19937 rng(7);
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    const std::string good = ReadFile(file);
    std::string bad = good;
    const size_t at = rng() % bad.size();
    bad[at] = static_cast<char>(bad[at] ^ (1 << (rng() % 8)));
    WriteFile(file, bad);
    const std::string error = LoadError(dir);
    EXPECT_NE(error.find(file + ": checksum"), std::string::npos) << error;
    WriteFile(file, good);
  }
  // And on every rank of a multi-rank load.
  WriteFile(files[0], ReadFile(files[0]) + "x");
  const std::string error = LoadError(dir, Config(), "dp=2,tp=2");
  EXPECT_NE(error.find(files[0]), std::string::npos) << error;
  fs::remove_all(dir);
}

TEST(Checkpoint, TruncatedSwappedAndEditedCheckpointsAreRefused) {
  const std::string dir = TempDir("damage");
  ASSERT_EQ(RunJob({Config(), "dp=2", Strategy{3, false}, "", 2, dir})[0].error, "");
  const std::string checkpoint = dir + "/step-00000002";
  const std::vector<std::string> files = ShardFiles(checkpoint);
  // A file cut short.
  const std::string good = ReadFile(files[0]);
  fs::resize_file(files[0], good.size() / 2);
  EXPECT_NE(LoadError(dir).find(files[0] + " is " + std::to_string(good.size() / 2) + " bytes"), std::string::npos)
      << LoadError(dir);
  WriteFile(files[0], good);
  EXPECT_EQ(RunJob({Config(), "dp=1", Strategy{}, dir})[0].error, "") << "restored, it loads";
  fs::remove(files[0]);
  EXPECT_NE(LoadError(dir).find("cannot read " + files[0]), std::string::npos) << LoadError(dir);
  WriteFile(files[0], good);
  // Two shard files of the same size swapped.
  std::string a, b;
  for (size_t i = 0; i < files.size() && b.empty(); ++i) {
    for (size_t j = i + 1; j < files.size() && b.empty(); ++j) {
      if (fs::file_size(files[i]) == fs::file_size(files[j]) && ReadFile(files[i]) != ReadFile(files[j])) {
        a = files[i];
        b = files[j];
      }
    }
  }
  ASSERT_FALSE(b.empty());
  const std::string va = ReadFile(a), vb = ReadFile(b);
  WriteFile(a, vb);
  WriteFile(b, va);
  EXPECT_NE(LoadError(dir).find("checksum"), std::string::npos) << LoadError(dir);
  WriteFile(a, va);
  WriteFile(b, vb);
  // The step edited in the manifest: its checksum no longer matches.
  const std::string manifest = ReadFile(checkpoint + "/MANIFEST");
  const std::string edited = std::regex_replace(manifest, std::regex("\nstep 2\n"), "\nstep 3\n");
  ASSERT_NE(edited, manifest);
  WriteFile(checkpoint + "/MANIFEST", edited);
  EXPECT_NE(LoadError(dir).find("MANIFEST: checksum"), std::string::npos) << LoadError(dir);
  // Edited and resealed: the directory's name still says step 2.
  Reseal(checkpoint, edited);
  EXPECT_NE(LoadError(dir).find("step 3 is not the directory's step 2"), std::string::npos) << LoadError(dir);
  // The manifest cut short.
  WriteFile(checkpoint + "/MANIFEST", manifest.substr(0, manifest.size() / 2));
  EXPECT_NE(LoadError(dir).find("does not end in its checksum line"), std::string::npos) << LoadError(dir);
  // A NaN weight, resealed so that only the value check can see it.
  WriteFile(checkpoint + "/MANIFEST", manifest);
  std::string nan_file;
  for (const std::string& f : files) {
    if (f.find("/embedding@") != std::string::npos) nan_file = f;
  }
  ASSERT_FALSE(nan_file.empty());
  std::string values = ReadFile(nan_file);
  const double nan = std::nan("");
  std::memcpy(values.data() + 8, &nan, 8);
  WriteFile(nan_file, values);
  Reseal(checkpoint, manifest);
  EXPECT_NE(LoadError(dir).find("embedding in " + nan_file + " holds a non-finite value"), std::string::npos)
      << LoadError(dir);
  fs::remove_all(dir);
}

TEST(Checkpoint, AParameterSetMismatchNamesTheFirstDifference) {
  const std::string dir = TempDir("params");
  ASSERT_EQ(RunJob({Config(2), "dp=2", Strategy{}, "", 1, dir})[0].error, "");
  // Two layers into one: the extra layer is named, nothing is ignored.
  EXPECT_NE(LoadError(dir, Config(1)).find("checkpoint: parameter blocks.1.ln1.scale in the checkpoint is not in the model"),
            std::string::npos) << LoadError(dir, Config(1));
  // Into three: the missing layer is named.
  EXPECT_NE(LoadError(dir, Config(3)).find("parameter blocks.2.ln1.scale of the model is not in the checkpoint"),
            std::string::npos) << LoadError(dir, Config(3));
  GptConfig wider = Config(2);
  wider.width = 6;
  wider.heads = 2;
  EXPECT_NE(LoadError(dir, wider).find("parameter embedding has shape [13,12] in the checkpoint; the model's is [13,6]"),
            std::string::npos) << LoadError(dir, wider);
  GptConfig single = Config(2);
  single.dtype = DType::kFloat32;
  EXPECT_NE(LoadError(dir, single).find("is float64 in the checkpoint; the model's is float32"), std::string::npos)
      << LoadError(dir, single);
  GptConfig rms = Config(2);
  rms.rms_norm = true;  // no LayerNorm biases
  EXPECT_NE(LoadError(dir, rms).find("parameter blocks.0.ln1.bias in the checkpoint is not in the model"),
            std::string::npos) << LoadError(dir, rms);
  fs::remove_all(dir);
}

// Hostile manifests (resealed, so that the checksum does not stop them): every offset,
// size and count is checked without overflow; each is a typed error, never a crash.
TEST(Checkpoint, HostileManifestsAreTypedErrors) {
  const std::string dir = TempDir("hostile");
  ASSERT_EQ(RunJob({Config(), "dp=2", Strategy{3, false}, "", 1, dir})[0].error, "");
  const std::string checkpoint = dir + "/step-00000001";
  const std::string manifest = ReadFile(checkpoint + "/MANIFEST");
  // The first shard line of embedding.adam_m: "shard embedding.adam_m 0,0 7,12 672 <hash> <file>"
  const std::regex shard("\nshard embedding\\.adam_m 0,0 ([0-9]+),12 ([0-9]+) ");
  ASSERT_TRUE(std::regex_search(manifest, shard));
  const struct {
    std::string from, to, expect;
  } edits[] = {
      {"shard embedding.adam_m 0,0 ", "shard embedding.adam_m 9223372036854775807,0 ", "lies outside embedding.adam_m"},
      {"shard embedding.adam_m 0,0 ", "shard embedding.adam_m 0,9223372036854775807 ", "lies outside"},
      {"shard embedding.adam_m 0,0 ", "shard embedding.adam_m 9223372036854775808,0 ", "is not an integer"},
      {"shard embedding.adam_m 0,0 ", "shard embedding.adam_m -1,0 ", "lies outside"},
      {"shard embedding.adam_m 0,0 7,12 ", "shard embedding.adam_m 0,0 9223372036854775807,12 ", "lies outside"},
      {"shard embedding.adam_m 0,0 7,12 ", "shard embedding.adam_m 0,0 7,-12 ", "lies outside"},
      {"shard embedding.adam_m 0,0 7,12 672 ", "shard embedding.adam_m 0,0 7,12 9223372036854775807 ", "bytes recorded"},
      {"shard embedding.adam_m 0,0 7,12 ", "shard embedding.adam_m 0,0,0 7,12,1 ", "3-d offset"},
      {"shard embedding.adam_m 0,0 7,12 ", "shard embedding.adam_m 0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 7,12 ", "more than 16"},
      {"shard embedding.adam_m 0,0 7,12 ", "shard embedding.adam_m 3,0 7,12 ", "overlaps"},
      {"shard embedding.adam_m ", "shard ../../etc/passwd ", "is not a plain name"},
      {"@0_0.bin\n", "@0_0.bin/../MANIFEST\n", "is not a plain name"},
      {"\nshards ", "\nshards 9", "expected a 'shard' line"},  // more shards than lines
      {"\nshards ", "\nshards 99999999999", "is not an integer in [0, 4194304]"},
      {"\nparams ", "\nparams 1", "expected a 'param' line"},
      {"\nparams ", "\nparams 99999999999", "is not an integer in [0, 4194304]"},
      {"spmdkit-checkpoint 1\n", "spmdkit-checkpoint 2\n", "format version 2 is not 1"},
      {"spmdkit-checkpoint 1\n", "safetensors 1\n", "not a spmdkit checkpoint"},
      {" float64 ", " int64 ", "is not a floating dtype"},
      {"\nparam embedding float64 13,12 ", "\nparam embedding float64 13,12,99999999999999999 ", "is not an integer"},
      {"\nparam embedding float64 13,12 ", "\nparam embedding float64 13,1 ", "has shape [13,1]"},
  };
  for (const auto& e : edits) {
    SCOPED_TRACE(e.to);
    const size_t at = manifest.find(e.from);
    ASSERT_NE(at, std::string::npos);
    std::string edited = manifest;
    edited.replace(at, e.from.size(), e.to);
    Reseal(checkpoint, edited);
    const std::string error = LoadError(dir);
    EXPECT_NE(error.find(e.expect), std::string::npos) << error;
  }
  // Random byte edits, resealed: a typed error or (if harmless) a load, never a crash.
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    std::string edited = manifest;
    for (int n = 0; n < 3; ++n) edited[rng() % (edited.size() - 30)] = "0123456789,- x\n9-"[rng() % 17];
    Reseal(checkpoint, edited);
    Job job;
    job.load = dir;
    const std::vector<RankResult> r = RunJob(job);
    if (!r[0].error.empty()) {
      EXPECT_EQ(r[0].error.rfind("checkpoint: ", 0), 0u) << r[0].error;
    }
  }
  fs::remove_all(dir);
}

// Leftovers of an older checkpoint format and of an earlier, larger save of the same step
// do not make a new save unloadable.
TEST(Checkpoint, LeftoversOfOlderCheckpointsDoNotBreakANewOne) {
  const std::string dir = TempDir("leftover");
  fs::create_directories(dir + "/.tmp-step-00000001-42");
  WriteFile(dir + "/rank3.txt", "shard embedding 13,12 0,0 4,12 embedding@0_0.bin\n");
  WriteFile(dir + "/embedding@0_0.bin", "junk");
  ASSERT_EQ(RunJob({Config(), "dp=2,tp=2", Strategy{3, false}, "", 1, dir})[0].error, "");
  EXPECT_FALSE(fs::exists(dir + "/.tmp-step-00000001-42")) << "a crashed save's directory is cleared";
  const auto two = RunJob({Config(), "dp=2", Strategy{}, "", 1, dir});  // the same step, fewer ranks
  ASSERT_EQ(two[0].error, "");
  const auto loaded = RunJob({Config(), "dp=1", Strategy{}, dir});
  ASSERT_EQ(loaded[0].error, "");
  EXPECT_EQ(loaded[0].params, two[0].params);
  // Only the 2-rank save's files are in the checkpoint now.
  for (const std::string& f : ShardFiles(dir + "/step-00000001")) {
    EXPECT_NE(ReadFile(dir + "/step-00000001/MANIFEST").find(fs::path(f).filename().string()), std::string::npos) << f;
  }
  fs::remove_all(dir);
}

// A write failure on any one rank (or of the manifest) is an error on every rank naming
// that rank, and leaves the previous checkpoint as the newest, loadable.
TEST(Checkpoint, AFailedSaveErrsOnEveryRankAndKeepsThePreviousCheckpoint) {
  const std::string dir = TempDir("failed");
  const Job first{Config(), "dp=2,tp=2", Strategy{1, true}, "", 2, dir};
  const auto saved = RunJob(first);
  ASSERT_EQ(saved[0].error, "");
  for (int failing = 0; failing < 5; ++failing) {  // ranks 0..3, then the manifest
    SCOPED_TRACE("failing " + std::to_string(failing));
    SetCheckpointWriteFaultForTesting([failing](int64_t rank, const std::string& path) {
      const bool manifest = path.size() > 9 && path.substr(path.size() - 9) == "/MANIFEST";
      return (failing == 4 ? manifest : rank == failing && path.find("blocks.0.mlp") != std::string::npos) ? ENOSPC : 0;
    });
    Job more = first;
    more.load = dir;
    const auto failed = RunJob(more);
    SetCheckpointWriteFaultForTesting({});
    const std::string error = ErrorOnEveryRank(failed);
    EXPECT_NE(error.find("No space left on device (rank " + std::to_string(failing == 4 ? 0 : failing)),
              std::string::npos) << error;
    EXPECT_NE(error.find("the checkpoints in " + dir + " are unchanged"), std::string::npos) << error;
    for (const auto& r : failed) EXPECT_EQ(r.error, error);
    EXPECT_EQ(LatestCheckpoint(dir), dir + "/step-00000002");
    std::vector<std::string> entries;
    for (const auto& e : fs::directory_iterator(dir)) entries.push_back(e.path().filename().string());
    EXPECT_EQ(entries, std::vector<std::string>{"step-00000002"}) << "no temporary left behind";
    const auto loaded = RunJob({Config(), "dp=1", Strategy{}, dir});
    ASSERT_EQ(loaded[0].error, "");
    EXPECT_EQ(loaded[0].step, 2);
    EXPECT_EQ(loaded[0].params, saved[0].params);
  }
  fs::remove_all(dir);
}

// A NaN in a parameter is not saved: an error naming it on every rank, nothing written.
TEST(Checkpoint, NonFiniteValuesAreNotSaved) {
  const std::string dir = TempDir("nan");
  const Mesh mesh = ParseNamedMesh("dp=2");
  std::vector<std::string> errors(2);
  runtime::RunRanks(2, [&](runtime::Communicator& comm) {
    Trainer trainer(Config(), Layout(mesh, Strategy{}), TrainOptions{}, comm);
    const NamedParam& p = trainer.model().params()[0];
    const DistTensor& v = p.value.value();
    int64_t numel = 1;
    for (int64_t d : v.shape()) numel *= d;
    std::vector<double> values(numel, 0.5);
    values[3] = INFINITY;
    p.value.SetValue(DistTensor::ShardTensor(kernels::Tensor::FromVector(v.shape(), values), mesh, v.dist_attr(),
                                             comm.rank()));
    try {
      SaveCheckpoint(trainer, dir, {1}, comm);
    } catch (const SpmdError& e) {
      errors[comm.rank()] = e.what();
    }
  });
  for (const std::string& e : errors) {
    EXPECT_EQ(e.find("checkpoint: embedding holds a non-finite value (inf)"), 0u) << e;
  }
  EXPECT_EQ(LatestCheckpoint(dir), "");
  fs::remove_all(dir);
}

TEST(Checkpoint, KeepsTheNewestK) {
  const std::string dir = TempDir("keep");
  Job job{Config(), "dp=2", Strategy{}, "", 1, dir, 2};
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(RunJob(job)[0].error, "");
    job.load = dir;
  }
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir)) entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"step-00000003", "step-00000004"}));
  EXPECT_EQ(LatestCheckpoint(dir), dir + "/step-00000004");
  EXPECT_NE(LoadError(dir + "/nothing-here").find("cannot read " + dir + "/nothing-here"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace spmd::train
