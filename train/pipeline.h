// Pipeline parallelism: schedules as data, a checker that proves them before they run,
// their simulated timeline (bubble, live activations), and the GPT trained over pipeline
// stages on the runtime (docs/PIPELINE.md).
//
// A schedule is, per pipeline stage (a "rank" of the schedule), the ordered list of what it
// does in one step: Forward / Backward of (micro-batch, chunk) and the point-to-point
// messages between stages (SendActivation / RecvActivation / SendGrad / RecvGrad, with the
// peer stage). With v chunks per stage (interleaved 1F1B) the model is cut into p * v
// virtual stages; chunk c of stage s is virtual stage c * p + s (Megatron's assignment), so
// activations go around the stages v times. Generators: fill-drain (GPipe: every forward,
// then every backward), 1F1B (stage s runs min(p - s - 1, m) warm-up forwards, then one
// forward and one backward in turn, then the remaining backwards) and interleaved 1F1B.
//
// CheckSchedule proves a schedule before it runs (the rules are in its comment), with a
// typed ScheduleError naming the rule, the stage and the action. SimulateSchedule runs the
// timeline (forward tf, backward tb units, messages free) and counts, per stage, the
// micro-batch activations alive at once (forward done, backward not yet).
//
// PipelineTrainer trains the GPT (train/gpt.h) cut into virtual stages, each a Gpt holding a
// contiguous range of blocks (the first also the embedding, the last the final norm, head
// and loss), on a mesh with a "pp" axis: every stage is a dp/tp/sp sub-mesh laid out by the
// same Layout, and the rank at position q of stage s exchanges its shard of an activation or
// gradient with the rank at position q of the peer stage (Communicator Send / Recv: the same
// layout on both sides, so the cross-mesh reshard is point to point).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rules/model/error.h"
#include "rules/model/mesh.h"
#include "runtime/comm/communicator.h"
#include "train/gpt.h"
#include "train/layout.h"
#include "train/optimizer.h"
#include "train/trainer.h"

