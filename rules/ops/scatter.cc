// Index-driven reads and writes with Paddle's names, attrs and argument orders: gather_nd,
// scatter, scatter_nd_add, put_along_axis, index_put. The dims an index addresses are read (or written) across
// shards, so they are forced replicated, except scatter's row dim, which stays sharded:
// a shard holding x's rows [start, start + n) applies only the updates that land there
// (the localizer passes the shard's first row), and out keeps x's row sharding.
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
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

// gather_nd: scatter_nd_add of the cotangent into zeros; scatter_nd_add: x gets the
// cotangent, updates gather_nd of it. The index gets none.
// gather_nd: x gets every row's cotangent added at its tuple (repeats add up), the index
// none.
VjpGraph GatherNd(const RuleContext&) {
  VjpGraph g;
  g.input_grads = {g.Add("scatter_nd_add", {Zeros(g, Ref::Input(0)), Ref::Input(1), Ref::OutputGrad(0)}),
                   std::nullopt};
  return g;
}

// scatter_nd_add: x gets g, updates the rows of g at their tuples, the index none.
VjpGraph ScatterNdAdd(const RuleContext&) {
  VjpGraph g;
  g.input_grads = {Ref::OutputGrad(0), std::nullopt, g.Add("gather_nd", {Ref::OutputGrad(0), Ref::Input(1)})};
  return g;
}

// scatter: x gets the cotangent with the named rows zeroed; updates the named rows
// (overwrite: only the last update to a row, found by scattering the positions).
// scatter: the rows the index names come from the updates in both modes, so x gets g with
// those rows zeroed (a scatter of zeros). Accumulate mode: update i gets g's row index[i].
// Overwrite mode: only the last update to a row reaches out, so the others get 0 (Paddle's
// kernel gives every one the row). The winner is found with the updates' positions
// 1..N (a cumsum of ones, in float64 so that every position is exact): scatter them into
// a zero x, read back each update's row, and an update whose row holds a later position
// lost.
VjpGraph Scatter(const RuleContext& c) {
  VjpGraph g;
  const Ref index = Ref::Input(1);
  const Ref x_grad = g.Add("scatter", {Ref::OutputGrad(0), index, Zeros(g, Ref::Input(2))},
                           MakeAttrs({{"overwrite", true}}));
  const Ref rows = g.Add("gather", {Ref::OutputGrad(0), index}, MakeAttrs({{"axis", int64_t{0}}}));
  if (!c.attrs.GetBool("overwrite")) {
    g.input_grads = {x_grad, std::nullopt, rows};
    return g;
  }
  const auto wide = [&g](Ref t) { return g.Add("cast", {t}, MakeAttrs({{"dtype", std::string("float64")}})); };
  const Ref position = g.Add("cumsum", {wide(Filled(g, Ref::Input(2), 1))}, MakeAttrs({{"axis", int64_t{0}}}));
  const Ref winners = g.Add("scatter", {wide(Zeros(g, Ref::Input(0))), index, position},
                            MakeAttrs({{"overwrite", true}}));
  const Ref winner = g.Add("gather", {winners, index}, MakeAttrs({{"axis", int64_t{0}}}));
  const Ref lost = g.Add("greater_than", {winner, position});
  g.input_grads = {x_grad, std::nullopt, Drop(g, lost, rows)};
  return g;
}

