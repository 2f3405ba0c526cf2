// Indexing ops with Paddle's names, attrs and argument orders: one_hot, roll,
// index_select, gather, take_along_axis, moe_combine, moe_gate_dispatch. Notations (SEMANTICS.md §4) with the dims an op reads across
// forced replicated, and localizers where a shard needs its global offset.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/error.h"
#include "rules/ops/indexing_plan.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "rules/ops/vjp_util.h"

// The VJPs of this file's ops (rules/engine/vjp.h), attached below with
// `.Vjp(vjps::Name)`.
namespace spmd::vjps {
namespace {

using notation::Ints;
using notation::MakeAttrs;
using Ref = VjpRef;

// roll of the cotangent by the opposite shifts
// Each shift is taken mod its dim's size (the flat size without axes) and turned back:
// size - shift, so that no shift is negated (INT64_MIN has no negation).
VjpGraph Roll(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Ints& shifts = c.attrs.GetInts("shifts");
  const Ints& axes = c.attrs.GetInts("axis");
  auto back = [](int64_t shift, int64_t size) {
    if (size <= 0) return int64_t{0};
    const int64_t r = shift % size;
    return r <= 0 ? -r : size - r;
  };
  Ints reversed;
  if (axes.empty()) {
    if (shifts.size() != 1) ThrowInvalid("attrs.shifts", "needs one shift when axis is empty");
    reversed.push_back(back(shifts[0], Numel(x)));
  } else {
    if (shifts.size() != axes.size()) ThrowInvalid("attrs.shifts", "needs one shift per axis");
    for (size_t k = 0; k < axes.size(); ++k) {
      const int d = notation::NormalizeAxis(axes[k], static_cast<int>(x.size()), "attrs.axis");
      reversed.push_back(back(shifts[k], x[static_cast<size_t>(d)]));
    }
  }
  g.input_grads = {g.Add("roll", {Ref::OutputGrad(0)}, MakeAttrs({{"shifts", reversed}, {"axis", axes}}))};
  return g;
}

// index_select, gather: a scatter-add through embedding_grad, with the selected axis moved
// first and the other dims flattened (x: transpose + reshape to [V, R]; the cotangent to
// [K, R]), then back. The index gets no gradient.
VjpGraph Select(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape& index = c.input_shapes[1];
  const int rank = static_cast<int>(x.size());
  const int axis = notation::NormalizeAxis(c.attrs.GetInt("axis"), rank, "attrs.axis");
  // perm moves axis first; `rest` are the other dims in order.
  Ints perm = {axis}, inverse(static_cast<size_t>(rank));
  Shape rest;
  for (int d = 0; d < rank; ++d) {
    if (d == axis) continue;
    perm.push_back(d);
    rest.push_back(x[static_cast<size_t>(d)]);
  }
  for (int d = 0; d < rank; ++d) inverse[static_cast<size_t>(perm[static_cast<size_t>(d)])] = d;
  const int64_t rows = x[static_cast<size_t>(axis)], width = Numel(rest);
  Shape moved = {rows};
  moved.insert(moved.end(), rest.begin(), rest.end());
  // The table as [V, R] (its values are not read: embedding_grad wants its shape).
  const Ref table = g.Add("reshape", {g.Add("transpose", {Ref::Input(0)}, MakeAttrs({{"perm", perm}}))},
                          MakeAttrs({{"shape", Ints{rows, width}}}));
  // The cotangent as index.shape + [R]: a 1-D index's K dim first, then the rest.
  Ref grad = Ref::OutputGrad(0);
  if (!index.empty()) grad = g.Add("transpose", {grad}, MakeAttrs({{"perm", perm}}));
  Ints grad_shape(index.begin(), index.end());
  grad_shape.push_back(width);
  grad = g.Add("reshape", {grad}, MakeAttrs({{"shape", grad_shape}}));
  const Ref summed = g.Add("embedding_grad", {Ref::Input(1), table, grad},
                           MakeAttrs({{"padding_idx", int64_t{-1}}, {"sparse", false}}));
  const Ref back = g.Add("reshape", {summed}, MakeAttrs({{"shape", Ints(moved.begin(), moved.end())}}));
  g.input_grads = {g.Add("transpose", {back}, MakeAttrs({{"perm", inverse}})), std::nullopt};
  return g;
}

// take_along_axis: x gets the cotangent added where it was read from (a put_along_axis add
// into zeros: ids repeated along the axis add up), the index none.
VjpGraph TakeAlongAxis(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("put_along_axis", {Zeros(g, Ref::Input(0)), Ref::Input(1), Ref::OutputGrad(0)},
                         MakeAttrs({{"axis", c.attrs.GetInt("axis")},
                                    {"reduce", std::string("add")},
                                    {"include_self", true}})),
                   std::nullopt};
  return g;
}

// moe_combine: y[t] = sum_j w[t, j] x[id[t, j]], linear in x and in the weights. The
// routed pairs (t, j) flattened to n = tokens * k rows, each id a one-deep gather_nd / scatter_nd_add
// index into x's rows: x gets w[t, j] g[t] added at row id[t, j] (scatter_nd_add into zeros;
// repeated ids add up); w[t, j] gets the dot product of g[t] with x's row id[t, j]
// (gather_nd, times g[t], summed over hidden). The ids get none.
VjpGraph MoeCombine(const RuleContext& c) {
  VjpGraph g;
  const indexing_plan::MoeCombinePlan plan =
      indexing_plan::PlanMoeCombine(c.input_shapes[0], c.input_shapes[1], c.input_shapes[2]);
  const int64_t n = plan.tokens * plan.k;
  const Shape routed = {plan.tokens, plan.k, plan.hidden};
  const Ref ids = Reshape(g, Ref::Input(2), {plan.tokens, plan.k}, {n, 1});
  const Ref grad = g.Add("unsqueeze", {Ref::OutputGrad(0)}, MakeAttrs({{"axis", Ints{1}}}));  // [tokens, 1, hidden]
  const Ref weights = g.Add("unsqueeze", {Ref::Input(1)}, MakeAttrs({{"axis", Ints{2}}}));    // [tokens, k, 1]
  const Ref spread = Reshape(g, g.Add("multiply", {weights, grad}), routed, {n, plan.hidden});
  const Ref x_grad = g.Add("scatter_nd_add", {Zeros(g, Ref::Input(0)), ids, spread});
  const Ref rows = Reshape(g, g.Add("gather_nd", {Ref::Input(0), ids}), {n, plan.hidden}, routed);
  const Ref w_grad = g.Add("sum", {g.Add("multiply", {rows, grad})},
                           MakeAttrs({{"axis", Ints{2}}, {"keep_dim", false}, {"reduce_all", false}}));
  g.input_grads = {x_grad, w_grad, std::nullopt};
  return g;
}

// moe_gate_dispatch: y is a gather of x's rows into the kept slots (linear in x), and
// combine_weights[s, j] is gate_logits[s, expert_id[s, j]] where the route (s, j) is kept,
// else 0; the selection and the slots are piecewise constant. Which routes are kept is
// asked of the op itself, so the capacity order is written once: token numbers 1..S
// ([S, 1], from expert_id's shape) dispatched with the same gate, bias and attrs put s + 1
// in each slot token s holds; route (s, j) is kept when expert expert_id[s, j]'s slots hold
// s + 1 (a token reaches an expert at most once). x's gradient sums, over its kept routes,
// y's cotangent at the route's slot (scatter_index, transposed to [S, k]); gate_logits'
// gradient puts combine_weights' cotangent of each kept route at its expert. corr_bias only
// moves the selection: none. The integer outputs take none. A capacity of 0 keeps nothing.
VjpGraph MoeGateDispatch(const RuleContext& c) {
  VjpGraph g;
  const indexing_plan::MoeGateDispatchPlan plan =
      indexing_plan::PlanMoeGateDispatch(c.input_shapes[0], c.input_shapes[1], c.input_shapes[2], c.attrs);
  const int64_t s = plan.tokens, k = plan.k, e = plan.experts, cap = plan.capacity, h = plan.hidden;
  if (cap == 0) {
    g.input_grads = {Zeros(g, Ref::Input(0)), Zeros(g, Ref::Input(1)), std::nullopt};
    return g;
  }
  const Ref expert_id = Ref::Output(4);
  const Ref first = g.Add("slice", {expert_id}, MakeAttrs({{"axes", Ints{1}}, {"starts", Ints{0}}, {"ends", Ints{1}}}));
  const Ref ones = Filled(g, g.Add("cast", {first}, MakeAttrs({{"dtype", std::string("float64")}})), 1);
  const Ref numbers = g.Add("cumsum", {ones}, MakeAttrs({{"axis", int64_t{0}}}));  // [S, 1]: s + 1
  const Ref held = Reshape(g, g.Add("moe_gate_dispatch", {numbers, Ref::Input(1), Ref::Input(2)}, c.attrs),
                           {e, cap, 1}, {e, cap});
  const Ref expert_rows = Reshape(g, g.Add("index_select", {held, Reshape(g, expert_id, {s, k}, {s * k})},
                                           MakeAttrs({{"axis", int64_t{0}}})),
                                  {s * k, cap}, {s, k, cap});
  const Ref distance = g.Add("abs", {g.Add("subtract", {expert_rows, Reshape(g, numbers, {s, 1}, {s, 1, 1})})});
  const Ref hit = g.Add("less_than", {distance, Filled(g, distance, 0.5)});
  const Ref kept = g.Add("any", {hit}, MakeAttrs({{"axis", Ints{2}}, {"keep_dim", false}}));  // [S, k]
  const Ref slots = Reshape(g, g.Add("transpose", {Ref::Output(2)}, MakeAttrs({{"perm", Ints{1, 0}}})), {s, k},
                            {s * k});
  const Ref routed = Reshape(g, g.Add("index_select", {Reshape(g, Ref::OutputGrad(0), {e, cap, h}, {e * cap, h}), slots},
                                      MakeAttrs({{"axis", int64_t{0}}})),
                             {s * k, h}, {s, k, h});
  const Ref kept_rows = ExpandTo(g, Reshape(g, kept, {s, k}, {s, k, 1}), {s, k, 1}, {s, k, h});
  const Ref x_grad = g.Add("sum", {Keep(g, kept_rows, routed)},
                           MakeAttrs({{"axis", Ints{1}}, {"keep_dim", false}, {"reduce_all", false}}));
  const Ref gate_grad = g.Add("put_along_axis", {Zeros(g, Ref::Input(1)), expert_id, Keep(g, kept, Ref::OutputGrad(1))},
                              MakeAttrs({{"axis", int64_t{1}}, {"reduce", std::string("add")}}));
  g.input_grads = {x_grad, gate_grad, std::nullopt};
  return g;
}

// pad: the cotangent sliced back to x (linear).
VjpGraph Pad(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Ints& paddings = c.attrs.GetInts("paddings");
  Ints axes, starts, ends;
  for (size_t d = 0; d < x.size(); ++d) {
    if (paddings[2 * d] == 0 && paddings[2 * d + 1] == 0) continue;
    axes.push_back(static_cast<int64_t>(d));
    starts.push_back(paddings[2 * d]);
    ends.push_back(paddings[2 * d] + x[d]);
  }
  if (axes.empty()) {
    g.input_grads = {Ref::OutputGrad(0)};
    return g;
  }
  g.input_grads = {g.Add("slice", {Ref::OutputGrad(0)},
                         MakeAttrs({{"axes", axes}, {"starts", starts}, {"ends", ends}}))};
  return g;
}

// swiglu: x: g y s (1 + x (1 - s)), s = sigmoid(x); y: g silu(x).
VjpGraph Swiglu(const RuleContext&) {
  VjpGraph g;
  const Ref s = g.Add("sigmoid", {Ref::Input(0)});
  const Ref x_one_minus_s = g.Add("multiply", {Ref::Input(0), ScaleBy(g, s, -1, 1)});
  const Ref slope = g.Add("multiply", {s, ScaleBy(g, x_one_minus_s, 1, 1)});
  const Ref gy = g.Add("multiply", {Ref::OutputGrad(0), Ref::Input(1)});
  const Ref silu = g.Add("multiply", {Ref::Input(0), s});
  g.input_grads = {g.Add("multiply", {gy, slope}), g.Add("multiply", {Ref::OutputGrad(0), silu})};
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::Ints;
using notation::Letters;
using notation::MakeAttrs;

int Rank(const RuleContext& c, size_t i = 0) { return static_cast<int>(c.input_shapes[i].size()); }

// index_select and gather: x `a..b..c` (b the selected axis), a 1-D index `k`, out with b
// replaced by k (a 0-d index of gather drops b). b may stay sharded: a shard holding x's
// rows [start, start + n) on axis b selects the ids it holds and writes zeros for the
// others, so the outputs of the shards along b sum to the selection (b is absent from the
// output: partial(sum), as the vocabulary-parallel embedding). The localizer passes the
// shard's first row. The index must hold ids in [0, x.shape[axis]).
EinsumSpec Selection(const RuleContext& c, int axis, bool drop_dim) {
  const int rank = Rank(c);
  const std::string x = Letters(rank);
  const std::string index = drop_dim ? "" : "K";
  std::string out = x;
  if (drop_dim) {
    out.erase(static_cast<size_t>(axis), 1);
  } else {
    out[static_cast<size_t>(axis)] = 'K';
  }
  return notation::FromLetters({x, index}, {out});
}

Attrs LocalizeSelection(const LocalContext& c, int64_t axis) {
  return c.attrs.WithLocal({.vocab_start = c.input_offsets[0][static_cast<size_t>(axis)]});
}

// The index length of an example: `count`, or 0 when the selected axis has no rows.
int64_t Ids(int64_t rows, int64_t count) { return rows == 0 ? 0 : count; }

std::vector<InputValues> SelectionValues(const RuleContext& c) {
  const int rank = Rank(c);
  int64_t bound = 0;
  if (rank > 0) {
    const int axis = notation::NormalizeAxis(c.attrs.GetInt("axis"), rank, "attrs.axis");
    bound = c.input_shapes[0][static_cast<size_t>(axis)];
  }
  return {{}, {ValueKind::kIndex, bound}};
}

}  // namespace

// one_hot(x, num_classes): x (int64 ids in [0, num_classes)) -> out of x's shape plus a
// class dim, 1.0 where the class is the id (float32, as Paddle). The class dim is a new
// factor, replicated (no input carries it).
OpDecl one_hot() {
  return OpBuilder("one_hot").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Attr("num_classes", AttrKind::kInt, std::nullopt)
      .Einsum([](const RuleContext& c) {
        const int64_t classes = indexing_plan::PlanOneHot(c.input_shapes[0], c.attrs).classes;
        const std::string x = Letters(Rank(c));
        EinsumSpec spec = notation::FromLetters({x}, {});
        Notation out = spec.inputs[0];
        const FactorId cls = spec.AddFactor(classes);
        out.push_back(cls);
        spec.outputs.push_back(out);
        spec.forced_replicated.push_back(cls);
        return spec;
      })
      .Values([](const RuleContext& c) {
        return std::vector<InputValues>{{ValueKind::kIndex, c.attrs.GetInt("num_classes")}};
      })
      .Examples([](const SizePalette& p) {
        return std::vector<Example>{{{{p[0], p[1]}}, MakeAttrs({{"num_classes", int64_t{5}}})},
                                    {{{p[2]}}, MakeAttrs({{"num_classes", int64_t{3}}})}};
      });
}

// roll(x, shifts, axis): elements shifted cyclically along each listed axis (repeats
// allowed, applied in turn); an empty axis rolls the flattened x by shifts[0]. A rolled
// dim reads across shards: required replicated (every dim when flattened). Elements only
// move: every partial input is kept.
OpDecl roll() {
  return OpBuilder("roll").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Roll)
      .Attr("shifts", AttrKind::kInts, Ints{})
      .Attr("axis", AttrKind::kInts, Ints{})
      .Einsum([](const RuleContext& c) {
        const indexing_plan::RollPlan plan = indexing_plan::PlanRoll(c.input_shapes[0], c.attrs);
        const std::string letters = Letters(Rank(c));
        std::string forced = plan.flat ? letters : "";
        for (int64_t d : plan.axes) forced += letters[static_cast<size_t>(d)];
        EinsumSpec spec = notation::FromLetters({letters}, {letters}, forced);
        spec.accept = PartialAcceptance::kAnyOp;
        return spec;
      })
      .Examples(notation::FromSignatures(
          {{{"abc"}, MakeAttrs({{"shifts", Ints{2, -1}}, {"axis", Ints{1, -1}}})},
           {{"ab"}, MakeAttrs({{"shifts", Ints{3}}})}}));
}