namespace spmd::train {

// ---- Schedules -----------------------------------------------------------------------------

enum class ActionKind {
  kForward,         // forward of (micro_batch, chunk)
  kBackward,        // backward of (micro_batch, chunk)
  kSendActivation,  // the output of this stage's forward of (micro_batch, chunk) to `peer`
  kRecvActivation,  // the input of this stage's forward of (micro_batch, chunk) from `peer`
  kSendGrad,        // the input gradient of this stage's backward of (micro_batch, chunk)
  kRecvGrad,        // the output gradient this stage's backward of (micro_batch, chunk) needs
};
std::string_view ToString(ActionKind kind);  // "F", "B", "sendA", "recvA", "sendG", "recvG"

struct Action {
  ActionKind kind = ActionKind::kForward;
  int64_t micro_batch = 0;
  int64_t chunk = 0;  // on this stage: virtual stage chunk * stages + stage
  int64_t peer = -1;  // messages: the other stage; -1 for compute
  int64_t size = 0;   // messages: elements of the message (the receiver's must match)
  bool operator==(const Action&) const = default;
};
// "F(mb 3, chunk 1)", "sendA(mb 2, chunk 0) -> stage 1", "recvG(mb 0, chunk 0) <- stage 2".
std::string ToString(const Action& action);

struct Schedule {
  std::string name;
  int64_t stages = 1;                      // p
  int64_t micro_batches = 1;               // m
  int64_t chunks = 1;                      // v, virtual stages per stage
  std::vector<std::vector<Action>> ranks;  // per stage, in order
};

enum class ScheduleKind { kFillDrain, kOneFOneB, kInterleaved };
std::string_view ToString(ScheduleKind kind);  // "gpipe", "1f1b", "interleaved"
// "gpipe" (or "fill-drain"), "1f1b", "interleaved"; InvalidArgument ("schedule") otherwise.
ScheduleKind ParseScheduleKind(std::string_view text);

// The schedule of `kind` for p stages and m micro-batches (v chunks per stage for the
// interleaved kind; the others need v = 1). `sizes`: the elements of micro-batch i's
// messages (empty: 1 each). Messages are placed where the compute order needs them: a
// receive just before the forward (backward) that consumes it, a send just after the one
// that produces it. InvalidArgument naming the field ("stages", "micro_batches", "chunks",
// "sizes") for p, m, v outside [1, 4096] or sizes of another length.
Schedule MakeSchedule(ScheduleKind kind, int64_t stages, int64_t micro_batches, int64_t chunks = 1,
                      const std::vector<int64_t>& sizes = {});

// What a send costs its sender in the deadlock simulation.
enum class SendSemantics {
  // A send never blocks (a buffered mailbox: the thread backend); a receive blocks until
  // the matching send has been posted.
  kBuffered,
  // What the MPI backend gives: a send is posted and completes only once the peer has
  // posted the matching receive; before any later action other than another send (a
  // receive waits in Synchronize, and a compute may reshard through Synchronize) the
  // sender waits for every send it posted. A receive is posted, then waits.
  kRendezvous,
};

// The rule a schedule broke.
enum class Violation {
  kShape,                  // a field out of range (stages, micro-batch, chunk, peer, size)
  kComputeCount,           // a (micro-batch, chunk) without exactly one forward and one backward
  kBackwardBeforeForward,  // a backward on a stage before its own forward
  kForwardOrder,           // a forward before its input arrived (virtual stage k before k - 1)
                           // or an activation sent before it was computed
  kBackwardOrder,          // a backward before its output gradient arrived (k before k + 1)
                           // or a gradient sent before it was computed
  kUnmatched,              // a send without its receive or a receive without its send
  kMismatched,             // a send and the receive it meets differ (kind, micro-batch,
                           // chunk, size) or go to the wrong stage
  kDeadlock,               // the blocking simulation stops with stages still waiting
};
std::string_view ToString(Violation violation);

// InvalidArgument with the broken rule; field: "schedule.ranks[s][i]" (the action) or
// "schedule" (a deadlock: the message names every waiting stage and its action).
class ScheduleError : public SpmdError {
 public:
  ScheduleError(Violation violation, std::string field, const std::string& message)
      : SpmdError(ErrorType::kInvalidArgument, std::move(field),
                  std::string(ToString(violation)) + ": " + message),
        violation_(violation) {}
  Violation violation() const { return violation_; }