// put_along_axis's reducing modes. An operand is x's element at a position some value
// lands on (include_self) or a value; "at its position" is x's position or, for a value,
// the position it lands on (take_along_axis reads it back). Sums and counts over a
// position are put_along_axis adds into zeros (or into x's own term).
// mean: each operand gets the cotangent over the operands' count.
// amin / amax: the cotangent shared equally by the operands equal to the extreme (as
// Paddle's put_along_axis_grad; an operand is never beyond its own position's extreme, so
// "not beyond" is "equal to it").
// mul: each operand gets the cotangent times the product of its position's other operands,
// without dividing by it (prod's VJP): with no zero at the position, g * rest / e; with one,
// the zero gets g * rest and the others 0; with more, all 0 (rest: the product of the
// nonzero operands, zeros counted and replaced by ones so no quotient is taken at a zero;
// Paddle's g * out / e gives NaN there).
// A position no value lands on keeps x's element: x gets the cotangent there whole in every
// mode (its count is 1, it is its own extreme, the product of the others is 1).
VjpGraph PutReduceVjp(const RuleContext& c, VjpGraph g, Ref cleared, Ref read) {
  const Ref x = Ref::Input(0), index = Ref::Input(1), v = Ref::Input(2), grad = Ref::OutputGrad(0);
  const int64_t axis = c.attrs.GetInt("axis");
  const bool self = c.attrs.GetBool("include_self");
  const std::string& reduce = c.attrs.GetString("reduce");
  const auto put = [&](Ref into, Ref value, const char* mode) {
    return g.Add("put_along_axis", {into, index, value},
                 MakeAttrs({{"axis", axis}, {"reduce", std::string(mode)}, {"include_self", true}}));
  };
  const auto take = [&](Ref from) {
    return g.Add("take_along_axis", {from, index}, MakeAttrs({{"axis", axis}}));
  };
  if (reduce == "mean") {
    const Ref count = put(self ? Filled(g, x, 1) : Zeros(g, x), Filled(g, v, 1), "add");
    if (self) {
      const Ref share = g.Add("divide", {grad, count});
      g.input_grads = {share, std::nullopt, take(share)};
    } else {
      g.input_grads = {cleared, std::nullopt, g.Add("divide", {read, take(count)})};
    }
    return g;
  }
  if (reduce == "amin" || reduce == "amax") {
    // The extreme is put again from the operands as the graph holds them (not the forward's
    // output), so that an operand compares equal to its own position's extreme even where x
    // was a partial sum whose reduction rounds differently.
    const char* beyond = reduce == "amax" ? "less_than" : "greater_than";
    const Ref extreme = g.Add("put_along_axis", {x, index, v}, c.attrs);
    const Ref v_beyond = g.Add(beyond, {v, take(extreme)});
    const Ref v_tie = Drop(g, v_beyond, Filled(g, v, 1));
    Ref x_tie = Zeros(g, x);
    Ref x_beyond = x_tie;
    if (self) {
      x_beyond = g.Add(beyond, {x, extreme});
      x_tie = Drop(g, x_beyond, Filled(g, x, 1));
    }
    const Ref ties = put(x_tie, v_tie, "add");
    const Ref v_grad = Drop(g, v_beyond, g.Add("divide", {read, take(ties)}));
    if (self) {
      g.input_grads = {Drop(g, x_beyond, g.Add("divide", {grad, ties})), std::nullopt, v_grad};
    } else {
      g.input_grads = {cleared, std::nullopt, v_grad};
    }
    return g;
  }
  // mul: per operand, `safe` (the operand, a zero replaced by 1) and `is_zero` (1 or 0).
  const auto split = [&g](Ref e) {
    const Ref zero = Zeros(g, e), one = Filled(g, e, 1);
    const Ref nonzero = g.Add("greater_than", {g.Add("abs", {e}), zero});
    return std::pair<Ref, Ref>{g.Add("where", {nonzero, e, one}), g.Add("where", {nonzero, zero, one})};
  };
  const auto [v_safe, v_zero] = split(v);
  Ref x_safe = Filled(g, x, 1), x_zero = Zeros(g, x);
  if (self) std::tie(x_safe, x_zero) = split(x);
  const Ref rest = put(x_safe, v_safe, "mul");     // the product of each position's nonzeros
  const Ref zeros = put(x_zero, v_zero, "add");    // and its zeros' count
  // An operand's gradient from its position's cotangent times rest, its zero count, and its own safe / is_zero.
  const auto others = [&g](Ref scaled, Ref count, Ref safe, Ref is_zero) {
    const Ref half = Filled(g, count, 0.5);
    const Ref none = g.Add("less_than", {count, half});
    const Ref one_zero = g.Add("less_than", {g.Add("abs", {ScaleBy(g, count, 1, -1)}), half});
    return g.Add("where", {none, g.Add("divide", {scaled, safe}),
                           Keep(g, one_zero, g.Add("multiply", {scaled, is_zero}))});
  };
  const Ref scaled = g.Add("multiply", {grad, rest});
  const Ref v_grad = others(take(scaled), take(zeros), v_safe, v_zero);
  g.input_grads = {self ? others(scaled, zeros, x_safe, x_zero) : cleared, std::nullopt, v_grad};
  return g;
}

