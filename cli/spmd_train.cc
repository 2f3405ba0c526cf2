// spmd-train: trains the small GPT (train/gpt.h) under mpirun on a named mesh.
//
//   mpirun -np 4 build/bin/spmd-train --mesh dp=2,tp=2 --zero 2 --steps 200
//
// Prints one line per step from rank 0 (loss, tokens/s, the bytes rank 0 sent and
// received), writes the loss curve as CSV (--csv), and with --verify reruns the same
// training on one process (each rank alone, no communication) and ends with
// `max relative difference: X` over every step's loss (relative to it) and every final
// parameter element (relative to the model's largest parameter magnitude); it exits 1
// when X is above 1e-9 (float64) or 1e-3 (float32). --precision bf16-mixed|fp16-mixed
// (train/precision.h) trains float32 masters in bfloat16 / float16; --verify then also
// compares with one float64 process, losses and parameters against the bounds of
// docs/TRAINING.md "Mixed precision".
// A "pp" axis in --mesh trains over pipeline stages (train/pipeline.h) with --schedule
// (gpipe, 1f1b, interleaved with --chunks V) and --micro-batches M micro-batches; --verify
// then compares each rank's stage parameters by name, the worst difference taken over all
// ranks.
// --save DIR --save-every N --keep K saves a crash-safe checkpoint (train/checkpoint.h)
// after steps N, 2N, ... (after the last step without --save-every), keeping the newest K;
// --resume DIR continues from the newest checkpoint in DIR (any layout of the same model).
// A checkpoint that cannot be saved or loaded: a message on every rank, exit 1.
// Bad flags: a message naming the flag on stderr, exit 2, on every rank.
//
// Launch: under mpirun, or without it from SPMD_RANK, SPMD_WORLD_SIZE and SPMD_RENDEZVOUS
// (runtime/comm/launch.h, docs/OPERATIONS.md); the ranks agree on --mesh before training, and
// a mesh that does not hold the world's ranks exits 2 naming --mesh.
// Data: generated (train/trainer.h), or --data FILE (train/data.h) with a held-out
// validation split whose loss is measured every --eval-every steps; --plot draws the
// curves as SVG. A non-finite loss or gradient norm ends the run on every rank with
// `step N: loss is nan` and exit 1; --verify fails on any NaN or infinity.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "cli/cuda_train.h"
#include "cli/loss_plot.h"
#include "cli/train_verify.h"
#include "rules/model/error.h"
#include "runtime/comm/launch.h"
#include "kernels/sim/sim.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/staged_communicator.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/device.h"
#include "train/device_sim.h"
#include "train/layout.h"
#include "train/pipeline.h"
#include "train/trainer.h"

