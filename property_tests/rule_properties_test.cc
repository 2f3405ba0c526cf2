// Level-1 verification (docs/ARCHITECTURE.md "Verification, three levels"): invariants of
// every rule, no numerics. Nothing here is written per op: each property loops over every
// registered op and draws its requests from the declarations (property_tests/generators.h).
//
// Properties: NeverCrashes (a), ValidAnswersAreValid (b), ReinferIsIdempotent (c),
// ReplicatedInReplicatedOut (d), ReverseAgreesWithForward and
// ReverseOnRandomOutputsAgreesWithForward (e), AnswersFollowTheDeclaration (f); plus
// GeneratorsReachEveryOp, which checks that b to f are not vacuous for any op.
//
// A failure prints the minimal request as an `spmd infer` JSON line (after the values
// RapidCheck drew, one request per op). RapidCheck's `reproduce` string replays it. To chase
// one op alone (a shorter report, faster shrinking), select ops with SPMD_PROP_OPS
// (`matmul,bmm` keeps those, `-reshape` drops one):
//   SPMD_PROP_OPS=matmul ./rule_properties_test --gtest_filter=RuleProperties.ReinferIsIdempotent
//
// Each case draws one request per op, so the default 100 cases are 100 requests per op
// and property. RC_PARAMS="max_success=1000" raises it.
//
// A crash inside a rule prints the request it was running. SPMD_PROP_FORK=1 runs every rule
// call in a child process first, so that a crash becomes a RapidCheck failure that shrinks
// to a minimal request (slow: one fork per call; use it with SPMD_PROP_OPS).
#include <gtest/gtest.h>

#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "property_tests/generators.h"
#include "rules/model/error.h"
#include "rules/engine/registry.h"

namespace spmd::prop {
namespace {

// ---- Running a rule ------------------------------------------------------------------------

// The outcome of one rule call: an answer, a typed error, or something else (a failure
// of the "bad input gives a typed error" invariant).
struct Outcome {
  std::optional<InferResult> result;
  std::optional<ErrorType> error;
  std::string field;
  std::string message;
  std::string foreign;  // what was thrown when it was not an SpmdError

  bool operator==(const Outcome&) const = default;

