// Factor ids and declared output shapes: no limit on the number of factors, every output
// shape known from the declaration, one readable printer.
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "rules/engine/einsum.h"
#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "rules/engine/op_decl.h"
#include "rules/engine/registry.h"

namespace spmd {
namespace {

TEST(EinsumSpec, PrintsLettersThenNumberedFactors) {
  EXPECT_EQ(EinsumSpec::FactorName(0), "a");
  EXPECT_EQ(EinsumSpec::FactorName(25), "z");
  EXPECT_EQ(EinsumSpec::FactorName(26), "{f26}");
  EXPECT_EQ(EinsumSpec::FactorName(kBroadcastDim), "1");
  EinsumSpec spec = notation::FromLetters({"mk", "kn"}, {"mn"}, "k");
  EXPECT_EQ(spec.ToString(), "ab,bc->ac R(b) [sum]");
  const FactorId extra = [&] {
    FactorId f = 0;
    for (int i = 0; i < 30; ++i) f = spec.AddFactor(2);
    return f;
  }();
  spec.outputs[0].push_back(extra);
  EXPECT_EQ(spec.ToString(), "ab,bc->ac{f32} R(b) [sum]");
}

TEST(EinsumSpec, ManyDistinctFactors) {
  // An outer product of 300 1-D operands, each its own factor; operand i is sharded on
  // mesh axis i % 2 for the first two operands only (one axis shards one factor).
  constexpr int kFactors = 300;
  EinsumSpec spec;
  Notation out;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DistAttr> inputs;
  for (int i = 0; i < kFactors; ++i) {
    const FactorId f = spec.AddFactor();
    spec.inputs.push_back({f});
    out.push_back(f);
    shapes.push_back({1 + i % 3});
    DistAttr d = DistAttr::Replicated(1);
    if (i < 2) d.dims[0] = {i};
    inputs.push_back(d);
  }
  spec.outputs.push_back(out);
  BindFactorSizes(spec, shapes);
  const std::vector<std::vector<int64_t>> out_shapes = EinsumOutputShapes(spec);
  ASSERT_EQ(out_shapes.size(), 1u);
  ASSERT_EQ(out_shapes[0].size(), static_cast<size_t>(kFactors));
  for (int i = 0; i < kFactors; ++i) EXPECT_EQ(out_shapes[0][i], 1 + i % 3);
  const InferResult result = InferEinsumForward(spec, Mesh({2, 2}), inputs);
  ASSERT_EQ(result.outputs.size(), 1u);
  EXPECT_EQ(result.outputs[0].dims[0], AxisList{0});
  EXPECT_EQ(result.outputs[0].dims[1], AxisList{1});
  for (int i = 2; i < kFactors; ++i) EXPECT_TRUE(result.outputs[0].dims[i].empty()) << i;
  EXPECT_NE(spec.ToString().find("{f299}"), std::string::npos);
}

TEST(EinsumSpec, SizeMismatchNamesTheInput) {
  EinsumSpec spec = notation::FromLetters({"ab", "bc"}, {"ac"});
  try {
    BindFactorSizes(spec, {{2, 3}, {4, 5}});
    ADD_FAILURE() << "no error";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
    EXPECT_EQ(e.field(), "inputs[1].shape");
  }
}

TEST(OutputShapes, ConcatOfSeveralHundredInputs) {
  const OpDecl& concat = *FindOp("concat");
  constexpr int kInputs = 400;
  const Mesh mesh({2});
  std::vector<TensorArg> args;
  std::vector<Shape> shapes;
  int64_t total = 0;
  for (int i = 0; i < kInputs; ++i) {
    const Shape shape{4, 1 + i % 5};
    total += shape[1];
    shapes.push_back(shape);
    DistAttr d = DistAttr::Replicated(2);
    if (i % 2 == 0) d.dims[0] = {0};
    args.push_back({shape, d});
  }
  const Attrs attrs = Attrs().With("axis", int64_t{1});
  const InferResult result = InferForward(concat, mesh, args, attrs);
  ASSERT_EQ(result.inputs.size(), static_cast<size_t>(kInputs));
  for (const DistAttr& in : result.inputs) EXPECT_EQ(in.dims[0], AxisList{0});
  EXPECT_EQ(result.outputs[0].dims[0], AxisList{0});
  EXPECT_EQ(InferOutputShapes(concat, shapes, concat.NormalizeAttrs(attrs)),
            (std::vector<Shape>{{4, total}}));
  // And the einsum spec behind it has one factor per input's concat dim.
  const auto spec = BuildEinsumSpec(concat, shapes, concat.NormalizeAttrs(attrs));
  ASSERT_TRUE(spec.has_value());
  EXPECT_GE(spec->num_factors(), kInputs + 2);
}

TEST(OutputShapes, ConcatOfInputsOfDifferentRanksIsRefused) {
  const OpDecl& concat = *FindOp("concat");
  const Attrs attrs = concat.NormalizeAttrs(Attrs().With("axis", int64_t{2}));
  try {
    InferOutputShapes(concat, {{2, 3, 4}, {2, 3}}, attrs);
    ADD_FAILURE() << "no error";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
    EXPECT_EQ(e.field(), "inputs[1].shape");
  }
}

// Every dim whose size no input gives comes from the declaration.
TEST(OutputShapes, NewDimsAreSizedByTheDeclaration) {
  auto shapes = [](const char* op, std::vector<Shape> in, const Attrs& attrs) {
    const OpDecl& decl = *FindOp(op);
    return InferOutputShapes(decl, in, decl.NormalizeAttrs(attrs));
  };
  using Ints = std::vector<int64_t>;
  EXPECT_EQ(shapes("split", {{4, 7}}, Attrs().With("sections", Ints{1, -1, 2}).With("axis", int64_t{1})),
            (std::vector<Shape>{{4, 1}, {4, 4}, {4, 2}}));
  EXPECT_EQ(shapes("split_with_num", {{6, 2}}, Attrs().With("num", int64_t{3})),
            (std::vector<Shape>{{2, 2}, {2, 2}, {2, 2}}));
  EXPECT_EQ(shapes("unbind", {{2, 3}}, Attrs().With("axis", int64_t{1})),
            (std::vector<Shape>{{2}, {2}, {2}}));
  EXPECT_EQ(shapes("stack", {{2, 3}, {2, 3}, {2, 3}}, Attrs().With("axis", int64_t{1})),
            (std::vector<Shape>{{2, 3, 3}}));
  EXPECT_EQ(shapes("tile", {{2, 3}}, Attrs().With("repeat_times", Ints{4, 2, 1})),
            (std::vector<Shape>{{4, 4, 3}}));
  EXPECT_EQ(shapes("expand", {{3, 1}}, Attrs().With("shape", Ints{2, -1, 5})),
            (std::vector<Shape>{{2, 3, 5}}));
  EXPECT_EQ(shapes("expand_as", {{1, 3}, {4, 3}}, Attrs()), (std::vector<Shape>{{4, 3}}));
  EXPECT_EQ(shapes("slice", {{5, 6}},
                   Attrs().With("axes", Ints{0, 1}).With("starts", Ints{1, -4}).With("ends", Ints{3, 100})
                       .With("decrease_axis", Ints{})),
            (std::vector<Shape>{{2, 4}}));
  EXPECT_EQ(shapes("cumsum", {{2, 3}}, Attrs().With("flatten", true)), (std::vector<Shape>{{6}}));
  EXPECT_EQ(shapes("layer_norm", {{2, 3, 4}, {12}, {12}}, Attrs()),
            (std::vector<Shape>{{2, 3, 4}, {2}, {2}}));
  EXPECT_EQ(shapes("reshape", {{2, 6}}, Attrs().With("shape", Ints{3, -1})), (std::vector<Shape>{{3, 4}}));
  EXPECT_EQ(shapes("matmul", {{5, 2, 3}, {3, 4}}, Attrs()), (std::vector<Shape>{{5, 2, 4}}));
  EXPECT_EQ(shapes("einsum", {{2, 3}, {3, 4}}, Attrs().With("equation", std::string(" ij, jk -> ik "))),
            (std::vector<Shape>{{2, 4}}));
}

TEST(OutputShapes, AnOutputTooLargeIsRefused) {
  // Inputs of 2^40 elements each, an outer product of 2^80: the engine refuses the output.
  const OpDecl& einsum = *FindOp("einsum");
  try {
    InferOutputShapes(einsum, {{int64_t{1} << 40}, {int64_t{1} << 40}},
                      einsum.NormalizeAttrs(Attrs().With("equation", std::string("i,j->ij"))));
    ADD_FAILURE() << "no error";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
    EXPECT_EQ(e.field(), "outputs[0].shape");
  }
  // Where the op's plan sees the size first, it names the attr that makes it too large.
  const OpDecl& tile = *FindOp("tile");
  try {
    InferOutputShapes(tile, {{1 << 20, 1 << 20}},
                      tile.NormalizeAttrs(Attrs().With("repeat_times", std::vector<int64_t>{1 << 20, 1 << 20})));
    ADD_FAILURE() << "no error";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
    EXPECT_EQ(e.field(), "attrs.repeat_times");
  }
}


// The engine's choices that move fewer bytes (SEMANTICS.md §4 steps 1-4), on raw specs.
DistAttr Dims(std::vector<AxisList> dims, PartialMap partial = {}) { return DistAttr{std::move(dims), std::move(partial)}; }

TEST(EinsumChoices, AContestedAxisGoesToTheCheaperFactor) {
  // `ab,bc->ac` on mesh 2: x shards a on axis 0 (the first claim), y shards b on axis 0.
  // Keeping a gathers y (b c / 2 elements); keeping b moves x from a to b (a b / 4).
  auto infer = [](int64_t c) {
    EinsumSpec spec = notation::FromLetters({"ab", "bc"}, {"ac"});
    BindFactorSizes(spec, {{4, 8}, {8, c}});
    return InferEinsumForward(spec, Mesh({2}), {Dims({{0}, {}}), Dims({{0}, {}})});
  };
  InferResult r = infer(1);  // y is small: gathering it (16 bytes) beats moving x (32)
  EXPECT_EQ(r.inputs[0].dims, (std::vector<AxisList>{{0}, {}}));
  EXPECT_EQ(r.inputs[1].dims, (std::vector<AxisList>{{}, {}}));
  r = infer(64);  // y is large (1 KiB to gather): the second claim wins
  EXPECT_EQ(r.inputs[0].dims, (std::vector<AxisList>{{}, {0}}));
  EXPECT_EQ(r.inputs[1].dims, (std::vector<AxisList>{{0}, {}}));
  EXPECT_EQ(r.outputs[0].partial, (PartialMap{{0, ReduceOp::kSum}}));
}

TEST(EinsumChoices, ASizeOneAxisYieldsAndAForcedFactorClaimsNothing) {
  // Axis 0 has size 1: x's claim on it comes after y's real one, so a takes axis 1.
  EinsumSpec spec = notation::FromLetters({"ab", "ab"}, {"ab"});
  BindFactorSizes(spec, {{4, 8}, {4, 8}});
  InferResult r = InferEinsumForward(spec, Mesh({1, 2}), {Dims({{0}, {}}), Dims({{1}, {}})});
  EXPECT_EQ(r.inputs[0].dims, (std::vector<AxisList>{{1}, {}}));
  // b is forced replicated: x's sharding of b on axis 0 does not keep y's a from it.
  EinsumSpec forced = notation::FromLetters({"ab", "a"}, {"a"}, "b");
  BindFactorSizes(forced, {{4, 8}, {4}});
  r = InferEinsumForward(forced, Mesh({2}), {Dims({{}, {0}}), Dims({{0}})});
  EXPECT_EQ(r.inputs[0].dims, (std::vector<AxisList>{{0}, {}}));
  EXPECT_EQ(r.inputs[1].dims, (std::vector<AxisList>{{0}}));
}

TEST(EinsumChoices, AnUnkeptPartialIsReduceScatteredOntoAFreeFactor) {
  // relu-like `ab->ab`: x partial(sum) on axis 1, b on axis 0: a takes axis 1 (a
  // reduce-scatter), preferring a factor the axis divides.
  EinsumSpec spec = notation::FromLetters({"ab"}, {"ab"});
  BindFactorSizes(spec, {{12, 12}});
  InferResult r = InferEinsumForward(spec, Mesh({2, 2}), {Dims({{}, {0}}, {{1, ReduceOp::kSum}})});
  EXPECT_EQ(r.inputs[0], Dims({{1}, {0}}));
  EXPECT_EQ(r.outputs[0], Dims({{1}, {0}}));
  EinsumSpec odd = notation::FromLetters({"ab"}, {"ab"});
  BindFactorSizes(odd, {{5, 8}});
  r = InferEinsumForward(odd, Mesh({4}), {Dims({{}, {}}, {{0, ReduceOp::kMax}})});
  EXPECT_EQ(r.inputs[0], Dims({{}, {0}}));  // 8 divides by 4, 5 does not
  // A factor missing from the output (a reduction) is never the target: all-reduced.
  EinsumSpec reduce = notation::FromLetters({"ab"}, {"a"});
  BindFactorSizes(reduce, {{1, 8}});
  r = InferEinsumForward(reduce, Mesh({2}), {Dims({{}, {}}, {{0, ReduceOp::kSum}})});
  EXPECT_EQ(r.inputs[0], Dims({{}, {}}));
  EXPECT_EQ(r.outputs[0], Dims({{}}));
}

TEST(EinsumChoices, AnUnkeptPartialIsReduceScatteredWithinTheShardsOfASharedFactor) {
  // DTensor's answers (docs/AUDIT.md): silu of [12, 1] [S(0), P(sum)] on mesh 3x2. b (size
  // 1) cannot take axis 1; a, sharded on axis 0 into shards of 4, takes it after axis 0
  // (a reduce-scatter within each shard: 8 bytes per rank, where an all-reduce moved 16).
  EinsumSpec spec = notation::FromLetters({"ab"}, {"ab"});
  BindFactorSizes(spec, {{12, 1}});
  InferResult r = InferEinsumForward(spec, Mesh({3, 2}), {Dims({{0}, {}}, {{1, ReduceOp::kSum}})});
  EXPECT_EQ(r.inputs[0], Dims({{0, 1}, {}}));
  EXPECT_EQ(r.outputs[0], Dims({{0, 1}, {}}));
  // An even split of a sharded factor beats an uneven free one: [4, 12, 5] with
  // [S(2), S(0), P(sum) on 1] on 2x2x4: b's shards of 6 split by 2, c's 5 does not (a's
  // shards of 1 cannot take it).
  EinsumSpec three = notation::FromLetters({"abc"}, {"abc"});
  BindFactorSizes(three, {{4, 12, 5}});
  r = InferEinsumForward(three, Mesh({2, 2, 4}), {Dims({{2}, {0}, {}}, {{1, ReduceOp::kSum}})});
  EXPECT_EQ(r.inputs[0], Dims({{2}, {0, 1}, {}}));
  // Both uneven: abs of [7, 1, 3] with [S(0), -, -] and P(sum) on axis 1 of 2x2x1 (DTensor's
  // answer): a's shards of 4 split into 2 and 2, free c's 3 into 2 and 1, so a takes it.
  EinsumSpec uneven = notation::FromLetters({"abc"}, {"abc"});
  BindFactorSizes(uneven, {{7, 1, 3}});
  r = InferEinsumForward(uneven, Mesh({2, 2, 1}), {Dims({{0}, {}, {}}, {{1, ReduceOp::kSum}})});
  EXPECT_EQ(r.inputs[0], Dims({{0, 1}, {}, {}}));
  // A shard smaller than the axis does not take it: [4, 1] on 4x2, a's shards of 1.
  EinsumSpec small = notation::FromLetters({"ab"}, {"ab"});
  BindFactorSizes(small, {{4, 1}});
  r = InferEinsumForward(small, Mesh({4, 2}), {Dims({{0}, {}}, {{1, ReduceOp::kSum}})});
  EXPECT_EQ(r.inputs[0], Dims({{0}, {}}));
}

TEST(EinsumChoices, ATiedFactorFollowsItsLeaderWhenTheAxesDivideBoth) {
  // q heads h (8) and k heads g (4) tied: sharded together over 2 or 4, not over 3.
  auto infer = [](int64_t n) {
    EinsumSpec spec = notation::FromLetters({"h", "g"}, {"h"});
    spec.tied.push_back({1, 0});
    BindFactorSizes(spec, {{8}, {4}});
    return InferEinsumForward(spec, Mesh({n}), {Dims({{0}}), Dims({{}})});
  };
  EXPECT_EQ(infer(2).inputs[1], Dims({{0}}));
  EXPECT_EQ(infer(4).inputs[1], Dims({{0}}));
  EXPECT_EQ(infer(3).inputs[0], Dims({{}}));
  EXPECT_EQ(infer(3).inputs[1], Dims({{}}));
}

TEST(EinsumChoices, AFactorOnSizeOneAxesIsFreeForAPartial) {
  // `ab->ab` on mesh 3x1: a is sharded on axis 1 of size 1 (it holds the whole dim), so
  // x's partial on axis 0 is reduce-scattered onto a after it, not all-reduced.
  EinsumSpec spec = notation::FromLetters({"ab"}, {"ab"});
  BindFactorSizes(spec, {{4, 1}});
  InferResult r = InferEinsumForward(spec, Mesh({3, 1}), {Dims({{1}, {}}, {{0, ReduceOp::kSum}})});
  EXPECT_EQ(r.inputs[0], Dims({{1, 0}, {}}));
  EXPECT_EQ(r.outputs[0], Dims({{1, 0}, {}}));
}

TEST(EinsumChoices, AClaimOnAPartialAxisYieldsWhenKeepingThePartialIsCheaper) {
  // Multilinear `abc,c->abc` on mesh 3: x (42 elements) is partial(sum) on axis 0 and y
  // (3) shards c on it. Reducing x moves far more than gathering y: y's claim yields and
  // x keeps its partial.
  EinsumSpec spec = notation::FromLetters({"abc", "c"}, {"abc"});
  spec.accept = PartialAcceptance::kMultilinear;
  BindFactorSizes(spec, {{7, 2, 3}, {3}});
  const std::vector<DistAttr> in = {Dims({{}, {}, {}}, {{0, ReduceOp::kSum}}), Dims({{0}})};
  InferResult r = InferEinsumForward(spec, Mesh({3}), in);
  EXPECT_EQ(r.inputs[0], in[0]);
  EXPECT_EQ(r.inputs[1], Dims({{}}));
  EXPECT_EQ(r.outputs[0], Dims({{}, {}, {}}, {{0, ReduceOp::kSum}}));
  // With no partial acceptance the claim stands (the partial is reduced either way).
  spec.accept = PartialAcceptance::kNone;
  r = InferEinsumForward(spec, Mesh({3}), in);
  EXPECT_EQ(r.inputs[1], Dims({{0}}));
}

TEST(EinsumChoices, APartialKeptThroughAMovePricesTheMove) {
  // matmul `mk,kn->mn` on mesh 2x4x2: m (x) and n (y) contest axis 1; y is partial on
  // axis 0 and kept. Keeping n leaves y as given and moves x's m (2 elements) to the idle
  // axis 2; keeping m gathers y's 12 elements, which a bound of 0 for partial to partial
  // used to hide.
  EinsumSpec spec = notation::FromLetters({"mk", "kn"}, {"mn"});
  spec.accept = PartialAcceptance::kMultilinear;
  BindFactorSizes(spec, {{2, 1}, {1, 12}});
  const std::vector<DistAttr> in = {Dims({{1}, {}}), Dims({{}, {1}}, {{0, ReduceOp::kSum}})};
  InferResult r = InferEinsumForward(spec, Mesh({2, 4, 2}), in);
  EXPECT_EQ(r.inputs[0], Dims({{2}, {}}));
  EXPECT_EQ(r.inputs[1], in[1]);
}

TEST(EinsumChoices, AnAxisLeftIdleByAForcedFactorGoesToAFreeOne) {
  // softmax-like `ab->ab R(b)` on mesh 4: x shards b (forced replicated) on axis 0. Moving
  // the axis to a (an all-to-all, 3/16 of x per rank) beats gathering b (3/4 of x).
  EinsumSpec spec = notation::FromLetters({"ab"}, {"ab"}, "b");
  BindFactorSizes(spec, {{8, 8}});
  InferResult r = InferEinsumForward(spec, Mesh({4}), {Dims({{}, {0}})});
  EXPECT_EQ(r.inputs[0], Dims({{0}, {}}));
  EXPECT_EQ(r.outputs[0], Dims({{0}, {}}));
  // A factor missing from the output would turn it partial: not a taker (a reduction).
  EinsumSpec reduce = notation::FromLetters({"ab"}, {"b"}, "b");
  BindFactorSizes(reduce, {{8, 8}});
  r = InferEinsumForward(reduce, Mesh({4}), {Dims({{}, {0}})});
  EXPECT_EQ(r.inputs[0], Dims({{}, {}}));
}

TEST(EinsumChoices, AnAccumulatedInputTakesItsOutputsPartialMap) {
  // A linear layer's weight gradient added into an accumulator: `bk,bn,kn->kn A(2>0)` on
  // mesh 2 with the rows on axis 0. The output is partial(sum) over the rows; the
  // replicated accumulator is required partial there too (R -> P), so it is added once.
  EinsumSpec spec = notation::FromLetters({"bk", "bn", "kn"}, {"kn"});
  spec.accumulated = {{2, 0}};
  BindFactorSizes(spec, {{8, 4}, {8, 6}, {4, 6}});
  EXPECT_EQ(spec.ToString(), "ab,ac,bc->bc A(2>0) [sum]");
  InferResult r = InferEinsumForward(spec, Mesh({2}), {Dims({{0}, {}}), Dims({{0}, {}}), Dims({{}, {}})});
  EXPECT_EQ(r.outputs[0], Dims({{}, {}}, {{0, ReduceOp::kSum}}));
  EXPECT_EQ(r.inputs[2], Dims({{}, {}}, {{0, ReduceOp::kSum}}));
  // Nothing summed over a sharded axis: the accumulator is required whole.
  r = InferEinsumForward(spec, Mesh({2}), {Dims({{}, {0}}), Dims({{}, {}}), Dims({{}, {}})});
  EXPECT_EQ(r.outputs[0], Dims({{0}, {}}));
  EXPECT_EQ(r.inputs[2], Dims({{0}, {}}));
  // A factor of the accumulator missing from its output is a declaration bug.
  EinsumSpec bad = notation::FromLetters({"bk", "bn", "kn"}, {"k"});
  bad.accumulated = {{2, 0}};
  EXPECT_THROW(BindFactorSizes(bad, {{8, 4}, {8, 6}, {4, 6}}), std::logic_error);
}

TEST(EinsumChoices, AnOutputIsPartialOnlyOverFactorsOfTheInputsItReads) {
  // `bk,bn->kn,n O(0:0,1;1:1)`: the second output reads only input 1. With k sharded
  // (input 0's dim 1 on axis 0) the first output is sharded on it and the second, which
  // lacks k but reads nothing holding it, is whole; the rows b on axis 1 are summed in both.
  EinsumSpec spec = notation::FromLetters({"bk", "bn"}, {"kn", "n"});
  spec.output_reads = {{0, 1}, {1}};
  BindFactorSizes(spec, {{8, 4}, {8, 6}});
  EXPECT_EQ(spec.ToString(), "ab,ac->bc,c O(0:0,1;1:1) [sum]");
  InferResult r = InferEinsumForward(spec, Mesh({2, 2}), {Dims({{1}, {0}}), Dims({{1}, {}})});
  EXPECT_EQ(r.outputs[0], Dims({{0}, {}}, {{1, ReduceOp::kSum}}));
  EXPECT_EQ(r.outputs[1], Dims({{}}, {{1, ReduceOp::kSum}}));
  // Without the reads, the second output would be claimed partial over k's axis too.
  spec.output_reads.clear();
  r = InferEinsumForward(spec, Mesh({2, 2}), {Dims({{1}, {0}}), Dims({{1}, {}})});
  EXPECT_EQ(r.outputs[1], Dims({{}}, {{0, ReduceOp::kSum}, {1, ReduceOp::kSum}}));
}

// Data-dependent dims (SEMANTICS.md §3.1): the declaration gives kDataDependentDim where only
// the run knows the size, and the reverse takes any size there.
TEST(DataDependentDims, OutputShapesMarkTheDimsTheRunDecides) {
  const OpDecl& nonzero = *FindOp("nonzero");
  EXPECT_EQ(InferOutputShapes(nonzero, {{3, 4, 5}}, nonzero.NormalizeAttrs({})),
            (std::vector<Shape>{{kDataDependentDim, 3}}));
  const OpDecl& unique = *FindOp("unique");
  EXPECT_EQ(InferOutputShapes(unique, {{3, 4}}, unique.NormalizeAttrs(Attrs().With("return_inverse", true))),
            (std::vector<Shape>{{kDataDependentDim}, {}, {12}, {}}));
  EXPECT_TRUE(ShapeFits({kDataDependentDim, 3}, {0, 3}));
  EXPECT_TRUE(ShapeFits({kDataDependentDim, 3}, {60, 3}));
  EXPECT_FALSE(ShapeFits({kDataDependentDim, 3}, {6, 2}));
  EXPECT_FALSE(ShapeFits({kDataDependentDim, 3}, {6}));
  EXPECT_FALSE(ShapeFits({4, 3}, {5, 3}));
  const Mesh mesh({2});
  for (int64_t count : {0, 1, 7}) {
    const InferResult r = InferReverse(nonzero, mesh, {{3, 4}}, {{{count, 2}, DistAttr::Replicated(2)}}, {});
    EXPECT_EQ(r.inputs[0], DistAttr::Replicated(2));
  }
  try {
    InferReverse(nonzero, mesh, {{3, 4}}, {{{5, 3}, DistAttr::Replicated(2)}}, {});
    ADD_FAILURE() << "no error";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "outputs[0].shape");
  }
  const std::optional<EinsumSpec> spec = BuildEinsumSpec(nonzero, {{3, 4}}, nonzero.NormalizeAttrs({}));
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->ToString(), "ab->cd R(abcd) D(c) [sum]");
}