namespace {

using spmd::train::BatchSpec;
using spmd::train::GptConfig;
using spmd::train::Layout;
using spmd::train::Strategy;
using spmd::train::TrainOptions;
using spmd::train::Trainer;

constexpr const char* kUsage = R"(usage: mpirun -np N spmd-train [flags]
  --mesh dp=2,tp=2     named mesh over the N ranks (axes pp, dp, tp, sp; default dp=N)
  --zero K             ZeRO stage over dp: 0 (plain DP), 1, 2, 3 (default 0)
  --sp                 sequence parallelism over tp
  --attention A        attention over the sp axis: dense (default: registered ops, the
                       rules' collectives), ulysses, ring or zigzag (train/sequence_attention.h)
  --steps N            optimizer steps (default 20)
  --batch B            sequences per step (default 8)
  --seq S              tokens per sequence (default 16)
  --layers L --width D --heads H --vocab V   model size (default 2, 32, 4, 64)
  --swiglu             SwiGLU MLP instead of GELU
  --rms-norm           RMSNorm instead of LayerNorm
  --dropout P          residual dropout probability in [0, 1) (default 0)
  --dtype float32|float64   (default float32)
  --lr X               AdamW learning rate (default 1e-2)
  --micro-batches M    gradient accumulation; with pp, the pipeline's micro-batches (default 1)
  --schedule S         with pp: gpipe, 1f1b or interleaved (default 1f1b)
  --chunks V           with the interleaved schedule: virtual stages per stage (default 2)
  --seed N             initialisation and data seed (default 1)
  --device D           cpu, sim (the simulated device: rank r on sim:r % 8, collectives staged
                       through host memory) or cuda (builds with CUDA and NCCL: rank r on GPU
                       local rank % GPUs, collectives over NCCL, or staged over MPI when ranks
                       share a GPU; SPMD_CUDA_COLLECTIVES=nccl|staged forces one); default cpu
  --recompute          activation recompute: each block keeps only its input, re-run in the
                       backward (bitwise the same training; docs/TRAINING.md "Recompute")
  --offload optimizer  AdamW's moments in host memory between updates, streamed to the device
                       per parameter (a device run; docs/TRAINING.md "Offload"); default none
  --offload params     the same, and (--zero 3) the parameter shards on the host between steps
  --csv FILE           write step,loss,grad_norm,tokens_per_s,bytes_sent,bytes_received,val_loss
  --verify             rerun on one process; print max relative difference (exit 1
                       above 1e-9 for float64, 1e-3 for float32, or on any NaN or infinity;
                       mixed precision: also against float64, within docs/TRAINING.md's bounds)
  --save DIR           save a checkpoint into DIR/step-<N> after the last step
  --save-every N       ... and after steps N, 2N, ... (with --save)
  --keep K             keep the newest K checkpoints in DIR (default 0: all)
  --resume DIR         continue from the newest checkpoint in DIR (not with a pp axis)
  --data FILE          train on a file instead of generated tokens (vocab defaults to 256 for
                       bytes, to the largest token + 1 for uint16)
  --data-format F      bytes (each byte a token) or uint16 (little-endian, nanoGPT's .bin);
                       default: uint16 for a name ending in .bin, bytes otherwise
  --val-fraction X     the file's last X of tokens held out for validation, in [0, 1)
                       (default 0.1; 0: no validation)
  --eval-every N       validation loss every N steps and after the last (default 10)
  --val-batches N      validation batches (--batch rows each, the same every time; default 8)
  --plot FILE          write the loss curves (training, validation, ln(vocab)) as SVG
  --precision P        fp32 (train in --dtype), bf16-mixed or fp16-mixed (float32 master
                       weights and AdamW states, bfloat16/float16 forward and backward,
                       float32 gradient reductions; docs/TRAINING.md "Mixed precision")
  --loss-scale S       fp16-mixed: the initial loss scale, a power of two in [1, 2^64] (default 65536)
  --growth-interval N  fp16-mixed: double the scale after N steps without a skip (default 2000)
Without mpirun: start each process with SPMD_RANK, SPMD_WORLD_SIZE and SPMD_RENDEZVOUS=DIR.
)";

struct Flags {
  std::string mesh;
  Strategy strategy;
  int64_t steps = 20;
  BatchSpec batch{8, 16, 1};
  GptConfig config;
  TrainOptions options;
  std::string csv;
  bool verify = false;
  spmd::train::PipelineOptions pipeline;
  // Training data from a file (train/data.h), validation and the plot.
  std::string data;
  std::optional<spmd::train::DataFormat> data_format;
  double val_fraction = 0.1;
  int64_t eval_every = 10;
  int64_t val_batches = 8;
  bool vocab_given = false, val_fraction_given = false, eval_every_given = false;
  std::string plot;
  std::string save, resume;  // checkpoints (not with a pp axis)
  std::string device = "cpu";  // --device: where this rank's tensors live (train/device.h)
  bool dtype_given = false, loss_scale_given = false;  // --dtype; --loss-scale or --growth-interval
  int64_t save_every = 0;
  int keep = 0;
};

// The axes of `mesh` other than pp, at this rank (the stage's mesh a Layout lays out);
// a one-rank dp mesh when pp is the only axis.
spmd::Mesh WithoutPp(const spmd::Mesh& mesh, int64_t rank) {
  std::vector<int> rest;
  int pp = -1;
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (mesh.axis_names()[a] == "pp") {
      pp = a;
    } else {
      rest.push_back(a);
    }
  }
  if (pp < 0) return mesh;
  if (rest.empty()) return spmd::Mesh({1}, {rank}, {"dp"});
  return mesh.SubMesh(*mesh.CoordinateOf(rank), rest);
}

bool HasPp(const spmd::Mesh& mesh) {
  for (const std::string& name : mesh.axis_names()) {
    if (name == "pp") return true;
  }
  return false;
}

int64_t ParseInt(const std::string& flag, const std::string& text, int64_t lo, int64_t hi) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || value < lo || value > hi) {
    spmd::ThrowInvalid(flag, "'" + text + "' is not an integer in [" + std::to_string(lo) + ", " +
                                 std::to_string(hi) + "]");
  }
  return value;
}