  std::string Describe() const {
    if (result) return "answer " + ToString(*result);
    if (error) return std::string(spmd::ToString(*error)) + " error: " + message;
    return foreign;
  }
};

template <class Call>
Outcome Run(Call&& call) {
  Outcome outcome;
  if (ForkMode()) {
    outcome.foreign = CrashInChild([&] { call(); });
    if (!outcome.foreign.empty()) return outcome;
  }
  try {
    outcome.result = call();
  } catch (const SpmdError& e) {
    outcome.error = e.type();
    outcome.field = e.field();
    outcome.message = e.what();
  } catch (const std::exception& e) {
    outcome.foreign = std::string("an exception that is not an SpmdError: ") + e.what();
  } catch (...) {
    outcome.foreign = "an exception that is not a std::exception";
  }
  return outcome;
}

Outcome Forward(const ForwardRequest& r) {
  NoteRequest(ToJsonLine(r));
  return Run([&] { return InferForward(*r.op, r.mesh, r.inputs, r.attrs); });
}

Outcome Reverse(const ReverseRequest& r) {
  NoteRequest(ToJsonLine(r));
  return Run([&] { return InferReverse(*r.op, r.mesh, r.input_shapes, r.outputs, r.attrs); });
}

std::vector<Shape> ShapesOf(const std::vector<TensorArg>& args) {
  std::vector<Shape> shapes;
  for (const TensorArg& arg : args) shapes.push_back(arg.shape);
  return shapes;
}

// The forward request with the same shapes and attrs and the given dist attrs.
ForwardRequest WithDists(const ForwardRequest& r, const std::vector<DistAttr>& dists) {
  ForwardRequest copy = r;
  for (size_t i = 0; i < copy.inputs.size(); ++i) copy.inputs[i].dist = dists[i];
  return copy;
}

// An answer for an accepted request; the request is printed if the rule now rejects it.
InferResult MustAnswer(const Outcome& outcome, const std::string& what, const std::string& line) {
  if (!outcome.result) RC_FAIL(what + " failed: " + outcome.Describe() + "\n  request: " + line);
  return *outcome.result;
}

// ---- Shared checks -----------------------------------------------------------------------

// An answer's dist attrs are valid: one per input, each valid for its input's rank; one per
// output of the declaration (for these shapes and attrs), each valid for its rank.
void CheckValidAnswer(const OpDecl& op, const Mesh& mesh, const std::vector<Shape>& shapes,
                      const Attrs& attrs, const InferResult& answer, const std::string& what,
                      const std::string& line) {
  const std::string context = what + " answer " + ToString(answer) + "\n  request: " + line;
  std::vector<int> ranks;
  try {
    ranks = OutputRanks(op, shapes, op.NormalizeAttrs(attrs));
  } catch (const SpmdError& e) {
    RC_FAIL("the declaration rejects a request its rule answered (" + std::string(e.what()) +
            "); " + context);
  }
  if (answer.inputs.size() != shapes.size()) {
    RC_FAIL(std::to_string(answer.inputs.size()) + " input dist attrs for " +
            std::to_string(shapes.size()) + " inputs; " + context);
  }
  if (answer.outputs.size() != ranks.size()) {
    RC_FAIL(std::to_string(answer.outputs.size()) + " output dist attrs, the declaration has " +
            std::to_string(ranks.size()) + " outputs; " + context);
  }
  try {
    for (size_t i = 0; i < shapes.size(); ++i) {
      Validate(answer.inputs[i], mesh, static_cast<int>(shapes[i].size()),
               "inputs[" + std::to_string(i) + "]");
    }
    for (size_t o = 0; o < ranks.size(); ++o) {
      Validate(answer.outputs[o], mesh, ranks[o], "outputs[" + std::to_string(o) + "]");
    }
  } catch (const SpmdError& e) {
    RC_FAIL("invalid dist attr: " + std::string(e.what()) + "; " + context);
  }
}

// The dims mappings of `attrs`, printed, without their partial maps.
std::vector<std::string> DimsOnly(const std::vector<DistAttr>& attrs) {
  std::vector<std::string> dims;
  for (const DistAttr& a : attrs) dims.push_back(spmd::ToString(DistAttr{a.dims, {}}));
  return dims;
}

// ---- a. Never crashes ------------------------------------------------------------------------

void CheckTyped(const Outcome& first, const Outcome& second, const std::string& what,
                const std::string& line) {
  if (!first.foreign.empty()) RC_FAIL(what + " threw " + first.foreign + "\n  request: " + line);
  if (first.error && first.field.empty()) {
    RC_FAIL(what + " threw an SpmdError that names no field: " + first.message +
            "\n  request: " + line);
  }
  if (!(first == second)) {
    RC_FAIL(what + " is not deterministic: first " + first.Describe() + ", then " +
            second.Describe() + "\n  request: " + line);
  }
}

std::string KindOf(const AttrValue& value) {
  static const char* names[] = {"bool", "int", "float", "string", "ints", "floats"};
  return names[value.index()];
}

// Why the attrs are bad whatever the rest of the request, judged from the declaration alone
// (not by NormalizeAttrs): an undeclared name, a name given twice (name and alias), a
// required attr missing, a value of a kind that does not convert to the declared one
// (op_decl.h: int -> float, int -> ints, ints -> floats; also accepted: float -> floats
// and an empty float list as ints), a non-finite float. Empty when none applies.
std::string BadAttrs(const OpDecl& op, const Attrs& attrs) {
  std::vector<int> given(op.attrs.size(), 0);
  for (const auto& [name, value] : attrs.values()) {
    size_t k = 0;
    for (; k < op.attrs.size(); ++k) {
      const AttrSpec& spec = op.attrs[k];
      bool match = spec.name == name;
      for (const std::string& alias : spec.aliases) match = match || alias == name;
      if (match) break;
    }
    if (k == op.attrs.size()) return "undeclared attr " + name;
    ++given[k];
    const AttrKind kind = op.attrs[k].kind;
    const auto* list = std::get_if<std::vector<double>>(&value);
    const bool converts =
        (kind == AttrKind::kBool && std::holds_alternative<bool>(value)) ||
        (kind == AttrKind::kInt && std::holds_alternative<int64_t>(value)) ||
        (kind == AttrKind::kFloat &&
         (std::holds_alternative<int64_t>(value) ||
          (std::holds_alternative<double>(value) && std::isfinite(std::get<double>(value))))) ||
        (kind == AttrKind::kString && std::holds_alternative<std::string>(value)) ||
        (kind == AttrKind::kInts && (std::holds_alternative<int64_t>(value) ||
                                     std::holds_alternative<std::vector<int64_t>>(value) ||
                                     (list != nullptr && list->empty()))) ||
        (kind == AttrKind::kFloats && !std::holds_alternative<bool>(value) &&
         !std::holds_alternative<std::string>(value) && !std::holds_alternative<int64_t>(value));
    if (!converts) return "attr " + name + " is a " + KindOf(value);
  }
  for (size_t k = 0; k < op.attrs.size(); ++k) {
    if (given[k] > 1) return "attr " + op.attrs[k].name + " given twice";
    if (given[k] == 0 && !op.attrs[k].default_value) return "required attr " + op.attrs[k].name + " missing";
  }
  return "";
}

bool WrongCount(const OpDecl& op, size_t count) {
  return op.variadic_inputs ? count == 0 : count != op.inputs.size();
}

bool BadShape(const Shape& shape) {
  for (int64_t s : shape) {
    if (s < 0) return true;
  }
  return false;
}

// Why a forward request is bad input whatever the op's rule says, or "": a wrong input
// count, a negative size, an invalid dist attr (SEMANTICS.md §2), bad attrs.
std::string BadForward(const ForwardRequest& r) {
  if (WrongCount(*r.op, r.inputs.size())) return "wrong input count";
  for (const TensorArg& input : r.inputs) {
    if (BadShape(input.shape)) return "a negative size";
    try {
      Validate(input.dist, r.mesh, static_cast<int>(input.shape.size()), "x");
    } catch (const SpmdError&) {
      return "an invalid dist attr";
    }
  }
  return BadAttrs(*r.op, r.attrs);
}

// The same for a reverse request, limited to what is checked before the rule is built (a
// builder may report Unsupported first otherwise): input count, input sizes, attrs.
std::string BadReverse(const ReverseRequest& r) {
  if (WrongCount(*r.op, r.input_shapes.size())) return "wrong input count";
  for (const Shape& shape : r.input_shapes) {
    if (BadShape(shape)) return "a negative size";
  }
  return BadAttrs(*r.op, r.attrs);
}

void CheckBadInput(const Outcome& outcome, const std::string& bad, const std::string& what,
                   const std::string& line) {
  if (bad.empty()) return;
  if (!outcome.error || *outcome.error != ErrorType::kInvalidArgument) {
    RC_FAIL(what + " of a bad request (" + bad + ") gave " + outcome.Describe() +
            " instead of an InvalidArgument error\n  request: " + line);
  }
}

// Arbitrary (often invalid) requests: forward and reverse either answer or throw an
// SpmdError naming a field; any other exception fails, a crash fails by itself. Each call
// is made twice and must give the same outcome (rules are deterministic, SEMANTICS.md §3).
// A request that is bad input by construction (BadForward, BadReverse) must give an
// InvalidArgument error (bad input gives a typed error, never a crash).
RC_GTEST_PROP(RuleProperties, NeverCrashes, ()) {
  for (const OpDecl* op : OpsUnderTest()) {
    const ForwardRequest forward = *GenArbitraryForward(*op);
    const std::string forward_line = ToJsonLine(forward);
    const Outcome forward_outcome = Forward(forward);
    CheckTyped(forward_outcome, Forward(forward), "forward", forward_line);
    CheckBadInput(forward_outcome, BadForward(forward), "forward", forward_line);

    const ReverseRequest reverse = *GenArbitraryReverse(*op);
    const std::string reverse_line = ToJsonLine(reverse);
    const Outcome reverse_outcome = Reverse(reverse);
    CheckTyped(reverse_outcome, Reverse(reverse), "reverse", reverse_line);
    CheckBadInput(reverse_outcome, BadReverse(reverse), "reverse", reverse_line);
  }
}

// ---- b. Valid answers are valid ----------------------------------------------------------------

// For an accepted valid request: one required dist attr per input, each valid against the
// mesh and the input's rank; one dist attr per declared output, each valid against the mesh
// and the rank the declaration gives (einsum: the output notation's length; DimTrans: the
// number of output transforms). Also: a required input keeps a given partial axis with its
// reduce op (an acceptance) or reduces it, never changes it to another reduce op. It may
// become partial on a new axis (R -> P and S -> P are local steps moving no bytes: a linear
// op keeps its other input's partial sum so; SEMANTICS.md §4 "Partial inputs"); the checker
// proves those answers sound. An accumulated input (EinsumSpec::accumulated) takes its
// output's partial map whatever it was given (P(avg) -> P(sum) is a rescale, P(max) ->
// P(sum) a reduction then a local step: reshards like any other).
RC_GTEST_PROP(RuleProperties, ValidAnswersAreValid, ()) {
  for (const OpDecl* op : OpsUnderTest()) {
    const std::optional<ForwardRequest> request = *GenAccepted(*op, DistMode::kAny);
    if (!request) continue;
    const std::string line = ToJsonLine(*request);
    const InferResult answer = MustAnswer(Forward(*request), "forward", line);
    CheckValidAnswer(*op, request->mesh, ShapesOf(request->inputs), request->attrs, answer,
                     "forward", line);
    const std::optional<EinsumSpec> spec =
        BuildEinsumSpec(*op, ShapesOf(request->inputs), op->NormalizeAttrs(request->attrs));
    auto accumulated = [&](size_t i) {
      if (!spec) return false;
      for (const auto& [input, output] : spec->accumulated) {
        if (input == static_cast<int>(i)) return true;
      }
      return false;
    };
    for (size_t i = 0; i < answer.inputs.size(); ++i) {
      if (accumulated(i)) continue;
      const PartialMap& given = request->inputs[i].dist.partial;
      for (const auto& [axis, reduce] : answer.inputs[i].partial) {
        auto it = given.find(axis);
        if (it != given.end() && it->second != reduce) {
          RC_FAIL("required inputs[" + std::to_string(i) + "] " +
                  spmd::ToString(answer.inputs[i]) + " changes the reduce op of the given " +
                  spmd::ToString(request->inputs[i].dist) + "\n  request: " + line);
        }
      }
    }
  }
}

// ---- c. Re-inferring is idempotent -------------------------------------------------------------

// Forward on the required inputs (same shapes and attrs) is accepted and returns exactly the
// same answer: the same required inputs and the same outputs, partial maps included.
RC_GTEST_PROP(RuleProperties, ReinferIsIdempotent, ()) {
  for (const OpDecl* op : OpsUnderTest()) {
    const std::optional<ForwardRequest> request = *GenAccepted(*op, DistMode::kAny);
    if (!request) continue;
    const std::string line = ToJsonLine(*request);
    const InferResult first = MustAnswer(Forward(*request), "forward", line);
    const ForwardRequest again = WithDists(*request, first.inputs);
    const InferResult second =
        MustAnswer(Forward(again), "forward on the required inputs", ToJsonLine(again));
    if (!(first == second)) {
      RC_FAIL("re-inferring changed the answer:\n  first  " + ToString(first) +
              "\n  second " + ToString(second) + "\n  request: " + line);
    }
  }
}

// ---- d. Replicated in, replicated out ----------------------------------------------------------

// Every input replicated and non-partial: every required input is replicated and
// non-partial, and so is every output (no factor is sharded, so no contraction leaves a
// partial either).
RC_GTEST_PROP(RuleProperties, ReplicatedInReplicatedOut, ()) {
  for (const OpDecl* op : OpsUnderTest()) {
    const std::optional<ForwardRequest> request = *GenAccepted(*op, DistMode::kReplicated);
    if (!request) continue;
    const std::string line = ToJsonLine(*request);
    const InferResult answer = MustAnswer(Forward(*request), "forward", line);
    bool replicated = true;
    for (const DistAttr& d : answer.inputs) replicated = replicated && d.IsReplicated();
    for (const DistAttr& d : answer.outputs) replicated = replicated && d.IsReplicated();
    if (!replicated) {
      RC_FAIL("replicated inputs gave " + ToString(answer) + "\n  request: " + line);
    }
  }
}

// ---- e. Reverse agrees with forward -----------------------------------------------------------

// Whether `outputs` disagree under the op's einsum notation: a letter with two different
// non-empty axis lists, or a mesh axis in the lists of two letters. Always false for a
// DimTrans op (one output).
bool OutputsConflict(const OpDecl& op, const std::vector<Shape>& shapes,
                     const std::vector<TensorArg>& outputs, const Attrs& attrs) {
  if (!op.einsum) return false;
  const EinsumSpec spec = *BuildEinsumSpec(op, shapes, op.NormalizeAttrs(attrs));
  std::map<FactorId, AxisList> lists;
  std::map<int, FactorId> owner;
  for (size_t o = 0; o < outputs.size() && o < spec.outputs.size(); ++o) {
    for (size_t d = 0; d < spec.outputs[o].size(); ++d) {
      FactorId letter = spec.outputs[o][d];
      const AxisList& axes = outputs[o].dist.dims[d];
      if (letter == kBroadcastDim || Contains(spec.forced_replicated, letter) || axes.empty()) {
        continue;  // forced-replicated factors claim nothing in reverse
      }
      for (const auto& [follower, leader] : spec.tied) {
        if (letter == follower) letter = leader;  // a follower claims its leader's list
      }
      auto [it, added] = lists.emplace(letter, axes);
      if (!added && it->second != axes) return true;
      for (int axis : axes) {
        auto [at, fresh] = owner.emplace(axis, letter);
        if (!fresh && at->second != letter) return true;
      }
    }
  }
  return false;
}

// Reverse on `outputs` (shapes and dist attrs; their partial maps are ignored by reverse),
// then forward on the reverse's inputs. Asserted:
//  1. reverse answers, or throws an SpmdError of type Conflict; any other error on a
//     well-formed request fails. A Conflict must be real: only an einsum op can have one,
//     and only when, under its notation (a tied follower counted as its leader), the outputs give one factor two different
//     non-empty axis lists or one mesh axis to two factors (`1` dims and forced-replicated
//     factors do not count);
//  2. the reverse's answer is valid (as in ValidAnswersAreValid) and carries no partial
//     map, on inputs or outputs (DECISIONS.md "Reverse");
//  3. forward accepts the reverse's inputs and requires them unchanged (the reverse's
//     inputs are a fixed point: nothing to reshard);
//  4. forward's outputs have the same dims mappings as the reverse's outputs. Their
//     partial maps are not compared: forward adds the partial of a contraction (a factor
//     that some output lacks, matmul_grad's x_grad lacks n), which the reverse's outputs
//     never carry.
// Returns false when the reverse reported a Conflict.
bool CheckReverseAgrees(const OpDecl& op, const Mesh& mesh, const std::vector<Shape>& shapes,
                        const std::vector<TensorArg>& outputs, const Attrs& attrs) {
  const ReverseRequest reverse{&op, mesh, shapes, outputs, attrs};
  const std::string line = ToJsonLine(reverse);
  const Outcome outcome = Reverse(reverse);
  if (outcome.error && *outcome.error == ErrorType::kConflict) {
    if (!OutputsConflict(op, shapes, outputs, attrs)) {
      RC_FAIL("reverse reports a Conflict for outputs that agree: " + outcome.message +
              "\n  request: " + line);
    }
    return false;
  }
  const InferResult back = MustAnswer(outcome, "reverse", line);
  CheckValidAnswer(op, mesh, shapes, attrs, back, "reverse", line);
  for (const std::vector<DistAttr>* list : {&back.inputs, &back.outputs}) {
    for (const DistAttr& d : *list) {
      if (d.IsPartial()) RC_FAIL("reverse answered with a partial: " + ToString(back) + "\n  request: " + line);
    }
  }
  ForwardRequest forward{&op, mesh, {}, attrs};
  for (size_t i = 0; i < shapes.size(); ++i) forward.inputs.push_back({shapes[i], back.inputs[i]});
  const std::string forward_line = ToJsonLine(forward);
  const InferResult again = MustAnswer(Forward(forward), "forward on the reverse's inputs",
                                       forward_line + "\n  reverse request: " + line);
  if (again.inputs != back.inputs) {
    RC_FAIL("forward on the reverse's inputs requires other inputs:\n  reverse " +
            ToString(back) + "\n  forward " + ToString(again) + "\n  reverse request: " + line);
  }
  if (DimsOnly(again.outputs) != DimsOnly(back.outputs)) {
    RC_FAIL("forward on the reverse's inputs gives other outputs:\n  reverse " +
            ToString(back) + "\n  forward " + ToString(again) + "\n  reverse request: " + line);
  }
  return true;
}

// The outputs of an accepted forward request with their declared shapes.
std::vector<TensorArg> OutputArgs(const ForwardRequest& request,
                                  const std::vector<DistAttr>& dists) {
  std::vector<Shape> shapes;
  try {
    shapes = OutputShapes(*request.op, ShapesOf(request.inputs),
                          request.op->NormalizeAttrs(request.attrs));
  } catch (const SpmdError& e) {
    RC_FAIL("the declaration rejects an accepted request: " + std::string(e.what()) +
            "\n  request: " + ToJsonLine(request));
  }
  if (shapes.size() != dists.size()) {
    RC_FAIL(std::to_string(dists.size()) + " outputs for " + std::to_string(shapes.size()) +
            " output shapes\n  request: " + ToJsonLine(request));
  }
  // A data-dependent dim (nonzero's count) is whatever the run gave: any size fits.
  for (Shape& shape : shapes) {
    for (int64_t& size : shape) {
      if (size == kDataDependentDim) size = *rc::gen::inRange<int64_t>(0, 7);
    }
  }
  std::vector<TensorArg> args;
  for (size_t o = 0; o < dists.size(); ++o) args.push_back({shapes[o], dists[o]});
  return args;
}

// Reverse on the outputs of a successful forward (partial maps included: reverse ignores
// them), then CheckReverseAgrees.
RC_GTEST_PROP(RuleProperties, ReverseAgreesWithForward, ()) {
  for (const OpDecl* op : OpsUnderTest()) {
    const std::optional<ForwardRequest> request = *GenAccepted(*op, DistMode::kAny);
    if (!request) continue;
    const InferResult answer = MustAnswer(Forward(*request), "forward", ToJsonLine(*request));
    const std::vector<TensorArg> outputs = OutputArgs(*request, answer.outputs);
    CheckReverseAgrees(*op, request->mesh, ShapesOf(request->inputs), outputs, request->attrs);
  }
}

// The same assertions for random valid output dist attrs (partial axes included), which
// also reach the reverse's Conflict paths (a factor on two different axis lists, one axis
// on two factors).
RC_GTEST_PROP(RuleProperties, ReverseOnRandomOutputsAgreesWithForward, ()) {
  for (const OpDecl* op : OpsUnderTest()) {
    const std::optional<ForwardRequest> request = *GenAccepted(*op, DistMode::kReplicated);
    if (!request) continue;
    const InferResult answer = MustAnswer(Forward(*request), "forward", ToJsonLine(*request));
    std::vector<DistAttr> dists;
    for (const DistAttr& d : answer.outputs) {
      dists.push_back(*GenDistAttr(request->mesh, d.rank()));
    }
    const std::vector<TensorArg> outputs = OutputArgs(*request, dists);
    CheckReverseAgrees(*op, request->mesh, ShapesOf(request->inputs), outputs, request->attrs);
  }
}

// ---- f. Answers follow the declaration ---------------------------------------------------------

// Einsum branch of AnswersFollowTheDeclaration.
void CheckEinsumAnswer(const OpDecl& op, const ForwardRequest& request, const InferResult& answer,
                       const std::string& line) {
  const std::vector<Shape> shapes = ShapesOf(request.inputs);
  const EinsumSpec spec = *BuildEinsumSpec(op, shapes, op.NormalizeAttrs(request.attrs));
  const std::string context = "\n  notation " + spec.ToString() + "\n  answer " +
                              ToString(answer) + "\n  request: " + line;
  if (answer.inputs.size() != spec.inputs.size() || answer.outputs.size() != spec.outputs.size()) {
    RC_FAIL("answer and notation disagree on operand counts" + context);
  }

  // 1, 2: one list per factor; `1` and forced factors replicated.
  std::map<FactorId, AxisList> merged;
  auto visit = [&](const Notation& notation, const DistAttr& attr, const std::string& where) {
    for (size_t d = 0; d < notation.size(); ++d) {
      const FactorId letter = notation[d];
      const AxisList& axes = attr.dims[d];
      const bool forced = Contains(spec.forced_replicated, letter);
      if ((letter == kBroadcastDim || forced) && !axes.empty()) {
        RC_FAIL(where + " dim " + std::to_string(d) + " is sharded but is " +
                (letter == kBroadcastDim ? "a `1` dim" : "forced replicated") + context);
      }
      if (letter == kBroadcastDim) continue;
      auto [it, added] = merged.emplace(letter, axes);
      if (!added && it->second != axes) {
        RC_FAIL(where + " dim " + std::to_string(d) + " gives its letter another axis list" +
                context);
      }
    }
  };
  // An input whose values the op never reads is required exactly as given (nothing moves
  // for it) and takes no part in the factor properties below.
  auto unread = [&](size_t i) { return Contains(spec.unread_inputs, static_cast<int>(i)); };
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (unread(i)) {
      if (!(answer.inputs[i] == request.inputs[i].dist)) {
        RC_FAIL("required inputs[" + std::to_string(i) + "] is unread but not as given" + context);
      }
      continue;
    }
    visit(spec.inputs[i], answer.inputs[i], "required inputs[" + std::to_string(i) + "]");
  }
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    visit(spec.outputs[o], answer.outputs[o], "outputs[" + std::to_string(o) + "]");
  }
  std::vector<bool> used(request.mesh.ndim(), false);
  for (const auto& [letter, axes] : merged) {
    for (int axis : axes) used[axis] = true;
  }