// put_along_axis: the index gets none; value gets the cotangent read back where it landed
// (take_along_axis). Without include_self, x gets the cotangent with the positions written
// zeroed (a put of zeros), as with assign. assign: of values landing on one position only
// the last along the axis reaches out, so the others get 0 (the winner is found as
// scatter's: positions 1..n along the axis, in float64, put with assign and read back; a
// value whose position reads back larger lost). add: each operand gets the cotangent whole
// (x with include_self). The other modes: PutReduceVjp.
VjpGraph PutAlongAxis(const RuleContext& c) {
  VjpGraph g;
  const Ref index = Ref::Input(1);
  const int64_t axis = c.attrs.GetInt("axis");
  const auto put = [&](Ref into, Ref value) {
    return g.Add("put_along_axis", {into, index, value},
                 MakeAttrs({{"axis", axis}, {"reduce", std::string("assign")}, {"include_self", true}}));
  };
  const auto take = [&](Ref from) {
    return g.Add("take_along_axis", {from, index}, MakeAttrs({{"axis", axis}}));
  };
  const Ref read = take(Ref::OutputGrad(0));
  const Ref cleared = put(Ref::OutputGrad(0), Zeros(g, Ref::Input(2)));
  const std::string& reduce = c.attrs.GetString("reduce");
  if (reduce == "add") {
    g.input_grads = {c.attrs.GetBool("include_self") ? Ref::OutputGrad(0) : cleared, std::nullopt, read};
    return g;
  }
  if (reduce != "assign") return PutReduceVjp(c, std::move(g), cleared, read);
  const auto wide = [&g](Ref t) { return g.Add("cast", {t}, MakeAttrs({{"dtype", std::string("float64")}})); };
  const Ref position = g.Add("cumsum", {wide(Filled(g, Ref::Input(2), 1))}, MakeAttrs({{"axis", axis}}));
  const Ref winner = take(put(wide(Zeros(g, Ref::Input(0))), position));
  const Ref lost = g.Add("greater_than", {winner, position});
  g.input_grads = {cleared, std::nullopt, Drop(g, lost, read)};
  return g;
}