Flags ParseFlags(int argc, char** argv, int64_t world) {
  Flags f;
  f.config.layers = 2;
  f.config.width = 32;
  f.config.heads = 4;
  f.config.vocab = 64;
  f.config.sequence = 16;
  f.config.dtype = spmd::DType::kFloat32;
  f.mesh = "dp=" + std::to_string(world);
  bool chunks_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--chunks") chunks_given = true;
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) spmd::ThrowInvalid(flag, "needs a value");
      return argv[++i];
    };
    if (flag == "--mesh") f.mesh = value();
    else if (flag == "--device") f.device = value();
    else if (flag == "--zero") f.strategy.zero_stage = static_cast<int>(ParseInt(flag, value(), 0, 3));
    else if (flag == "--sp") f.strategy.sequence_parallel = true;
    else if (flag == "--attention") {
      const std::string text = value();
      using spmd::train::AttentionKind;
      if (text == "dense") f.config.attention = AttentionKind::kDefault;
      else if (text == "ulysses") f.config.attention = AttentionKind::kUlysses;
      else if (text == "ring") f.config.attention = AttentionKind::kRing;
      else if (text == "zigzag") f.config.attention = AttentionKind::kRingZigzag;
      else spmd::ThrowInvalid("--attention", "'" + text + "' is not dense, ulysses, ring or zigzag");
    }
    else if (flag == "--steps") f.steps = ParseInt(flag, value(), 1, 1000000);
    else if (flag == "--batch") f.batch.batch = ParseInt(flag, value(), 1, 1 << 20);
    else if (flag == "--seq") f.batch.sequence = ParseInt(flag, value(), 1, 1 << 16);
    else if (flag == "--layers") f.config.layers = ParseInt(flag, value(), 1, 1024);
    else if (flag == "--width") f.config.width = ParseInt(flag, value(), 1, 1 << 16);
    else if (flag == "--heads") f.config.heads = ParseInt(flag, value(), 1, 1 << 10);
    else if (flag == "--vocab") {
      f.config.vocab = ParseInt(flag, value(), 2, 1 << 22);
      f.vocab_given = true;
    }
    else if (flag == "--swiglu") f.config.swiglu = true;
    else if (flag == "--rms-norm") f.config.rms_norm = true;
    else if (flag == "--dropout") {
      const std::string text = value();
      char* end = nullptr;
      f.config.dropout = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(f.config.dropout >= 0 && f.config.dropout < 1)) {
        spmd::ThrowInvalid(flag, "'" + text + "' is not a probability in [0, 1)");
      }
    }
    else if (flag == "--micro-batches") f.options.micro_batches = static_cast<int>(ParseInt(flag, value(), 1, 1 << 16));
    else if (flag == "--seed") f.batch.seed = f.config.seed = static_cast<uint64_t>(ParseInt(flag, value(), 0, INT64_MAX));
    else if (flag == "--csv") f.csv = value();
    else if (flag == "--recompute") f.options.recompute = true;
    else if (flag == "--offload") f.options.offload = spmd::train::ParseOffload(value(), flag);
    else if (flag == "--schedule") {
      try {
        f.pipeline.schedule = spmd::train::ParseScheduleKind(value());
      } catch (const spmd::SpmdError& e) {
        spmd::ThrowInvalid(flag, e.what());
      }
    } else if (flag == "--chunks") f.pipeline.chunks = ParseInt(flag, value(), 1, 4096);
    else if (flag == "--verify") f.verify = true;
    // Mixed precision (train/precision.h): the policy and fp16's loss scaling.
    else if (flag == "--precision") f.options.precision = spmd::train::ParsePrecision(value(), flag);
    else if (flag == "--loss-scale") {
      const std::string text = value();
      char* end = nullptr;
      f.options.loss_scale.initial = std::strtod(text.c_str(), &end);
      int exponent = 0;
      if (text.empty() || *end != '\0' || !(f.options.loss_scale.initial >= 1) ||
          !(f.options.loss_scale.initial <= 0x1p64) || std::frexp(f.options.loss_scale.initial, &exponent) != 0.5) {
        spmd::ThrowInvalid(flag, "'" + text + "' is not a power of two in [1, 2^64]");
      }
      f.loss_scale_given = true;
    } else if (flag == "--growth-interval") {
      f.options.loss_scale.growth_interval = ParseInt(flag, value(), 1, 1000000000);
      f.loss_scale_given = true;
    }
    // Data, validation and the plot.
    else if (flag == "--data") f.data = value();
    else if (flag == "--data-format") f.data_format = spmd::train::ParseDataFormat(value(), flag);
    else if (flag == "--val-fraction") {
      const std::string text = value();
      char* end = nullptr;
      f.val_fraction = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(f.val_fraction >= 0 && f.val_fraction < 1)) {
        spmd::ThrowInvalid(flag, "'" + text + "' is not a fraction in [0, 1)");
      }
      f.val_fraction_given = true;
    } else if (flag == "--eval-every") {
      f.eval_every = ParseInt(flag, value(), 1, 1000000);
      f.eval_every_given = true;
    } else if (flag == "--val-batches") f.val_batches = ParseInt(flag, value(), 1, 1 << 16);
    else if (flag == "--plot") f.plot = value();
    else if (flag == "--save") f.save = value();
    else if (flag == "--save-every") f.save_every = ParseInt(flag, value(), 1, 1000000);
    else if (flag == "--keep") f.keep = static_cast<int>(ParseInt(flag, value(), 0, 1000000));
    else if (flag == "--resume") f.resume = value();
    else if (flag == "--lr") {
      const std::string text = value();
      char* end = nullptr;
      f.options.lr = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(f.options.lr > 0) || !std::isfinite(f.options.lr)) {
        spmd::ThrowInvalid(flag, "'" + text + "' is not a positive number");
      }
    } else if (flag == "--dtype") {
      const std::string text = value();
      if (text == "float32") f.config.dtype = spmd::DType::kFloat32;
      else if (text == "float64") f.config.dtype = spmd::DType::kFloat64;
      else spmd::ThrowInvalid(flag, "'" + text + "' is not float32 or float64");
      f.dtype_given = true;
    } else if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else {
      spmd::ThrowInvalid(flag, "unknown flag (--help lists them)");
    }
  }
  f.config.sequence = f.batch.sequence;
  if (f.options.precision != spmd::train::Precision::kFp32 && f.dtype_given &&
      f.config.dtype != spmd::DType::kFloat32) {
    spmd::ThrowInvalid("--precision", std::string(spmd::train::ToString(f.options.precision)) +
                                          " keeps float32 master weights: not with --dtype float64");
  }
  if (f.loss_scale_given && f.options.precision != spmd::train::Precision::kFp16Mixed) {
    spmd::ThrowInvalid("--loss-scale", "loss scaling is for --precision fp16-mixed only");
  }
  if (f.save.empty() && (f.save_every > 0 || f.keep > 0)) {
    spmd::ThrowInvalid(f.save_every > 0 ? "--save-every" : "--keep", "needs --save DIR");
  }
  if (!chunks_given && f.pipeline.schedule == spmd::train::ScheduleKind::kInterleaved) f.pipeline.chunks = 2;
  if (f.pipeline.schedule != spmd::train::ScheduleKind::kInterleaved && f.pipeline.chunks != 1) {
    spmd::ThrowInvalid("--chunks", "only the interleaved schedule has more than one chunk per stage");
  }
  if (f.device != "cpu" && f.device != "sim" && f.device != "cuda") {
    spmd::ThrowInvalid("--device", "'" + f.device + "' is not cpu, sim or cuda");
  }
  if (f.device == "cuda" && !spmd::cli::CudaTrainingBuilt()) {
    spmd::ThrowInvalid("--device", "cuda: no spmd-train-cuda next to this program (a build with CUDA and NCCL "
                                   "makes it: -DSPMD_WITH_CUDA=ON where the CUDA toolkit and NCCL are)");
  }
  if (f.data.empty()) {
    if (f.data_format) spmd::ThrowInvalid("--data-format", "needs --data");
    if (f.val_fraction_given) spmd::ThrowInvalid("--val-fraction", "needs --data");
    if (f.eval_every_given) spmd::ThrowInvalid("--eval-every", "needs --data");
    f.val_fraction = 0;
  }
  return f;
}