  // 3: a required partial is on a mesh axis no merged factor uses, with a given one's reduce op.
  // Which given partials the rule keeps is its acceptance policy (DECISIONS.md); that a kept
  // one is sound is the checker's proof (spmd check), and that a dropped one was needed is
  // the completeness report's, so this property does not restate the policy.
  // An accumulated input (EinsumSpec::accumulated) is required with its output's partial map,
  // whatever factors shard those axes (it is added once into each addend of the output).
  auto accumulated_into = [&](size_t i) {
    for (const auto& [input, output] : spec.accumulated) {
      if (input == static_cast<int>(i)) return output;
    }
    return -1;
  };
  for (size_t i = 0; i < answer.inputs.size(); ++i) {
    if (unread(i)) continue;
    if (const int o = accumulated_into(i); o >= 0) {
      if (answer.inputs[i].partial != answer.outputs[static_cast<size_t>(o)].partial) {
        RC_FAIL("required inputs[" + std::to_string(i) + "] is accumulated into outputs[" + std::to_string(o) +
                "] but its partial map is not that output's" + context);
      }
      continue;
    }
    for (const auto& [axis, reduce] : answer.inputs[i].partial) {
      // A new partial axis is a local step (R -> P, S -> P: a linear op keeping another
      // input's partial); a given one keeps its reduce op.
      auto given = request.inputs[i].dist.partial.find(axis);
      if (given != request.inputs[i].dist.partial.end() && given->second != reduce) {
        RC_FAIL("required inputs[" + std::to_string(i) + "] changes the reduce op on mesh axis " +
                std::to_string(axis) + context);
      }
      if (used[axis]) {
        RC_FAIL("required inputs[" + std::to_string(i) + "] is partial on mesh axis " +
                std::to_string(axis) + ", which a factor also shards" + context);
      }
    }
  }