// index_put: the index tensors get none. The positions written are read back with one
// gather_nd of the cotangent: each index cast to float64, wrapped into [0, n) (remainder by
// n: a negative id counts from the end) and cast back to int64, expanded to the broadcast
// shape B and stacked on a last dim of k. value gets those rows, summed over the dims it was broadcast along.
// accumulate: x gets the cotangent as is. Otherwise x gets it with the written positions
// zeroed (an index_put of zeros), and of the writes landing on one position only the last
// in B's row-major order reaches out: the winners are found as scatter's (positions 1..|B|
// as a cumsum of ones in float64, put into a zero x, read back; a write whose position
// reads back larger lost and gets 0).
VjpGraph IndexPut(const RuleContext& c) {
  VjpGraph g;
  const indexing_plan::IndexPutPlan plan = indexing_plan::PlanIndexPut(c.input_shapes, c.attrs);
  const auto k = static_cast<size_t>(plan.k);
  const Shape& x = c.input_shapes[0];
  const Shape& value = c.input_shapes.back();
  const auto wide = [&g](Ref t) { return g.Add("cast", {t}, MakeAttrs({{"dtype", std::string("float64")}})); };
  Shape column = plan.broadcast;
  column.push_back(1);
  std::vector<Ref> columns;
  Ref first;  // index 0 wrapped and expanded to B
  for (size_t j = 0; j < k; ++j) {
    const Ref id = wide(Ref::Input(j + 1));
    const Ref wrapped = g.Add("cast", {g.Add("remainder", {id, Filled(g, id, static_cast<double>(x[j]))})},
                              MakeAttrs({{"dtype", std::string("int64")}}));
    const Ref expanded = ExpandTo(g, wrapped, c.input_shapes[j + 1], plan.broadcast);
    if (j == 0) first = expanded;
    columns.push_back(Reshape(g, expanded, plan.broadcast, column));
  }
  const auto last = static_cast<int64_t>(plan.broadcast.size());
  const Ref stacked = k == 1 ? columns[0] : g.Add("concat", columns, MakeAttrs({{"axis", last}}));
  const Ref read = g.Add("gather_nd", {Ref::OutputGrad(0), stacked});
  std::vector<std::optional<Ref>> grads;
  const auto with_value = [&](Ref x_grad, Ref rows) {
    grads.push_back(x_grad);
    for (size_t j = 0; j < k; ++j) grads.push_back(std::nullopt);
    grads.push_back(SumToShape(g, rows, plan.written, value));
    g.input_grads = grads;
    return g;
  };
  if (plan.accumulate) return with_value(Ref::OutputGrad(0), read);
  const auto put = [&](Ref into, Ref with) {
    std::vector<Ref> args = {into};
    for (size_t j = 0; j < k; ++j) args.push_back(Ref::Input(j + 1));
    args.push_back(with);
    return g.Add("index_put", args, MakeAttrs({{"accumulate", false}}));
  };
  const Ref cleared = put(Ref::OutputGrad(0), Zeros(g, Ref::Input(k + 1)));
  const int64_t count = Numel(plan.broadcast);
  Shape position_shape = plan.broadcast;
  position_shape.resize(plan.written.size(), 1);
  const Ref ones = wide(Filled(g, Reshape(g, first, plan.broadcast, {count}), 1));
  const Ref flat = g.Add("cumsum", {ones}, MakeAttrs({{"axis", int64_t{0}}}));
  const Ref position = Reshape(g, flat, {count}, position_shape);
  const Ref winner = g.Add("gather_nd", {put(wide(Zeros(g, Ref::Input(0))), position), stacked});
  const Ref lost = g.Add("greater_than", {winner, position});
  return with_value(cleared, Drop(g, lost, read));
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::Letters;
using notation::MakeAttrs;

int Rank(const RuleContext& c, size_t i) { return static_cast<int>(c.input_shapes[i].size()); }

// Ids of an index into x's first `depth` dims: in [0, the smallest of those dims), so that
// every column is in range (the generators have one bound per input).
InputValues DepthIds(const Shape& x, int depth) {
  int64_t bound = 0;
  for (int d = 0; d < depth; ++d) bound = d == 0 ? x[d] : std::min(bound, x[d]);
  return {ValueKind::kIndex, depth == 0 ? 1 : bound};
}

// A batch of index rows for an example: `count`, or 0 when an addressed dim of x is empty.
int64_t Rows(const Shape& x, int depth, int64_t count) {
  for (int d = 0; d < depth; ++d) {
    if (x[d] == 0) return 0;
  }
  return count;
}

}  // namespace

