// Token corpora (train/data.h): decoding, the splits, batches drawn from (seed, step),
// typed errors for files that cannot be trained on, and a corpus trained on a 2-d layout
// like one process.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "rules/model/error.h"
#include "runtime/comm/thread_communicator.h"
#include "train/data.h"
#include "train/layout.h"
#include "train/trainer.h"

namespace spmd::train {
namespace {

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("spmd_data_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::string WriteUint16(const std::string& name, const std::vector<uint16_t>& tokens) {
    std::string bytes;
    for (uint16_t t : tokens) {
      bytes.push_back(static_cast<char>(t & 0xff));  // little-endian
      bytes.push_back(static_cast<char>(t >> 8));
    }
    return Write(name, bytes);
  }

  std::filesystem::path dir_;
};

// The error `open` throws: its field and message.
template <typename Open>
SpmdError ErrorOf(Open open) {
  try {
    open();
  } catch (const SpmdError& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return SpmdError(ErrorType::kUnsupported, "", "");
}

TEST_F(DataTest, Uint16IsLittleEndianAndTheSplitIsTheTail) {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<uint16_t> tokens(60 + gen() % 200);
    for (uint16_t& t : tokens) t = static_cast<uint16_t>(gen());
    const double fraction = gen() % 2 ? 0 : 0.05 + (gen() % 35) / 100.0;  // 0 or [0.05, 0.4)
    const std::string path = WriteUint16("t" + std::to_string(trial) + ".bin", tokens);
    EXPECT_EQ(FormatForPath(path), DataFormat::kUint16);
    const TokenCorpus c = TokenCorpus::Open(path, DataFormat::kUint16, fraction, 1);
    ASSERT_EQ(c.size(), static_cast<int64_t>(tokens.size()));
    int64_t most = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      EXPECT_EQ(c.token(static_cast<int64_t>(i)), tokens[i]);
      most = std::max<int64_t>(most, tokens[i]);
    }
    EXPECT_EQ(c.max_token(), most);
    const auto val = static_cast<int64_t>(std::floor(fraction * static_cast<double>(tokens.size())));
    EXPECT_EQ(c.split_size(Split::kValidation), val);
    EXPECT_EQ(c.split_begin(Split::kValidation), c.size() - val);
    EXPECT_EQ(c.split_size(Split::kTrain) + val, c.size());
  }
}

// Every row is a window of its split with the next tokens for labels; the same (seed,
// step) draws the same batch; another step or seed draws another.
TEST_F(DataTest, BatchesAreWindowsOfTheirSplitDrawnFromSeedAndStep) {
  std::mt19937 gen(11);
  std::string text(3000, ' ');
  for (char& ch : text) ch = static_cast<char>(gen());
  const std::string path = Write("text.txt", text);
  EXPECT_EQ(FormatForPath(path), DataFormat::kBytes);
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t sequence = 1 + gen() % 40, rows = 1 + gen() % 6, step = gen() % 1000;
    const uint64_t seed = gen();
    const TokenCorpus c = TokenCorpus::Open(path, DataFormat::kBytes, 0.2, sequence);
    EXPECT_EQ(c.max_token(), 255);
    for (const Split split : {Split::kTrain, Split::kValidation}) {
      kernels::Tensor t, l, t2, l2, t3, l3;
      c.Batch(split, rows, sequence, seed, step, &t, &l);
      c.Batch(split, rows, sequence, seed, step, &t2, &l2);
      c.Batch(split, rows, sequence, seed, step + 1, &t3, &l3);
      EXPECT_TRUE(t == t2 && l == l2);
      EXPECT_FALSE(t == t3 && sequence > 8) << "step " << step + 1 << " drew step " << step << "'s batch";
      ASSERT_EQ(t.shape(), (Shape{rows, sequence}));
      const int64_t begin = c.split_begin(split), end = begin + c.split_size(split);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t* row = t.data<int64_t>() + r * sequence;
        const int64_t* next = l.data<int64_t>() + r * sequence;
        bool found = false;
        for (int64_t start = begin; start + sequence < end && !found; ++start) {
          found = true;
          for (int64_t i = 0; i < sequence && found; ++i) {
            found = row[i] == c.token(start + i) && next[i] == c.token(start + i + 1);
          }
        }
        EXPECT_TRUE(found) << "row " << r << " is no window of its split";
      }
    }
  }
}