  // 4: output partials: the contraction's and the inputs' kept ones, of the inputs the output
  // reads (EinsumSpec::output_reads; an accumulated input's partial is the output's own).
  auto reads = [&](size_t o, size_t i) {
    return spec.output_reads.empty() || Contains(spec.output_reads[o], static_cast<int>(i));
  };
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    PartialMap expected;
    for (size_t i = 0; i < answer.inputs.size(); ++i) {
      if (unread(i) || accumulated_into(i) >= 0 || !reads(o, i)) continue;
      expected.insert(answer.inputs[i].partial.begin(), answer.inputs[i].partial.end());
    }
    if (Contains(spec.whole_outputs, static_cast<int>(o))) expected.clear();  // never partial
    for (const auto& [letter, axes] : merged) {
      if (Contains(spec.whole_outputs, static_cast<int>(o))) break;
      if (Contains(spec.outputs[o], letter) || Contains(spec.exchanged, letter)) continue;
      bool read = false;  // a letter no input of the output holds is not summed over
      for (size_t i = 0; i < spec.inputs.size(); ++i) read = read || (reads(o, i) && Contains(spec.inputs[i], letter));
      if (!read) continue;
      // A tied follower is sharded with its leader (each shard meets its own piece), so
      // it sums nothing over its axes.
      bool follower = false;
      for (const auto& [f, leader] : spec.tied) follower = follower || f == letter;
      if (follower) continue;
      for (int axis : axes) expected[axis] = spec.reduce;
    }
    if (answer.outputs[o].partial != expected) {
      RC_FAIL("outputs[" + std::to_string(o) + "] partial map is not " +
              spmd::ToString(DistAttr{{}, expected}) +
              " (the absent factors' axes with the op's reduce op, and the accepted input "
              "partials)" + context);
    }
  }

  // 5: a factor keeps one of its claims (the cheapest wins a contest: docs/DECISIONS.md),
  // takes its leader's list (a tied follower), takes mesh axes after a claim (the partial
  // axes reduce-scattered onto it) or after an empty claim or one of size-1 axes (an idle
  // axis too), or is cleared.
  if (op.forward_override) return;
  std::map<FactorId, std::vector<AxisList>> claims;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (unread(i)) continue;
    for (size_t d = 0; d < spec.inputs[i].size(); ++d) {
      const FactorId letter = spec.inputs[i][d];
      const AxisList& given = request.inputs[i].dist.dims[d];
      if (letter != kBroadcastDim && !given.empty()) claims[letter].push_back(given);
    }
  }
  std::map<FactorId, FactorId> leader_of;
  for (const auto& [follower, leader] : spec.tied) leader_of[follower] = leader;
  for (const auto& [letter, axes] : merged) {
    if (axes.empty()) continue;
    std::vector<AxisList> own = claims[letter];
    for (const auto& [follower, leader] : spec.tied) {  // tied factors share their claims
      const FactorId other = follower == letter ? leader : leader == letter ? follower : -1;
      if (other >= 0) own.insert(own.end(), claims[other].begin(), claims[other].end());
    }
    bool explained = std::find(own.begin(), own.end(), axes) != own.end();
    auto lead = leader_of.find(letter);
    if (!explained && lead != leader_of.end()) {
      auto it = merged.find(lead->second);
      explained = it != merged.end() && it->second == axes;
    }
    // Or axes of size above 1 appended to one of its claims, to an empty claim or to one of
    // size-1 axes: an idle axis offered to a free factor (§4 step 3b), then the partial axes
    // of inputs reduce-scattered onto it (step 4b), which may also follow a real claim
    // (within its shards). So at most one appended axis is partial in no input.
    for (size_t k = axes.size(); !explained && k-- > 0;) {
      const AxisList prefix(axes.begin(), axes.begin() + static_cast<std::ptrdiff_t>(k));
      bool whole = true;
      for (int axis : prefix) whole = whole && request.mesh.axis_size(axis) == 1;
      if (!whole && std::find(own.begin(), own.end(), prefix) == own.end()) continue;
      int unpartial = 0;
      bool sized = true;
      for (size_t j = k; j < axes.size(); ++j) {
        sized = sized && request.mesh.axis_size(axes[j]) > 1;
        bool partial = false;
        for (const auto& in : request.inputs) partial = partial || in.dist.partial.count(axes[j]) > 0;
        unpartial += partial ? 0 : 1;
      }
      explained = sized && unpartial <= 1 && (unpartial == 0 || whole);
    }
    if (!explained) {
      RC_FAIL("factor '" + EinsumSpec::FactorName(letter) +
              "' is sharded on axes none of its claims gave" + context);
    }
  }
}