// gather_nd(x, index): index `..., K` holds K-tuples addressing x's first K dims; out =
// index.shape[:-1] + x.shape[K:], each row the slice x[tuple]. x `ab|cd` (K = 2), index
// `pqk`, out `pqcd`, R(a, b, k): the addressed dims and the tuple dim are read whole.
OpDecl gather_nd() {
  return OpBuilder("gather_nd").Inputs({"x", "index"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::GatherNd)
      .Einsum([](const RuleContext& c) {
        const int depth = static_cast<int>(indexing_plan::PlanGatherNd(c.input_shapes[0], c.input_shapes[1]).depth);
        const int x_rank = Rank(c, 0);
        const int batch = Rank(c, 1) - 1;
        const std::string x = Letters(x_rank);
        const std::string b = Letters(batch, static_cast<char>('a' + x_rank));
        const std::string k(1, static_cast<char>('a' + x_rank + batch));
        if (x_rank + batch + 1 > 26) ThrowUnsupported("inputs", "more than 26 dims in all");
        return notation::FromLetters({x, b + k}, {b + x.substr(static_cast<size_t>(depth))},
                                     x.substr(0, static_cast<size_t>(depth)) + k);
      })
      .Values([](const RuleContext& c) {
        const int depth = c.input_shapes[1].empty() ? 0 : static_cast<int>(c.input_shapes[1].back());
        return std::vector<InputValues>{{}, DepthIds(c.input_shapes[0], std::min(depth, Rank(c, 0)))};
      })
      .Examples([](const SizePalette& p) {
        const Shape x3 = {p[0], p[1], p[2]};
        const Shape x2 = {p[0], p[1]};
        return std::vector<Example>{{{x3, {Rows(x3, 2, p[3]), 2}}, Attrs()},
                                    {{x2, {Rows(x2, 1, p[2]), p[3], 1}}, Attrs()},
                                    {{x2, {Rows(x2, 2, 3), 2}}, Attrs()}};
      });
}

// scatter(x, index, updates, overwrite): index 1-D of N row ids of x, updates `N` rows
// of x's row shape. overwrite: out[index[i]] = updates[i] (a repeated id: the last
// wins); else the rows named are zeroed, then every update added to its row. x `ab`,
// index `n`, updates `nb`, out `ab`, R(n); x's rows may stay sharded (localized).
OpDecl scatter() {
  return OpBuilder("scatter").Inputs({"x", "index", "updates"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::Scatter)
      .Attr("overwrite", AttrKind::kBool, true)
      .Einsum([](const RuleContext& c) {
        indexing_plan::PlanScatter(c.input_shapes[0], c.input_shapes[1], c.input_shapes[2], c.attrs);
        const std::string x = Letters(Rank(c, 0));
        const std::string n(1, static_cast<char>('a' + Rank(c, 0)));
        return notation::FromLetters({x, n, n + x.substr(1)}, {x}, n);
      })
      .Values([](const RuleContext& c) {
        const int64_t rows = c.input_shapes[0].empty() ? 0 : c.input_shapes[0][0];
        return std::vector<InputValues>{{}, {ValueKind::kIndex, rows}, {}};
      })
      .Localize({LocalField::kVocabStart}, [](const LocalContext& c) {
        return c.attrs.WithLocal({.vocab_start = c.input_offsets[0][0]});
      })
      .Examples([](const SizePalette& p) {
        const int64_t n = p[0] == 0 ? 0 : p[2];
        return std::vector<Example>{
            {{{p[0], p[1]}, {n}, {n, p[1]}}, Attrs()},
            {{{p[0], p[1], p[3]}, {n}, {n, p[1], p[3]}}, MakeAttrs({{"overwrite", false}})}};
      });
}

// scatter_nd_add(x, index, updates): index `..., K` of K-tuples into x's first K dims,
// updates index.shape[:-1] + x.shape[K:]; out = x plus each update added at its tuple.
// x `ab|c`, index `pk`, updates `pc`, out `abc`, R(a, b, p, k): a batch shard would add
// x once per shard.
OpDecl scatter_nd_add() {
  return OpBuilder("scatter_nd_add").Inputs({"x", "index", "updates"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::ScatterNdAdd)
      .Einsum([](const RuleContext& c) {
        const int depth = static_cast<int>(
            indexing_plan::PlanScatterNdAdd(c.input_shapes[0], c.input_shapes[1], c.input_shapes[2]).depth);
        const int x_rank = Rank(c, 0);
        const int batch = Rank(c, 1) - 1;
        if (x_rank + batch + 1 > 26) ThrowUnsupported("inputs", "more than 26 dims in all");
        const std::string x = Letters(x_rank);
        const std::string b = Letters(batch, static_cast<char>('a' + x_rank));
        const std::string k(1, static_cast<char>('a' + x_rank + batch));
        const std::string tail = x.substr(static_cast<size_t>(depth));
        return notation::FromLetters({x, b + k, b + tail}, {x}, x.substr(0, static_cast<size_t>(depth)) + b + k);
      })
      .Values([](const RuleContext& c) {
        const int depth = c.input_shapes[1].empty() ? 0 : static_cast<int>(c.input_shapes[1].back());
        return std::vector<InputValues>{{}, DepthIds(c.input_shapes[0], std::min(depth, Rank(c, 0))), {}};
      })
      .Examples([](const SizePalette& p) {
        const Shape x3 = {p[0], p[1], p[2]};
        const int64_t n = Rows(x3, 2, p[3]);
        const int64_t m = Rows(x3, 1, 2);
        return std::vector<Example>{{{x3, {n, 2}, {n, p[2]}}, Attrs()},
                                    {{x3, {m, 3, 1}, {m, 3, p[1], p[2]}}, Attrs()}};
      });
}

// put_along_axis(x, index, value, axis, reduce, include_self): out = x with each value
// written at index's position along axis (take_along_axis's positions): assign, or reduced
// there with x's element (include_self) by add, mul, mean, amin or amax.
// x's axis is written across, and so is each dim where index is smaller than x (it writes
// x's leading part by position): there x's dim is forced replicated, and index's and
// value's with it (a shard of them would write at its own positions). Elsewhere x, index,
// value and out share a dim. A partial input is reduced first.
OpDecl put_along_axis() {
  return OpBuilder("put_along_axis").Inputs({"x", "index", "value"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::PutAlongAxis)
      .Attr("axis", AttrKind::kInt, int64_t{0})
      .Attr("reduce", AttrKind::kString, std::string("assign"))
      .Attr("include_self", AttrKind::kBool, true)
      .Einsum([](const RuleContext& c) {
        const indexing_plan::PutAlongAxisPlan plan = indexing_plan::PlanPutAlongAxis(
            c.input_shapes[0], c.input_shapes[1], c.input_shapes[2], c.attrs);
        const std::vector<bool> whole =
            indexing_plan::AlongAxisWholeDims(c.input_shapes[0], c.input_shapes[1], plan.axis);
        std::string x, index, forced;
        for (int d = 0; d < Rank(c, 0); ++d) {
          const char shared = static_cast<char>('a' + d);
          if (whole[static_cast<size_t>(d)]) {
            const char own = static_cast<char>('A' + d);  // x's own dim, written across
            x += own;
            forced += own;
            forced += shared;
          } else {
            x += shared;
          }
          index += shared;
        }
        return notation::FromLetters({x, index, index}, {x}, forced);
      })
      .Values([](const RuleContext& c) {
        const indexing_plan::PutAlongAxisPlan plan = indexing_plan::PlanPutAlongAxis(
            c.input_shapes[0], c.input_shapes[1], c.input_shapes[2], c.attrs);
        return std::vector<InputValues>{{}, {ValueKind::kIndex, c.input_shapes[0][static_cast<size_t>(plan.axis)]}, {}};
      })
      .Examples([](const SizePalette& p) {
        // An empty x axis admits only an empty index there; random ids repeat along the axis.
        const auto ids = [](int64_t rows, int64_t count) { return rows == 0 ? 0 : count; };
        const Shape x3 = {p[0], p[1], p[2]};
        const Shape x2 = {p[0], p[1]};
        const Shape i3 = {p[0], ids(p[1], p[3]), p[2]};
        const Shape i2 = {ids(p[0], p[2]), p[1]};
        const Shape i_small = {p[0] / 2, ids(p[1], p[2])};  // smaller than x off the axis
        return std::vector<Example>{
            {{x3, i3, i3}, MakeAttrs({{"axis", int64_t{1}}})},
            {{x2, i2, i2}, MakeAttrs({{"axis", int64_t{0}}, {"reduce", std::string("add")}})},
            {{x2, i_small, i_small},
             MakeAttrs({{"axis", int64_t{-1}}, {"reduce", std::string("add")}, {"include_self", false}})},
            {{x2, i_small, i_small}, MakeAttrs({{"axis", int64_t{1}}})},
            {{x2, i2, i2}, MakeAttrs({{"axis", int64_t{0}}, {"reduce", std::string("mul")}})},
            {{x2, i_small, i_small},
             MakeAttrs({{"axis", int64_t{1}}, {"reduce", std::string("mean")}, {"include_self", false}})},
            {{x2, i_small, i_small}, MakeAttrs({{"axis", int64_t{-1}}, {"reduce", std::string("amax")}})},
            {{x2, i2, i2},
             MakeAttrs({{"axis", int64_t{0}}, {"reduce", std::string("amin")}, {"include_self", false}})}};
      });
}

// index_put(x, indices..., value, accumulate): the k index tensors (k <= rank(x)) broadcast
// to B; out = x with out[i0[b], ..., i{k-1}[b], t...] = value[b, t...] (accumulate: +=),
// value broadcastable to B + x.shape[k:]. Inputs are one flat list: x, the indices, value.
// x's first k dims are written by position, so they are forced replicated (on x and out);
// B's dims are forced replicated on the indices and value (a shard of them would write its
// own copy of x). x's trailing dims may stay sharded, shared with value's trailing dims
// (a size-1 value dim broadcasts: `1`). A partial input is reduced first.
OpDecl index_put() {
  return OpBuilder("index_put").VariadicInputs("inputs").Outputs({"out"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::IndexPut)
      .Attr("accumulate", AttrKind::kBool, false)
      .Einsum([](const RuleContext& c) {
        const indexing_plan::IndexPutPlan plan = indexing_plan::PlanIndexPut(c.input_shapes, c.attrs);
        const size_t rank = c.input_shapes[0].size();
        const auto k = static_cast<size_t>(plan.k);
        const size_t nb = plan.broadcast.size();
        if (rank > 26 || k + nb > 26) ThrowUnsupported("inputs", "more than 26 dims in x or in x's and B's");
        std::string x, forced;
        for (size_t d = 0; d < rank; ++d) {
          const char own = d < k ? static_cast<char>('A' + d) : static_cast<char>('a' + d);
          x += own;
          if (d < k) forced += own;
        }
        std::string written;  // B's letters, then x's trailing ones
        for (size_t q = 0; q < nb; ++q) written += static_cast<char>('Z' - q);
        forced += written;
        written += x.substr(k);
        // An operand's dims aligned right with `shape` (letters `letters`): the letter where
        // the sizes agree, `1` where the dim broadcasts.
        const auto aligned = [](const Shape& s, const Shape& shape, const std::string& letters) {
          std::string out;
          const size_t offset = shape.size() - s.size();
          for (size_t d = 0; d < s.size(); ++d) out += s[d] == shape[offset + d] ? letters[offset + d] : '1';
          return out;
        };
        std::vector<std::string> inputs = {x};
        for (size_t j = 1; j <= k; ++j) inputs.push_back(aligned(c.input_shapes[j], plan.broadcast, written));
        inputs.push_back(aligned(c.input_shapes.back(), plan.written, written));
        return notation::FromLetters(inputs, {x}, forced);
      })
      .Values([](const RuleContext& c) {
        std::vector<InputValues> kinds(c.input_shapes.size());
        for (size_t j = 1; j + 1 < c.input_shapes.size() && j - 1 < c.input_shapes[0].size(); ++j) {
          kinds[j] = {ValueKind::kIndex, c.input_shapes[0][j - 1]};
        }
        return kinds;
      })
      .Examples([](const SizePalette& p) {
        // Random ids repeat: assign's last write wins, and the VJP's winners are exercised.
        const Shape x2 = {p[0], p[1]};
        const Shape x3 = {p[0], p[1], p[2]};
        return std::vector<Example>{
            {{x2, {p[2]}, {p[2], p[1]}}, Attrs()},
            {{x2, {p[2], 1}, {p[1]}, {p[1]}}, MakeAttrs({{"accumulate", true}})},
            {{x3, {p[1]}, {p[1]}, {p[2]}}, Attrs()},
            {{x2, {}, {p[1]}}, MakeAttrs({{"accumulate", true}})}};
      });
}

}  // namespace spmd::declare