TEST_F(DataTest, FilesThatCannotBeTrainedOnAreTypedErrors) {
  struct Case {
    std::string path;
    DataFormat format;
    double fraction;
    int64_t sequence;
    std::string message;  // a part of the message
  };
  const Case cases[] = {
      {(dir_ / "missing.txt").string(), DataFormat::kBytes, 0.1, 4, "cannot open"},
      {dir_.string(), DataFormat::kBytes, 0.1, 4, "is not a regular file"},
      {Write("empty.txt", ""), DataFormat::kBytes, 0.1, 4, "is empty"},
      {Write("odd.bin", "abc"), DataFormat::kUint16, 0, 1, "3 bytes: not a whole number of uint16 tokens"},
      {Write("short.txt", "abcd"), DataFormat::kBytes, 0, 4, "training split (4) is too short"},
      {Write("tenbytes.txt", "abcdefghij"), DataFormat::kBytes, 0.2, 3, "validation split (2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    const SpmdError e = ErrorOf([&] { TokenCorpus::Open(c.path, c.format, c.fraction, c.sequence, "--data"); });
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
    EXPECT_EQ(e.field(), "--data");
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
  }
  const std::string ok = Write("ok.txt", "abcdefghij");
  EXPECT_EQ(ErrorOf([&] { TokenCorpus::Open(ok, DataFormat::kBytes, 1.0, 2); }).field(), "val_fraction");
  EXPECT_EQ(ErrorOf([&] { ParseDataFormat("utf8", "--data-format"); }).field(), "--data-format");
  // The exact boundary: 8 training tokens hold one window of 7 + 1, not of 8 + 1.
  EXPECT_NO_THROW(TokenCorpus::Open(ok, DataFormat::kBytes, 0.2, 1));
  EXPECT_NO_THROW(TokenCorpus::Open(ok, DataFormat::kBytes, 0, 9));
  EXPECT_THROW(TokenCorpus::Open(ok, DataFormat::kBytes, 0, 10), SpmdError);
}

// MakeBatch refuses a corpus whose tokens the vocabulary does not cover.
TEST_F(DataTest, TheVocabularyMustCoverTheCorpus) {
  const TokenCorpus c = TokenCorpus::Open(WriteUint16("v.bin", {1, 2, 300, 4, 5, 6}), DataFormat::kUint16, 0, 2);
  BatchSpec spec{2, 2, 1, &c};
  kernels::Tensor t, l;
  const SpmdError e = ErrorOf([&] { MakeBatch(spec, 300, 0, &t, &l); });
  EXPECT_EQ(e.field(), "batch.corpus");
  EXPECT_NO_THROW(MakeBatch(spec, 301, 0, &t, &l));
}

// Training on a corpus on dp=2,tp=2 (ZeRO-1) equals one process (losses to 1e-9), and its
// loss falls on a repetitive text, and so does the loss on the held-out split (it learnt
// the text, not the generated recurrence).
TEST_F(DataTest, ACorpusTrainsEveryLayoutAlike) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the cat sat on the mat. ";
  const TokenCorpus corpus = TokenCorpus::Open(Write("cat.txt", text), DataFormat::kBytes, 0.1, 6);
  GptConfig config;
  config.layers = 1;
  config.width = 8;
  config.heads = 2;
  config.vocab = 256;
  config.sequence = 6;
  config.mlp_ratio = 2;
  const BatchSpec batch{4, 6, 2, &corpus};
  auto train = [&](const std::string& mesh_text, Strategy strategy) {
    const Mesh mesh = ParseNamedMesh(mesh_text);
    std::vector<double> losses;
    std::mutex mutex;
    runtime::RunRanks(mesh.size(), [&](runtime::Communicator& comm) {
      TrainOptions options;
      options.lr = 3e-2;
      Trainer trainer(config, Layout(mesh, strategy), options, comm);
      kernels::Tensor val_tokens, val_labels;
      corpus.Batch(Split::kValidation, 8, 6, 1, 0, &val_tokens, &val_labels);
      std::vector<double> mine = {trainer.Evaluate(val_tokens, val_labels, 0, comm)};
      for (int step = 0; step < 6; ++step) mine.push_back(trainer.Step(batch, step, comm).loss);
      mine.push_back(trainer.Evaluate(val_tokens, val_labels, 6, comm));
      std::lock_guard<std::mutex> lock(mutex);
      if (comm.rank() == 0) losses = mine;
    });
    return losses;
  };
  // single: the validation loss, the 6 training losses, the validation loss again.
  const std::vector<double> single = train("dp=1", Strategy{});
  ASSERT_EQ(single.size(), 8u);
  EXPECT_LT(single[6], single[1] - 0.5) << "the training loss did not fall";
  EXPECT_LT(single[7], single[0] - 0.5) << "the validation loss did not fall";
  const std::vector<double> sharded = train("dp=2,tp=2", Strategy{1, false});
  ASSERT_EQ(sharded.size(), single.size());
  for (size_t s = 0; s < single.size(); ++s) EXPECT_NEAR(sharded[s], single[s], 1e-9 * single[s]) << "step " << s;
}

}  // namespace
}  // namespace spmd::train