// The input dim whose sharding an output dim with transform `t` may carry, or -1.
int CarriedDim(const DimTrans& t) {
  switch (t.kind()) {
    case DimTrans::Kind::kInputDim:
      return t.input_dim();
    case DimTrans::Kind::kFlatten:  // only the leading dim of a group (§6.2)
      return t.parts()[0].kind() == DimTrans::Kind::kInputDim ? t.parts()[0].input_dim() : -1;
    case DimTrans::Kind::kSplit:  // only piece 0
      return t.piece() == 0 ? CarriedDim(t.parts()[0]) : -1;
    case DimTrans::Kind::kSingleton:
      return -1;
  }
  return -1;
}

// DimTrans branch of AnswersFollowTheDeclaration.
void CheckDimTransAnswer(const OpDecl& op, const ForwardRequest& request,
                         const InferResult& answer, const std::string& line) {
  const std::vector<Shape> shapes = ShapesOf(request.inputs);
  const DimTransSpec spec =
      op.dimtrans(RuleContext{shapes, op.NormalizeAttrs(request.attrs)});
  std::string transforms;
  for (const DimTrans& t : spec.outputs) transforms += (transforms.empty() ? "" : ", ") + t.ToString();
  const std::string context = "\n  transforms [" + transforms + "]\n  answer " +
                              ToString(answer) + "\n  request: " + line;
  if (answer.inputs.size() != 1 || answer.outputs.size() != 1) {
    RC_FAIL("a DimTrans op answers one input and one output" + context);
  }
  const DistAttr& required = answer.inputs[0];
  const DistAttr& out = answer.outputs[0];
  const DistAttr& given = request.inputs[0].dist;
  if (required.partial != given.partial || out.partial != given.partial) {
    RC_FAIL("a shape op keeps every partial axis with its reduce op" + context);
  }
  std::vector<bool> carried(required.dims.size(), false);
  std::set<int> given_axes;
  for (const AxisList& axes : given.dims) given_axes.insert(axes.begin(), axes.end());
  for (size_t d = 0; d < spec.outputs.size(); ++d) {
    const int from = CarriedDim(spec.outputs[d]);
    if (from < 0) {
      if (!out.dims[d].empty()) RC_FAIL("output dim " + std::to_string(d) + " carries no input dim but is sharded" + context);
      continue;
    }
    carried[from] = true;
    if (out.dims[d] != required.dims[from]) {
      RC_FAIL("output dim " + std::to_string(d) + " does not take the sharding of input dim " +
              std::to_string(from) + context);
    }
    for (int axis : out.dims[d]) {
      if (!given_axes.count(axis)) RC_FAIL("a shape op shards on an axis the input does not use" + context);
    }
  }
  for (size_t d = 0; d < required.dims.size(); ++d) {
    if (!carried[d] && !required.dims[d].empty()) {
      RC_FAIL("required input dim " + std::to_string(d) +
              " is sharded but no output dim carries it" + context);
    }
  }
}