// --data: opens the corpus (typed errors naming --data), sets the vocabulary (the
// format's unless --vocab) and checks that it covers the file's tokens.
spmd::train::TokenCorpus OpenCorpus(Flags& f) {
  const spmd::train::DataFormat format = f.data_format.value_or(spmd::train::FormatForPath(f.data));
  spmd::train::TokenCorpus corpus =
      spmd::train::TokenCorpus::Open(f.data, format, f.val_fraction, f.batch.sequence, "--data");
  if (!f.vocab_given) {
    f.config.vocab = format == spmd::train::DataFormat::kBytes ? 256 : std::max<int64_t>(2, corpus.max_token() + 1);
  } else if (corpus.max_token() >= f.config.vocab) {
    spmd::ThrowInvalid("--data", "'" + f.data + "' holds token " + std::to_string(corpus.max_token()) +
                                     ", not below --vocab " + std::to_string(f.config.vocab) +
                                     (format == spmd::train::DataFormat::kBytes ? " (bytes need --vocab 256)" : ""));
  }
  return corpus;
}

// The validation loss: the mean over f.val_batches batches of the validation split (batch
// i drawn as step i, the same at every evaluation), after step `step`.
double ValidationLoss(Trainer& trainer, const Flags& f, int64_t step, spmd::runtime::Communicator& comm) {
  double sum = 0;
  for (int64_t i = 0; i < f.val_batches; ++i) {
    spmd::kernels::Tensor tokens, labels;
    f.batch.corpus->Batch(spmd::train::Split::kValidation, f.batch.batch, f.batch.sequence, f.batch.seed, i,
                          &tokens, &labels);
    sum += trainer.Evaluate(tokens, labels, step, comm);
  }
  return sum / static_cast<double>(f.val_batches);
}

// The curves --plot draws, filled by RunSteps on rank 0.
spmd::cli::LossCurve g_curve;
// The most activation bytes any step held on this rank (StepStats), for the summary.
int64_t g_activation_peak = 0;
spmd::train::StepStats g_last_step;  // the last step's statistics on this rank

// The activation (and with --offload, the offload and device memory) summary of rank 0.
void PrintMemory(const Flags& f, const spmd::train::HostStateHome* offload,
                 spmd::runtime::Communicator& comm) {
  std::printf("activations (rank 0): peak %lld bytes (recompute %s)\n", static_cast<long long>(g_activation_peak),
              f.options.recompute ? "on" : "off");
  if (offload != nullptr) {
    std::printf("offload (rank 0): on the host between steps: optimizer states %lld bytes, parameters %lld bytes; "
                "moved by the last step: %lld bytes host->device, %lld bytes device->host\n",
                static_cast<long long>(offload->counters().host_bytes),
                static_cast<long long>(offload->counters().param_host_bytes),
                static_cast<long long>(g_last_step.offload_to_device),
                static_cast<long long>(g_last_step.offload_to_host));
  }
  if (comm.device().kind == spmd::kernels::DeviceKind::kSim) {
    const spmd::kernels::sim::MemoryUsage usage = spmd::kernels::sim::UsageOf(comm.device());
    std::printf("device memory (rank 0): peak %lld bytes, in use between steps %lld bytes\n",
                static_cast<long long>(usage.peak_bytes), static_cast<long long>(usage.bytes_in_use));
  }
}

struct History {
  int64_t first_step = 0;  // the step it resumed at
  bool checkpoint_failed = false;
  std::vector<double> losses;
  std::vector<std::string> names;  // the parameters this rank holds
  std::vector<std::vector<double>> params;
  std::string skips;  // fp16-mixed: one character per step, 'x' for a skipped one
};

// Runs f.steps steps of `trainer` (a Trainer or a PipelineTrainer): a progress line per step
// when `print`, a CSV row per step when `csv`; returns the losses (and appends to `skips`
// 'x' for a step skipped by loss scaling, '.' for another).
template <typename AnyTrainer>
std::vector<double> RunSteps(AnyTrainer& trainer, const Flags& f, spmd::runtime::Communicator& comm,
                             bool print, std::ofstream* csv, int64_t first = 0,
                             const std::function<void(int64_t)>& after_step = {}, std::string* skips = nullptr) {
  std::vector<double> losses;
  const double tokens = static_cast<double>(f.batch.batch * f.batch.sequence);
  for (int64_t step = first; step < f.steps; ++step) {
    const spmd::train::StepStats s = trainer.Step(f.batch, step, comm);
    losses.push_back(s.loss);
    g_activation_peak = std::max(g_activation_peak, s.activation_peak_bytes);
    g_last_step = s;
    if (skips) *skips += s.skipped ? 'x' : '.';
    // Validation (--data with a validation split; not under pp, refused at the flags).
    std::optional<double> val;
    if constexpr (std::is_same_v<AnyTrainer, Trainer>) {
      if (f.batch.corpus != nullptr && f.val_fraction > 0 &&
          ((step + 1) % f.eval_every == 0 || step + 1 == f.steps)) {
        val = ValidationLoss(trainer, f, step, comm);
      }
    }
    if (print) {
      char skipped[64] = "";  // fp16-mixed: a step whose gradients were not finite
      if (s.skipped) std::snprintf(skipped, sizeof skipped, " skipped (loss scale %g)", s.loss_scale);
      std::printf("step %lld loss %.6f grad_norm %.4f tokens/s %.0f bytes sent %lld received %lld%s%s\n",
                  static_cast<long long>(step), s.loss, s.grad_norm, tokens / s.seconds,
                  static_cast<long long>(s.bytes_sent), static_cast<long long>(s.bytes_received),
                  val ? (" val_loss " + std::to_string(*val)).c_str() : "", skipped);
      std::fflush(stdout);
      g_curve.train.push_back({static_cast<double>(step), s.loss});
      if (val) g_curve.validation.push_back({static_cast<double>(step), *val});
    }
    if (csv) {
      *csv << step << "," << s.loss << "," << s.grad_norm << "," << tokens / s.seconds << ","
           << s.bytes_sent << "," << s.bytes_received << ",";
      if (val) *csv << *val;
      *csv << "\n";
    }
    if (after_step) after_step(step + 1);
  }
  return losses;
}

