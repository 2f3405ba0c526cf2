#!/usr/bin/env python3
"""Times spmdkit.infer from Python: matmul on a 2x2 mesh, x [64, 32] dims_mapping [0, 1],
y [32, 48] replicated, per call (wall and CPU time, medians over interleaved batches). With
paddlepaddle installed it times Paddle's own rule on the same case in the same run,
paddle.base.core.get_phi_spmd_rule("matmul").infer_forward, and prints the ratio.

    python3 bench/python_infer_bench.py [--calls 5000] [--repeats 15]

Not a test: figures depend on the machine and its load (docs/BENCHMARKS.md records them).
"""

import argparse
import json
import statistics
import time

import spmdkit


def measure(cases, calls, repeats):
    """Per call, for each (name, fn, calls): median wall us, median CPU us (this thread).
    The cases are interleaved, one batch each per repeat, so that every case sees the same
    machine load (the CPU time is the steadier figure on a shared machine)."""
    wall = {name: [] for name, _, _ in cases}
    cpu = {name: [] for name, _, _ in cases}
    for name, fn, _ in cases:
        fn()  # warm up
    for _ in range(repeats):
        for name, fn, n in cases:
            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
            for _ in range(n):
                fn()
            w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
            wall[name].append((w1 - w0) / n / 1e3)
            cpu[name].append((c1 - c0) / n / 1e3)
    return [(name, statistics.median(wall[name]), statistics.median(cpu[name])) for name, _, _ in cases]


def paddle_case():
    """Paddle's matmul rule and its arguments for the same case, or None without paddle."""
    try:
        import paddle  # noqa: F401
        from paddle.base import core
        from paddle.distributed import ProcessMesh
        from paddle.distributed.auto_parallel.static.dist_attribute import DistTensorSpec, TensorDistAttr
    except ImportError as e:
        return None, f"paddlepaddle not installed ({e})"
    mesh = ProcessMesh([[0, 1], [2, 3]], dim_names=["x", "y"])

    def spec(shape, dims_mapping):
        attr = TensorDistAttr()
        attr.process_mesh = mesh
        attr.dims_mapping = dims_mapping
        return DistTensorSpec(shape, attr)

    rule = core.get_phi_spmd_rule("matmul")
    x, y = spec([64, 32], [0, 1]), spec([32, 48], [-1, -1])
    answer = rule.infer_forward(x, y, False, False)  # trans_x, trans_y
    out = answer[1][0]
    return (lambda: rule.infer_forward(x, y, False, False)), f"paddle {paddle.__version__}: out {out.dims_mapping}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()

    mesh = spmdkit.Mesh([2, 2])
    inputs = [([64, 32], [0, 1]), ([32, 48], [-1, -1])]
    r = spmdkit.infer("matmul", mesh, inputs)
    print(f"spmdkit: out {r.outputs[0].dims_mapping} partial {r.outputs[0].partial}")
    placements = [([64, 32], "[S(0), S(1)]"), ([32, 48], "[R, R]")]
    line = json.dumps({"op": "matmul", "mesh_shape": [2, 2],
                       "inputs": [{"shape": [64, 32], "dims_mapping": [0, 1]},
                                  {"shape": [32, 48], "dims_mapping": [-1, -1]}]})
    cases = [
        ("spmdkit.infer (Mesh object, dims_mapping lists)",
         lambda: spmdkit.infer("matmul", mesh, inputs), args.calls),
        ("spmdkit.infer (placements strings)", lambda: spmdkit.infer("matmul", mesh, placements), args.calls),
        ("spmdkit.infer (mesh as a list)", lambda: spmdkit.infer("matmul", [2, 2], inputs), args.calls),
        ("spmdkit.infer_json (the `spmd infer` JSON path)", lambda: spmdkit.infer_json(line), args.calls),
    ]
    paddle_fn, paddle_note = paddle_case()
    print(paddle_note)
    if paddle_fn is not None:
        cases.append(("paddle get_phi_spmd_rule('matmul').infer_forward", paddle_fn, max(1, args.calls // 4)))
    rows = measure(cases, args.calls, args.repeats)
    print(f"{'per call':52s} {'wall us':>8s} {'CPU us':>8s}   (medians of {args.repeats} interleaved batches)")
    for name, wall, cpu in rows:
        print(f"{name:52s} {wall:8.2f} {cpu:8.2f}")
    if paddle_fn is not None:
        print(f"ratio paddle / spmdkit.infer: {rows[-1][1] / rows[0][1]:.1f}x wall, "
              f"{rows[-1][2] / rows[0][2]:.1f}x CPU")


if __name__ == "__main__":
    main()