// The forward answer follows the declaration. Asserted, for an accepted valid request:
// - einsum ops (SEMANTICS.md §4, DECISIONS.md "The einsum engine"):
//   1. every letter has one axis list over all required inputs and outputs (step 5);
//   2. `1` dims and forced-replicated letters are replicated everywhere (steps 4-5);
//   3. each required input's partial map is part of the given one, on mesh axes no merged
//      factor uses (which parts the rule keeps is proven sound by the checker, not
//      restated here);
//   4. each output's partial map is the union of the kept input partials and, with the op's
//      reduce op, the axes of the merged factors absent from that output (step 6), but
//      for the exchanged factors (the op combines their pieces itself);
//   5. without a forward override (concat and stack's cost rule), a letter's merged list is
//      the first non-empty list given for it in walk order (inputs in order, dims in
//      order), or empty (steps 1-3: D1 keeps the first claim; a collision or a forced
//      replication clears it).
// - DimTrans ops (SEMANTICS.md §6): the partial map is kept as given on the required input
//   and the output; an output dim carries the required sharding of the input dim its
//   transform inherits from (InputDim, a Flatten's leading dim, a Split's piece 0) or
//   nothing; a required input dim no output dim carries is replicated; no axis appears
//   that the input did not use.
RC_GTEST_PROP(RuleProperties, AnswersFollowTheDeclaration, ()) {
  for (const OpDecl* op : OpsUnderTest()) {
    const std::optional<ForwardRequest> request = *GenAccepted(*op, DistMode::kAny);
    if (!request) continue;
    const std::string line = ToJsonLine(*request);
    const InferResult answer = MustAnswer(Forward(*request), "forward", line);
    if (op->dimtrans) {
      CheckDimTransAnswer(*op, *request, answer, line);
    } else {
      CheckEinsumAnswer(*op, *request, answer, line);
    }
  }
}