// Trains over the stages of the mesh's pp axis; rank-local history (this stage's parameters).
History TrainPipeline(const Flags& f, const spmd::Mesh& mesh, spmd::runtime::Communicator& comm,
                      bool print, std::ofstream* csv) {
  spmd::train::PipelineTrainer trainer(f.config, mesh, f.strategy, f.options, f.pipeline, comm);
  History h;
  h.losses = RunSteps(trainer, f, comm, print, csv);
  for (auto& [name, values] : trainer.GatherParams(comm)) {
    h.names.push_back(name);
    h.params.push_back(std::move(values));
  }
  if (print) {
    const spmd::train::ScheduleStats sim = spmd::train::SimulateSchedule(trainer.schedule());
    std::printf("pipeline (rank 0, stage 0): peak live activations %lld (schedule: %lld), simulated bubble %.4f\n",
                static_cast<long long>(trainer.last_peak_live()), static_cast<long long>(sim.peak_live[0]),
                sim.bubble);
    PrintMemory(f, nullptr, comm);
  }
  return h;
}

// Trains on `mesh` (ranks outside it take part in nothing); rank-local history.
History Train(const Flags& f, const spmd::Mesh& mesh, spmd::runtime::Communicator& comm,
              bool print, std::ofstream* csv) {
  Trainer trainer(f.config, Layout(mesh, f.strategy), f.options, comm);
  History h;
  // Checkpoints: resume from the newest in --resume; save after every --save-every steps
  // and after the last. A failure is agreed on by every rank: each prints it, exit 1.
  try {
    if (!f.resume.empty()) {
      h.first_step = spmd::train::LoadCheckpoint(trainer, f.resume, comm);
      if (print) std::printf("resumed from step %lld of %s\n", static_cast<long long>(h.first_step), f.resume.c_str());
    }
    auto save = [&](int64_t done) {
      if (f.save.empty() || !(done == f.steps || (f.save_every > 0 && done % f.save_every == 0))) return;
      const std::string path = spmd::train::SaveCheckpoint(trainer, f.save, {done, f.keep}, comm);
      if (print) std::printf("saved %s\n", path.c_str());
    };
    h.losses = RunSteps(trainer, f, comm, print, csv, h.first_step, save, &h.skips);
  } catch (const spmd::SpmdError& e) {
    if (e.field() != "checkpoint") throw;
    std::fprintf(stderr, "spmd-train: rank %lld: %s: %s\n", static_cast<long long>(comm.rank()),
                 std::string(spmd::ToString(e.type())).c_str(), e.what());
    h.checkpoint_failed = true;
    return h;
  }
  h.params = trainer.GatherParams(comm);
  for (const spmd::train::NamedParam& p : trainer.model().params()) h.names.push_back(p.name);
  if (print) {
    std::printf("memory (rank 0): parameters %lld bytes, gradients %lld bytes, optimizer states %lld bytes\n",
                static_cast<long long>(trainer.ParamBytes()), static_cast<long long>(trainer.GradBytes()),
                static_cast<long long>(trainer.optimizer().StateBytes()));
    PrintMemory(f, trainer.offload(), comm);
    const spmd::train::PrecisionPolicy& policy = trainer.policy();
    if (f.options.precision != spmd::train::Precision::kFp32) {
      std::printf("precision %s: parameters %s, compute %s, gradient reductions %s; %lld steps skipped, loss scale %g\n",
                  std::string(spmd::train::ToString(f.options.precision)).c_str(),
                  std::string(spmd::ToString(policy.param)).c_str(), std::string(spmd::ToString(policy.compute)).c_str(),
                  std::string(spmd::ToString(policy.reduce)).c_str(),
                  static_cast<long long>(trainer.skipped_steps()), trainer.loss_scale());
    }
  }
  return h;
}

// `spmd-train: rank R: line` on stderr in one write, so the ranks' lines do not interleave.
void Say(const spmd::runtime::Communicator& comm, const std::string& line) {
  const std::string text = "spmd-train: rank " + std::to_string(comm.rank()) + ": " + line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

// The mesh the ranks must agree on before MPI starts: the last --mesh, or dp=<world>.
std::string MeshSpec(int argc, char** argv, int64_t world) {
  std::string spec = "dp=" + std::to_string(world);
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--mesh") spec = argv[++i];
  }
  return spec;
}