// take_along_axis(x, index, axis): out (index's shape) takes x at index's ids along axis,
// at the same place elsewhere. An id may point anywhere along x's axis, so x's axis is read
// whole (forced replicated); index's axis is its own dim and may stay sharded. Off the axis
// index and x share a dim where their sizes agree; where x's is larger, out reads x's leading
// part by position, so both are forced replicated there (a shard of index's dim would read
// x from position 0 of its own piece). A partial input is reduced first.
OpDecl take_along_axis() {
  return OpBuilder("take_along_axis").Inputs({"x", "index"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::TakeAlongAxis)
      .Attr("axis", AttrKind::kInt, int64_t{0})
      .Einsum([](const RuleContext& c) {
        const indexing_plan::TakeAlongAxisPlan plan =
            indexing_plan::PlanTakeAlongAxis(c.input_shapes[0], c.input_shapes[1], c.attrs);
        const std::vector<bool> whole =
            indexing_plan::AlongAxisWholeDims(c.input_shapes[0], c.input_shapes[1], plan.axis);
        std::string x, index, forced;
        for (int d = 0; d < Rank(c); ++d) {
          const char shared = static_cast<char>('a' + d);
          if (whole[static_cast<size_t>(d)]) {
            const char own = static_cast<char>('A' + d);  // x's own dim, read whole
            x += own;
            forced += own;
            if (d != plan.axis) forced += shared;  // read by position: index's dim whole too
          } else {
            x += shared;
          }
          index += shared;
        }
        return notation::FromLetters({x, index}, {index}, forced);
      })
      .Values([](const RuleContext& c) {
        const indexing_plan::TakeAlongAxisPlan plan =
            indexing_plan::PlanTakeAlongAxis(c.input_shapes[0], c.input_shapes[1], c.attrs);
        return std::vector<InputValues>{
            {}, {ValueKind::kIndex, c.input_shapes[0][static_cast<size_t>(plan.axis)]}};
      })
      .Examples([](const SizePalette& p) {
        // An empty x axis admits only an empty index there.
        return std::vector<Example>{
            {{{p[0], p[1], p[2]}, {p[0], Ids(p[1], p[1]), p[2]}},
             MakeAttrs({{"axis", int64_t{1}}})},
            {{{p[0], p[1]}, {p[0], Ids(p[1], p[2])}}, MakeAttrs({{"axis", int64_t{-1}}})},
            {{{p[0], p[1]}, {Ids(p[0], p[2]), std::min<int64_t>(p[1], 1)}},
             MakeAttrs({{"axis", int64_t{0}}})},
            // index smaller than x off the axis (half of x's rows): read by position
            {{{p[0], p[1]}, {p[0] / 2, Ids(p[1], p[2])}}, MakeAttrs({{"axis", int64_t{1}}})}};
      });
}

// moe_combine(x, combine_weights, scatter_index): x [rows, hidden] holds the experts'
// outputs, one row per routed copy of a token; y [tokens, hidden] is each token's weighted
// sum of the k rows its ids name (Paddle's MoE combine). An id may name any row, so x's
// rows are read whole (forced replicated); hidden is shared by x and y; tokens by the
// weights, the ids and y; k is summed over, so a sharded k leaves y partial(sum) (as
// Paddle's rule). Partial inputs are reduced first (a partial id has no meaning).
OpDecl moe_combine() {
  return OpBuilder("moe_combine").Inputs({"x", "combine_weights", "scatter_index"}).Outputs({"y"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::MoeCombine)
      .Einsum([](const RuleContext& c) {
        (void)indexing_plan::PlanMoeCombine(c.input_shapes[0], c.input_shapes[1], c.input_shapes[2]);
        return notation::FromLetters({"Rh", "tk", "tk"}, {"th"}, "R");
      })
      .Values([](const RuleContext& c) {
        return std::vector<InputValues>{{}, {}, {ValueKind::kIndex, c.input_shapes[0][0]}};
      })
      .Examples([](const SizePalette& p) {
        // An empty x admits only an empty routing.
        return std::vector<Example>{{{{p[1], p[2]}, {p[0], Ids(p[1], 2)}, {p[0], Ids(p[1], 2)}}, Attrs()},
                                    {{{p[2], p[0]}, {p[1], Ids(p[2], p[0])}, {p[1], Ids(p[2], p[0])}}, Attrs()}};
      });
}

// moe_gate_dispatch(x, gate_logits, corr_bias; k, capacity, use_pad): Paddle's MoE
// dispatch (docs/OPS.md). Each token picks its k experts by gate_logits + corr_bias; the
// routes queue per expert, all first choices in token order before all second choices, and
// the first `capacity` of each queue copy x's row into y [experts, capacity, hidden]. The
// token order and the top-k read whole rows and columns, so s and e are forced replicated
// (Paddle's rule keeps s sharded: unsound, golden/claims); hidden passes from x to y. y is
// linear in x (a gather into zeroed slots): a partial(sum) x stays partial in y only, the
// other outputs never read x (output_reads); partial gate_logits and corr_bias are reduced.
OpDecl moe_gate_dispatch() {
  return OpBuilder("moe_gate_dispatch").Inputs({"x", "gate_logits", "corr_bias"})
      .Outputs({"y", "combine_weights", "scatter_index", "expert_offset", "expert_id"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::MoeGateDispatch)
      .Attr("k", AttrKind::kInt, std::nullopt)
      .Attr("capacity", AttrKind::kInt, std::nullopt)
      .Attr("use_pad", AttrKind::kBool, true)
      .Einsum([](const RuleContext& c) {
        const indexing_plan::MoeGateDispatchPlan plan =
            indexing_plan::PlanMoeGateDispatch(c.input_shapes[0], c.input_shapes[1], c.input_shapes[2], c.attrs);
        EinsumSpec spec = notation::FromLetters({"sh", "se", plan.has_bias ? "e" : ""}, {}, "se");
        const FactorId s = 0, h = 1, e = 2;
        const FactorId slot = spec.AddFactor(plan.capacity), pick = spec.AddFactor(plan.k);
        spec.forced_replicated.push_back(slot);
        spec.forced_replicated.push_back(pick);
        spec.outputs = {{e, slot, h}, {s, pick}, {pick, s}, {e}, {s, pick}};
        spec.output_reads = {{0, 1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}};
        spec.accept = PartialAcceptance::kLinearFirst;
        return spec;
      })
      .Values([](const RuleContext&) {
        // Paddle's gate_logits are probabilities; a bias of the same size moves the
        // selection without deciding it. Distinct values: no ties in the top-k.
        return std::vector<InputValues>{{}, {ValueKind::kProbability}, {ValueKind::kUnit}};
      })
      .Examples([](const SizePalette& p) {
        // Two routes per token into capacity for half the tokens (drops where an expert is
        // popular), with the bias; one route per token into room for every token, no bias.
        const int64_t experts = std::max<int64_t>(p[2], 1);
        return std::vector<Example>{
            {{{p[0], p[1]}, {p[0], experts}, {experts}},
             MakeAttrs({{"k", std::min<int64_t>(2, experts)}, {"capacity", std::max<int64_t>(p[0] / 2, 1)}})},
            {{{p[1], p[0]}, {p[1], experts}, {}}, MakeAttrs({{"k", int64_t{1}}, {"capacity", p[1]}})}};
      });
}

// index_select(x, index, axis): x's slices at the 1-D index's ids along axis.
OpDecl index_select() {
  return OpBuilder("index_select").Inputs({"x", "index"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Select)
      .Attr("axis", AttrKind::kInt, int64_t{0})
      .Einsum([](const RuleContext& c) {
        const indexing_plan::SelectPlan plan =
            indexing_plan::PlanIndexSelect(c.input_shapes[0], c.input_shapes[1], c.attrs);
        return Selection(c, static_cast<int>(plan.axis), false);
      })
      .Values(SelectionValues)
      .Localize({LocalField::kVocabStart}, [](const LocalContext& c) {
        const int64_t rank = static_cast<int64_t>(c.global_inputs[0].size());
        return LocalizeSelection(c, shape::NormalizeAxis(c.attrs.GetInt("axis"), rank, "attrs.axis"));
      })
      .Examples([](const SizePalette& p) {
        // An empty selected axis admits only an empty index.
        return std::vector<Example>{{{{p[0], p[1]}, {Ids(p[1], p[2])}}, MakeAttrs({{"axis", int64_t{1}}})},
                                    {{{p[0], p[1], p[2]}, {Ids(p[0], p[3])}}, Attrs()}};
      });
}

// gather(x, index, axis): as index_select for a 1-D index; a 0-d index selects one slice
// and drops the axis.
OpDecl gather() {
  return OpBuilder("gather").Inputs({"x", "index"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Select)
      .Attr("axis", AttrKind::kInt, int64_t{0})
      .Einsum([](const RuleContext& c) {
        const indexing_plan::SelectPlan plan =
            indexing_plan::PlanGather(c.input_shapes[0], c.input_shapes[1], c.attrs);
        return Selection(c, static_cast<int>(plan.axis), plan.drop_dim);
      })
      .Values(SelectionValues)
      .Localize({LocalField::kVocabStart}, [](const LocalContext& c) {
        const int64_t rank = static_cast<int64_t>(c.global_inputs[0].size());
        return LocalizeSelection(c, shape::NormalizeAxis(c.attrs.GetInt("axis"), rank, "attrs.axis"));
      })
      .Examples([](const SizePalette& p) {
        std::vector<Example> examples = {{{{p[0], p[1]}, {Ids(p[0], p[2])}}, Attrs()}};
        if (p[1] > 0) examples.push_back({{{p[0], p[1]}, {}}, MakeAttrs({{"axis", int64_t{-1}}})});
        return examples;
      });
}

// pad(x, paddings, pad_value): constant padding; paddings holds (before, after) per dim,
// all >= 0. A padded dim is required replicated (the padded output's even split would not
// line up with x's shards). With pad_value == 0 every partial input stays (any reduce op
// of zeros is zero).
OpDecl pad() {
  return OpBuilder("pad").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Pad)
      .Attr("paddings", AttrKind::kInts, std::nullopt)
      .Attr("pad_value", AttrKind::kFloat, 0.0)
      .Einsum([](const RuleContext& c) {
        const int rank = Rank(c);
        const Shape out_shape = indexing_plan::PlanPad(c.input_shapes[0], c.attrs);  // the rule sees no dtype
        const Ints& paddings = c.attrs.GetInts("paddings");
        const std::string x = Letters(rank);
        EinsumSpec spec = notation::FromLetters({x}, {});
        Notation out;
        for (int d = 0; d < rank; ++d) {
          const int64_t before = paddings[2 * static_cast<size_t>(d)];
          const int64_t after = paddings[2 * static_cast<size_t>(d) + 1];
          if (before == 0 && after == 0) {
            out.push_back(spec.inputs[0][static_cast<size_t>(d)]);
            continue;
          }
          spec.forced_replicated.push_back(spec.inputs[0][static_cast<size_t>(d)]);
          const FactorId padded = spec.AddFactor(out_shape[static_cast<size_t>(d)]);
          spec.forced_replicated.push_back(padded);
          out.push_back(padded);
        }
        spec.outputs.push_back(out);
        if (c.attrs.GetFloat("pad_value") == 0.0) spec.accept = PartialAcceptance::kAnyOp;
        return spec;
      })
      .Examples([](const SizePalette& p) {
        return std::vector<Example>{
            {{{p[0], p[1]}}, MakeAttrs({{"paddings", Ints{0, 0, 1, 2}}})},
            {{{p[0], p[1], p[2]}}, MakeAttrs({{"paddings", Ints{2, 0, 0, 0, 0, 1}}, {"pad_value", 1.5}})}};
      });
}

// swiglu(x, y): silu(x) * y elementwise, x and y of one shape (Paddle's fused op with its
// second input given).
OpDecl swiglu() {
  return OpBuilder("swiglu").Inputs({"x", "y"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::Swiglu)
      .Einsum([](const RuleContext& c) {
        shape_plan::CheckSameShape(c.input_shapes[0], c.input_shapes[1]);
        return notation::Elementwise(c.input_shapes);
      })
      .Examples(notation::FromSignatures({{{"ab", "ab"}}, {{"a1", "a1"}}}));
}

}  // namespace spmd::declare