// ---- The generators reach every op -----------------------------------------------------------

// Not a property: samples the generators with fixed seeds and checks that every op gets
// accepted valid requests (so that b to e are not vacuous for it). Prints, per op, the share
// of samples that were accepted, whose answer shards some required input, whose answer has
// a co-shard, whose outputs are partial, and whose output shapes are known (the share the
// reverse properties check).
TEST(RuleProperties, GeneratorsReachEveryOp) {
  constexpr int kSamples = 60;
  std::string table;
  for (const OpDecl* op : OpsUnderTest()) {
    int accepted = 0, sharded = 0, coshard = 0, partial = 0, shaped = 0;
    for (int s = 0; s < kSamples; ++s) {
      const auto gen = GenAccepted(*op, DistMode::kAny);
      const std::optional<ForwardRequest> request =
          gen(rc::Random(0x5eed0000u + static_cast<uint64_t>(s)), rc::kNominalSize).value();
      if (!request) continue;
      ++accepted;
      const Outcome outcome = Forward(*request);
      if (!outcome.result) {
        ADD_FAILURE() << op->name << ": an accepted request is now rejected: "
                      << outcome.Describe() << "\n  request: " << ToJsonLine(*request);
        continue;
      }
      bool any_sharded = false, any_coshard = false, any_partial = false;
      for (const DistAttr& d : outcome.result->inputs) {
        for (const AxisList& axes : d.dims) {
          any_sharded = any_sharded || !axes.empty();
          any_coshard = any_coshard || axes.size() > 1;
        }
      }
      for (const DistAttr& d : outcome.result->outputs) any_partial = any_partial || d.IsPartial();
      sharded += any_sharded;
      coshard += any_coshard;
      partial += any_partial;
      try {
        OutputShapes(*op, ShapesOf(request->inputs), op->NormalizeAttrs(request->attrs));
        ++shaped;
      } catch (const SpmdError& e) {
        ADD_FAILURE() << op->name << ": the declaration rejects an accepted request: " << e.what();
      }
    }
    EXPECT_GT(accepted, 0) << op->name << ": no accepted request in " << kSamples << " samples";
    char row[160];
    std::snprintf(row, sizeof row, "  %-27s %9d%% %8d%% %9d%% %12d%% %14d%%\n", op->name.c_str(),
                  100 * accepted / kSamples, 100 * sharded / kSamples, 100 * coshard / kSamples,
                  100 * partial / kSamples, 100 * shaped / kSamples);
    table += row;
  }
  std::printf("Valid requests per op (%d samples):\n  %-27s %10s %9s %10s %13s %15s\n%s", kSamples,
              "op", "accepted", "sharded", "co-shard", "partial out", "shapes known",
              table.c_str());
}

}  // namespace
}  // namespace spmd::prop