// --verify under mixed precision (train/precision.h): the parallel run against one process
// in the same precision and against one process in float64, losses within c u growth^t
// (MixedBounds), parameters within AdamWDriftBound, and both runs skipping the same steps
// (fp16: a skip where the other run stepped makes the runs incomparable). Prints the
// measures on rank 0; returns whether every rank passed.
bool VerifyMixed(const Flags& f, const Flags& single, const spmd::Mesh& alone, const History& parallel,
                 const History& reference, std::ptrdiff_t first, spmd::runtime::Communicator& tc,
                 spmd::runtime::MpiCommunicator& comm) {
  const spmd::train::MixedBounds bounds = spmd::train::MixedBoundsFor(f.options.precision);
  Flags wide = single;
  wide.config.dtype = spmd::DType::kFloat64;
  wide.options.precision = spmd::train::Precision::kFp32;
  History exact = Train(wide, alone, tc, false, nullptr);  // a NonFiniteError propagates
  exact.losses.erase(exact.losses.begin(), exact.losses.begin() + first);
  spmd::cli::MixedDifference same = spmd::cli::MaxMixedDifference(parallel, reference, bounds.growth);
  spmd::cli::MixedDifference drift = spmd::cli::MaxMixedDifference(parallel, exact, bounds.growth);
  // The worst over every rank; and whether any rank's runs skipped different steps.
  double values[5] = {same.loss, same.params, drift.loss, drift.params,
                      parallel.skips == reference.skips.substr(static_cast<size_t>(first)) ? 0.0 : 1.0};
  spmd::runtime::Group world;
  for (int64_t r = 0; r < comm.world_size(); ++r) world.push_back(r);
  comm.AllReduce(values, values, 5, spmd::DType::kFloat64, spmd::ReduceOp::kMax, world);
  const double u = bounds.unit_roundoff;
  const double param_bound =
      spmd::train::AdamWDriftBound(f.options.lr, f.options.beta1, f.options.beta2, f.steps);
  // A step loss scaling skipped is one float64 training took: no comparison after it.
  const bool compared_64 = parallel.skips.find('x') == std::string::npos;
  const bool ok = values[4] == 0 && values[0] <= bounds.same_precision * u && values[1] <= param_bound &&
                  (!compared_64 || (values[2] <= bounds.float64 * u && values[3] <= param_bound));
  if (comm.rank() == 0) {
    const std::string name(spmd::train::ToString(f.options.precision));
    char against_64[160] = "against float64: not compared (loss scaling skipped a step on rank 0)";
    if (compared_64) {
      std::snprintf(against_64, sizeof against_64, "against float64: loss %.3g u (bound %g u), parameters %.3g (bound %.3g)",
                    values[2] / u, bounds.float64, values[3], param_bound);
    }
    std::printf("mixed precision %s (u = %g, loss bounds c u %g^step): against one process in %s: loss %.3g u "
                "(bound %g u), parameters %.3g (bound %.3g); %s%s: %s\n",
                name.c_str(), u, bounds.growth, name.c_str(), values[0] / u, bounds.same_precision, values[1],
                param_bound, against_64,
                values[4] != 0 ? "; the runs skipped different steps (loss scaling overflowed in one only)" : "",
                ok ? "ok" : "FAILED");
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  spmd::cli::ExecCudaProgramIfAsked(argc, argv);  // --device cuda: spmd-train-cuda (cli/cuda_train.h)
  spmd::train::EnableSimTraining();  // --device sim (registers the simulated device's transfers)
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::cout << kUsage;
      return 0;
    }
  }
  // Launch (runtime/comm/launch.h): mpirun's world, or the processes started with SPMD_RANK,
  // SPMD_WORLD_SIZE and SPMD_RENDEZVOUS; the ranks agree on --mesh, which must hold the
  // world's ranks (else every rank exits 2 naming --mesh). A bad environment: LaunchMain
  // says so and exits 2.
  spmd::runtime::LaunchEnv env;
  try {
    env = spmd::runtime::ReadLaunchEnv();
  } catch (const spmd::SpmdError&) {
  }
  const auto parse_mesh = [&env](const std::string& spec) {
    spmd::Mesh mesh;
    try {
      mesh = spmd::train::ParseNamedMesh(spec);
    } catch (const spmd::SpmdError& e) {
      spmd::ThrowInvalid("--mesh", e.what());
    }
    if (mesh.size() != env.world_size) {
      const std::string started =
          env.source == spmd::runtime::LaunchEnv::Source::kMpirun       ? "mpirun started " + std::to_string(env.world_size)
          : env.source == spmd::runtime::LaunchEnv::Source::kRendezvous ? "SPMD_WORLD_SIZE is " + std::to_string(env.world_size)
                                                                         : "one process (no mpirun, no SPMD_WORLD_SIZE)";
      spmd::ThrowInvalid("--mesh", spec + " has " + std::to_string(mesh.size()) + " ranks; " + started);
    }
    return mesh;
  };
  return spmd::runtime::LaunchMain(argc, argv, MeshSpec(argc, argv, env.world_size),
                                   [&](spmd::runtime::MpiCommunicator& comm, const spmd::Mesh&) {
    Flags flags;
    spmd::Mesh mesh;
    std::optional<spmd::train::TokenCorpus> corpus;
    bool refused = false;
    int cuda_device = 0;  // --device cuda: this rank's GPU (cli/cuda_train.h)
    try {
      flags = ParseFlags(argc, argv, comm.world_size());
      if (flags.device == "cuda") cuda_device = spmd::cli::PrepareCudaTraining();
      mesh = spmd::train::ParseNamedMesh(flags.mesh);
      if (mesh.size() != comm.world_size()) {
        spmd::ThrowInvalid("--mesh", flags.mesh + " has " + std::to_string(mesh.size()) +
                                         " ranks; mpirun started " + std::to_string(comm.world_size()));
      }
      Layout check(WithoutPp(mesh, comm.rank()), flags.strategy);  // validates the names and the strategy
      (void)check;
      if (flags.config.attention != spmd::train::AttentionKind::kDefault &&
          std::find(mesh.axis_names().begin(), mesh.axis_names().end(), "sp") == mesh.axis_names().end()) {
        spmd::ThrowInvalid("--attention", "ulysses, ring and zigzag run over an sp axis; " + flags.mesh + " has none");
      }
      if (HasPp(mesh)) {  // validates (p, m, v) as the pipeline will
        int64_t p = 1;
        for (int a = 0; a < mesh.ndim(); ++a) {
          if (mesh.axis_names()[a] == "pp") p = mesh.axis_size(a);
        }
        try {
          spmd::train::MakeSchedule(flags.pipeline.schedule, p, flags.options.micro_batches, flags.pipeline.chunks);
        } catch (const spmd::SpmdError& e) {
          spmd::ThrowInvalid(e.field() == "micro_batches" ? "--micro-batches" : "--chunks", e.what());
        }
        if (flags.batch.batch < flags.options.micro_batches) {
          spmd::ThrowInvalid("--batch", "fewer rows than micro-batches");
        }
        if (flags.options.precision != spmd::train::Precision::kFp32) {
          spmd::ThrowUnsupported("--precision", "mixed precision is not supported with a pp axis (fp32 is)");
        }
        if (!flags.save.empty() || !flags.resume.empty()) {
          spmd::ThrowUnsupported(flags.save.empty() ? "--resume" : "--save", "checkpoints of pipeline stages are not supported");
        }
      }
      // --offload: what the trainers would refuse (options.offload), named by the flag.
      if (flags.options.offload != spmd::train::OffloadKind::kNone) {
        if (flags.device == "cpu") spmd::ThrowInvalid("--offload", "needs a device (--device sim): the run is on the host");
        if (HasPp(mesh)) spmd::ThrowUnsupported("--offload", "not with pipeline stages (a pp axis)");
        if (flags.options.offload == spmd::train::OffloadKind::kParams && flags.strategy.zero_stage != 3) {
          spmd::ThrowInvalid("--offload", "params offloads ZeRO-3 shards: give --zero 3");
        }
      }
      // --data: the corpus every rank reads (the same file), and what validation needs.
      if (!flags.data.empty()) {
        corpus.emplace(OpenCorpus(flags));
        flags.batch.corpus = &*corpus;
        if (flags.val_fraction > 0 && HasPp(mesh)) {
          spmd::ThrowUnsupported("--val-fraction", "validation loss is not measured under pp: give --val-fraction 0");
        }
        if (flags.val_fraction > 0 && flags.config.dropout > 0) {
          spmd::ThrowInvalid("--dropout", "validation loss needs a model without dropout: give --val-fraction 0");
        }
      }
    } catch (const spmd::SpmdError& e) {
      Say(comm, std::string(spmd::ToString(e.type())) + ": " + e.what());
      refused = true;
    }
    // Every rank learns whether any refused (a file one host cannot read): all exit 2 together.
    {
      double any = refused ? 1 : 0;
      spmd::runtime::Group world;
      for (int64_t r = 0; r < comm.world_size(); ++r) world.push_back(r);
      comm.AllReduce(&any, &any, 1, spmd::DType::kFloat64, spmd::ReduceOp::kMax, world);
      if (any > 0) {
        if (!refused) Say(comm, "another rank refused the flags");
        return 2;
      }
    }
    // --device sim: this rank's tensors on sim:rank % 8, its collectives staged through
    // host memory over MPI (runtime/comm/staged_communicator.h). --device cuda: on its GPU, the
    // collectives over NCCL, or staged over MPI where ranks share a GPU (cli/cuda_train.h).
    // `tc` is what training uses.
    const spmd::kernels::Device device = spmd::train::ParseDevice(
        flags.device, flags.device == "cuda" ? cuda_device : static_cast<int>(comm.rank()), "--device");
    flags.options.device = device;
    std::optional<spmd::runtime::StagedCommunicator> staged;
    std::unique_ptr<spmd::runtime::Communicator> on_cuda;
    std::string collectives = "collectives staged through host memory";
    if (device.kind == spmd::kernels::DeviceKind::kSim) {
      staged.emplace(comm, device, spmd::kernels::sim::NewStream(device), spmd::runtime::SimHostStaging());
    } else if (device.kind == spmd::kernels::DeviceKind::kCuda) {
      on_cuda = spmd::cli::MakeCudaCommunicator(comm, cuda_device,
                                                env.source == spmd::runtime::LaunchEnv::Source::kMpirun, &collectives);
    }
    spmd::runtime::Communicator& tc = staged  ? static_cast<spmd::runtime::Communicator&>(*staged)
                                      : on_cuda ? *on_cuda
                                                : comm;
    const bool root = comm.rank() == 0;
    std::optional<std::ofstream> csv;
    if (root && !flags.csv.empty()) {
      csv.emplace(flags.csv);
      *csv << "step,loss,grad_norm,tokens_per_s,bytes_sent,bytes_received,val_loss\n";
    }
    if (root) {
      const std::string pipeline =
          HasPp(mesh) ? flags.mesh + " schedule=" + std::string(spmd::train::ToString(flags.pipeline.schedule)) +
                            (flags.pipeline.chunks > 1 ? " chunks=" + std::to_string(flags.pipeline.chunks) : "") +
                            " micro_batches=" + std::to_string(flags.options.micro_batches) + ", stages: "
                      : "";
      std::printf("spmd-train: %s%s, %lld steps, model layers=%lld width=%lld heads=%lld vocab=%lld seq=%lld%s, %s\n",
                  pipeline.c_str(), Layout(WithoutPp(mesh, comm.rank()), flags.strategy).ToString().c_str(),
                  static_cast<long long>(flags.steps),
                  static_cast<long long>(flags.config.layers), static_cast<long long>(flags.config.width),
                  static_cast<long long>(flags.config.heads), static_cast<long long>(flags.config.vocab),
                  static_cast<long long>(flags.config.sequence),
                  (std::string(flags.config.swiglu ? " swiglu" : "") + (flags.config.rms_norm ? " rms_norm" : "") +
                   (flags.config.dropout > 0 ? " dropout=" + std::to_string(flags.config.dropout) : "")).c_str(),
                  std::string(spmd::ToString(flags.config.dtype)).c_str());
      if (!device.is_host()) {
        std::printf("device: %s on rank 0 (each rank its own; %s)\n", spmd::kernels::ToString(device).c_str(),
                    collectives.c_str());
      }
      if (corpus) {
        std::printf("data: %s (%s): %lld tokens, %lld for training, %lld for validation (ln(vocab) = %.4f)\n",
                    flags.data.c_str(), std::string(spmd::train::ToString(corpus->format())).c_str(),
                    static_cast<long long>(corpus->size()),
                    static_cast<long long>(corpus->split_size(spmd::train::Split::kTrain)),
                    static_cast<long long>(corpus->split_size(spmd::train::Split::kValidation)),
                    std::log(static_cast<double>(flags.config.vocab)));
      }
    }
    // A non-finite loss or gradient norm: every rank throws the same NonFiniteError after
    // the same collectives; each says so and the job exits 1.
    auto diverged = [&](const spmd::train::NonFiniteError& e) {
      Say(comm, std::string(spmd::ToString(e.type())) + ": " + e.what());
      return 1;
    };
    History parallel;
    try {
      parallel = HasPp(mesh) ? TrainPipeline(flags, mesh, tc, root, csv ? &*csv : nullptr)
                             : Train(flags, mesh, tc, root, csv ? &*csv : nullptr);
    } catch (const spmd::train::NonFiniteError& e) {
      return diverged(e);
    }
    if (parallel.checkpoint_failed) return 1;
    // --plot: rank 0 draws what RunSteps recorded (a file it cannot write: exit 2).
    bool plot_failed = false;
    if (root && !flags.plot.empty()) {
      g_curve.title = "spmd-train " + (flags.data.empty() ? std::string("generated tokens") : flags.data) + ", " +
                      flags.mesh;
      g_curve.baseline = std::log(static_cast<double>(flags.config.vocab));
      try {
        spmd::cli::WriteLossPlot(g_curve, flags.plot, "--plot");
      } catch (const spmd::SpmdError& e) {
        Say(comm, std::string(spmd::ToString(e.type())) + ": " + e.what());
        plot_failed = true;
      }
    }
    if (!flags.verify) return plot_failed ? 2 : 0;
    // One process: each rank alone on a one-rank mesh of itself.
    const spmd::Mesh alone({1}, {comm.rank()}, {"dp"});
    Flags single = flags;
    single.strategy = Strategy{};
    single.val_fraction = 0;  // the comparison is of training; no validation passes
    single.save = single.resume = "";
    // The reference keeps every tensor on the device and every activation (no --offload,
    // no --recompute): what the run is compared with is plain training.
    single.options.offload = spmd::train::OffloadKind::kNone;
    single.options.recompute = false;
    History reference;
    try {
      reference = Train(single, alone, tc, false, nullptr);  // on the same device kind
    } catch (const spmd::train::NonFiniteError& e) {
      return diverged(e);
    }
    // A resumed run's losses start at its first step: compare with the reference's from there.
    const auto skipped = static_cast<std::ptrdiff_t>(
        std::min<size_t>(static_cast<size_t>(parallel.first_step), reference.losses.size()));
    reference.losses.erase(reference.losses.begin(), reference.losses.begin() + skipped);
    // NaN-aware: any NaN or infinity in either run is +infinity (cli/train_verify.h).
    double worst = spmd::cli::MaxRelativeDifference(parallel, reference);
    // The worst over every rank.
    spmd::runtime::Group world;
    for (int64_t r = 0; r < comm.world_size(); ++r) world.push_back(r);
    comm.AllReduce(&worst, &worst, 1, spmd::DType::kFloat64, spmd::ReduceOp::kMax, world);
    // (Mixed precision prints its own measure, losses and parameters apart, below.)
    if (root && flags.options.precision == spmd::train::Precision::kFp32) {
      std::printf("max relative difference: %.3g\n", worst);
    }
    // Above the dtype's bound (float64 1e-9, float32 1e-3): exit 1, so scripts can rely on it.
    if (flags.options.precision == spmd::train::Precision::kFp32) {
      const double bound = flags.config.dtype == spmd::DType::kFloat64 ? 1e-9 : 1e-3;
      if (worst > bound) return 1;
      return plot_failed ? 2 : 0;
    }
    try {
      return VerifyMixed(flags, single, alone, parallel, reference, skipped, tc, comm) ? (plot_failed ? 2 : 0) : 1;
    } catch (const spmd::train::NonFiniteError& e) {
      return diverged(e);
    }
  }, parse_mesh);
}
