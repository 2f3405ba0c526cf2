"""The audit's cases, from the op declarations' examples (the shapes and attrs the checker
generates its cases from, exposed by `spmdkit._core.examples`): each case draws a size
palette, takes one of the op's examples on it, a mesh of 1 to 3 axes of sizes 1 to 4 and
a random layout per input (random dims mapping, sometimes a partial(sum) axis; never
partial on an input holding ids, labels or conditions)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import List, Sequence

from spmdkit import _core

# Dim sizes a palette draws from: size 1, sizes that divide 2 and 4, and sizes that divide
# no mesh axis above 1 (uneven shards).
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 12]
PALETTE_LENGTH = 6


def random_mesh(rng) -> List[int]:
    return [rng.randint(1, 4) for _ in range(rng.randint(1, 3))]


def random_layout(rng, rank: int, mesh: Sequence[int], allow_partial: bool) -> dict:
    """A flat dims mapping (each mesh axis on at most one dim) and maybe a partial(sum) axis
    that shards no dim."""
    free = list(range(len(mesh)))
    rng.shuffle(free)
    mapping = [-1] * rank
    for d in range(rank):
        if free and rng.random() < 0.5:
            mapping[d] = free.pop()
    partial = {}
    if allow_partial and free and rng.random() < 0.3:
        partial[free.pop()] = "sum"
    return {"dims_mapping": mapping, "partial": partial}


@dataclass
class Request:
    """One audit case, in `spmd infer`'s request form."""

    op: str
    mesh: List[int]
    shapes: List[List[int]]
    layouts: List[dict]
    attrs: dict

    def inputs(self) -> List[dict]:
        return [{"shape": s, "dims_mapping": l["dims_mapping"], "partial": dict(l["partial"])}
                for s, l in zip(self.shapes, self.layouts)]

    def infer_line(self) -> str:
        """The request as a `spmd infer` JSON line."""
        return json.dumps({"op": self.op, "attrs": self.attrs, "mesh_shape": self.mesh,
                           "inputs": [_json_tensor(t) for t in self.inputs()]}, sort_keys=True)


def _json_tensor(t: dict) -> dict:
    out = {"shape": t["shape"], "dims_mapping": t["dims_mapping"]}
    if t.get("partial"):
        out["partial"] = {str(k): v for k, v in t["partial"].items()}
    return out


def _json_tensor(t: dict) -> dict:
    out = {"shape": t["shape"], "dims_mapping": t["dims_mapping"]}
    if t.get("partial"):
        out["partial"] = {str(k): v for k, v in t["partial"].items()}
    return out


def _json_tensor(t: dict) -> dict:
    out = {"shape": t["shape"], "dims_mapping": t["dims_mapping"]}
    if t.get("partial"):
        out["partial"] = {str(k): v for k, v in t["partial"].items()}
    return out


class NoExample(Exception):
    """The declaration gives no example the op accepts on the palettes drawn."""


def example(op: str, rng) -> dict:
    """One of the op's declared examples on a random palette: {"shapes", "attrs",
    "int_inputs"}."""
    for _ in range(20):
        palette = [rng.choice(SIZES) for _ in range(PALETTE_LENGTH)]
        found = _core.examples(op, palette)
        if found:
            return rng.choice(found)
    raise NoExample(f"{op}: no declared example on 20 palettes")


def generate(op: str, rng) -> Request:
    ex = example(op, rng)
    mesh = random_mesh(rng)
    layouts = [random_layout(rng, len(s), mesh, allow_partial=i not in ex["int_inputs"])
               for i, s in enumerate(ex["shapes"])]
    return Request(op, mesh, [list(s) for s in ex["shapes"]], layouts, dict(ex["attrs"]))


def probe(op: str, rng) -> Request:
    """A case with every input replicated on a mesh of 2: does a candidate call answer at all?"""
    ex = example(op, rng)
    shapes = [list(s) for s in ex["shapes"]]
    return Request(op, [2], shapes, [{"dims_mapping": [-1] * len(s), "partial": {}} for s in shapes],
                   dict(ex["attrs"]))