// A spec that could shard a data-dependent dim or make its output partial is a declaration
// bug, refused where the rule is built.
TEST(DataDependentDims, SpecsThatCouldShardOrPartialThemAreRefused) {
  const auto bound = [](EinsumSpec spec) { BindFactorSizes(spec, {{4, 6}}); };
  const auto base = [] {
    EinsumSpec spec = notation::FromLetters({"ab"}, {}, "ab");
    const FactorId n = spec.AddFactor(EinsumSpec::kDataDependentSize);
    spec.forced_replicated.push_back(n);
    spec.data_dependent.push_back(n);
    spec.outputs = {{n}};
    return spec;
  };
  EXPECT_NO_THROW(bound(base()));
  {  // not forced replicated: the engine could shard it
    EinsumSpec spec = base();
    spec.forced_replicated.pop_back();
    EXPECT_THROW(bound(spec), std::logic_error);
  }
  {  // in an input: its size would be the input's
    EinsumSpec spec = base();
    spec.inputs[0][1] = spec.data_dependent[0];
    EXPECT_THROW(bound(spec), std::logic_error);
  }
  {  // x's dim b may be sharded and is missing from the output: it would be partial
    EinsumSpec spec = base();
    spec.forced_replicated = {0, spec.data_dependent[0]};
    EXPECT_THROW(bound(spec), std::logic_error);
  }
  {  // a kept partial input would make it partial
    EinsumSpec spec = base();
    spec.accept = PartialAcceptance::kAnyOp;
    EXPECT_THROW(bound(spec), std::logic_error);
  }
  {  // a size given
    EinsumSpec spec = base();
    spec.factor_sizes[static_cast<size_t>(spec.data_dependent[0])] = 3;
    EXPECT_THROW(bound(spec), std::logic_error);
  }
  // Declared as an op, the sharded data-dependent dim fails every request.
  const OpDecl bad = OpBuilder("bad_count").Inputs({"x"}).Outputs({"out"})
                         .Tolerance(ToleranceClass::kExact)
                         .Einsum([](const RuleContext&) {
                           EinsumSpec spec = notation::FromLetters({"ab"}, {"a"});
                           const FactorId n = spec.AddFactor(EinsumSpec::kDataDependentSize);
                           spec.data_dependent.push_back(n);
                           spec.outputs[0].push_back(n);
                           return spec;
                         });
  EXPECT_THROW(InferForward(bad, Mesh({2}), {{{4, 6}, DistAttr::Replicated(2)}}, {}), std::logic_error);
  EXPECT_THROW(InferOutputShapes(bad, {{4, 6}}, {}), std::logic_error);
}

}  // namespace
}  // namespace spmd