 private:
  Violation violation_;
};

// Throws ScheduleError unless, for every stage s and the schedule's p, m, v:
//  1. shape: p, m, v >= 1; ranks has p lists; every micro-batch in [0, m), chunk in
//     [0, v); compute actions have peer -1; messages a peer in [0, p) other than s and a
//     size >= 0;
//  2. every (micro-batch, chunk) has exactly one Forward and one Backward on s, and the
//     Forward comes first;
//  3. dependencies on s: Forward(mb, k) of virtual stage k > 0 comes after the
//     RecvActivation(mb, chunk) that brings its input (after Forward(mb, k - 1) when that
//     is on s itself, p = 1); SendActivation(mb, chunk) after Forward(mb, chunk);
//     Backward(mb, k) of k < p v - 1 after its RecvGrad (Backward(mb, k + 1) on s itself);
//     SendGrad after Backward; no message for the first (last) virtual stage's input
//     (output) gradient;
//  4. messages: between each ordered pair of stages the n-th send meets the n-th receive
//     (messages between two ranks arrive in order); both name the same kind, micro-batch
//     and size, the receiver is the next (activations) or previous (gradients) virtual
//     stage of the sender, and no send or receive is left over;
//  5. no deadlock: a greedy simulation under `semantics` runs every stage to its end.
void CheckSchedule(const Schedule& schedule, SendSemantics semantics = SendSemantics::kBuffered);

struct ScheduleStats {
  double makespan = 0;             // time of the last action's end
  double busy = 0;                 // compute time summed over stages
  double bubble = 0;               // 1 - busy / (p * makespan): the idle share of the stages
  std::vector<int64_t> peak_live;  // per stage: most (micro-batch, chunk) activations
                                   // alive at once (forward done, backward not yet)
  // Per stage, per action: its start and end time.
  std::vector<std::vector<std::pair<double, double>>> times;
};

// The timeline of a checked schedule: each stage runs its actions in order; a forward takes
// `forward_time`, a backward `backward_time`, a message nothing; a receive starts no earlier
// than its send. Runs CheckSchedule (buffered) first.
ScheduleStats SimulateSchedule(const Schedule& schedule, double forward_time = 1,
                               double backward_time = 1);

// ---- Training over pipeline stages -----------------------------------------------------------

struct PipelineOptions {
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  int64_t chunks = 1;  // v: virtual stages per stage (the interleaved schedule)
};

// The GPT trained over the stages of a mesh's "pp" axis (TrainOptions::micro_batches is m).
// The model's layers are cut into p * v virtual stages, virtual stage k holding blocks
// [L k / (p v), L (k + 1) / (p v)) (the first also the embedding and positions, the last the
// final norm, head and loss), each a Gpt of that part on its stage's mesh, laid out by a
// Layout of the other axes with `strategy`. Parameters keep the whole model's names and
// initial values, and none is shared between stages (the embedding and the head are
// separate parameters).
//
// A step runs this stage's list of the schedule (MakeSchedule with each micro-batch's
// activation elements for sizes; CheckSchedule under both semantics before it runs):
//   Forward: the input (the tokens, or the received activation as a leaf that requires
//     grad) through the part; the last virtual stage's loss is scaled by the micro-batch's
//     share of the rows. The recorded graph is stashed until the backward.
//   Backward: Backward from the received gradient (the loss: ones) through the stashed
//     graph; parameter gradients accumulate over micro-batches; the input's gradient, laid
//     out as the residual stream, is kept for SendGrad.
//   Messages: a run of consecutive messages is posted together (this rank's shard, to or
//     from the rank at the same position of the peer stage), then, if it holds a receive,
//     Synchronize waits for them: the rendezvous semantics CheckSchedule proves.
// After the list: AdamW on every local parameter, its clipping norm summed over the stages
// (Optimizer::set_norm_group). The loss is the mean over the whole batch, on every rank.
class PipelineTrainer {
 public:
  // InvalidArgument: "mesh" when this rank is not in it or "pp" is not an axis of it and
  // the other axes are not a Layout's; "options.micro_batches" below 1; "pipeline.chunks"
  // below 1 or above 1 for another schedule than interleaved.
  PipelineTrainer(const GptConfig& config, const Mesh& mesh, Strategy strategy,
                  const TrainOptions& options, const PipelineOptions& pipeline,
                  runtime::Communicator& comm);

  // One optimizer step on the batch of `step` (MakeBatch's). Throws InvalidArgument
  // ("batch") as Trainer::Step does, what MakeSchedule throws for (p, m, v), and
  // NonFiniteError as Trainer::Step does (the loss and the gradient norm are summed over
  // the stages first, so every rank of every stage throws alike).
  StepStats Step(const BatchSpec& batch, int64_t step, runtime::Communicator& comm);

  // Every parameter this rank's chunks hold, by name, its global value (float64);
  // collective over this stage's mesh.
  std::vector<std::pair<std::string, std::vector<double>>> GatherParams(
      runtime::Communicator& comm) const;

  int64_t stage() const { return stage_; }
  int64_t stages() const { return stages_; }
  const Layout& layout() const { return layout_; }
  // The schedule the last Step ran (all stages' lists).
  const Schedule& schedule() const { return schedule_; }
  // The most (micro-batch, chunk) forward graphs this rank held at once during the last
  // Step: the activations alive (forward done, backward not yet), counted as they are
  // stashed and freed.
  int64_t last_peak_live() const { return last_peak_live_; }

 private:
  int64_t stage_ = 0, stages_ = 1;
  std::vector<int64_t> coord_;  // this rank's coordinate on the whole mesh
  int pp_axis_ = -1;
  Mesh mesh_;
  Layout layout_;
  PipelineOptions pipeline_;
  TrainOptions options_;
  GptConfig config_;
  std::vector<Gpt> chunks_;  // chunk c: virtual stage c * stages + stage
  AdamW optimizer_;
  Schedule schedule_;
  int64_t last_peak_live_ = 0;

  int64_t PeerRank(int64_t stage) const;
};

}  // namespace spmd::train
