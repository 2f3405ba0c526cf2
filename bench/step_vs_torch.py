"""The GPT step of bench/train_bench.cc against bench/gpt_torch_bench.py, alternated, one
thread each (OMP/MKL/OpenBLAS threads 1): runs the pair `--pairs` times (default 5) and
prints each run's CPU milliseconds (step, forward, backward, optimizer) and the medians,
with the ratio PyTorch time / spmdkit time (above 1: spmdkit is faster).
Run: python3 bench/step_vs_torch.py [--pairs N] [--train-bench build/bin/train_bench]
     [--python python3-with-torch] [--extra-bench other/train_bench]
(needs torch for --python; not part of the test suite; docs/BENCHMARKS.md "GPT step
against PyTorch")."""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NUMBER = r"([0-9.]+)"


def run(command, env):
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    step = float(re.search(r"CPU " + NUMBER + r" ms", out).group(1))
    phases = re.search(r"forward " + NUMBER + r", backward " + NUMBER + r", optimizer " + NUMBER, out)
    if phases is None:  # a train_bench from before the phases were printed
        return [step, float("nan"), float("nan"), float("nan")]
    return [step] + [float(phases.group(i)) for i in (1, 2, 3)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--train-bench", default=os.path.join(HERE, "..", "build", "bin", "train_bench"))
    parser.add_argument("--extra-bench", default=None, help="a second train_bench (e.g. a build before a change)")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    names = ["torch", "spmdkit"] + (["extra"] if args.extra_bench else [])
    commands = {"torch": [args.python, os.path.join(HERE, "gpt_torch_bench.py")],
                "spmdkit": [args.train_bench, "--step-only"]}
    if args.extra_bench:
        commands["extra"] = [args.extra_bench, "--step-only"]
    results = {name: [] for name in names}
    for pair in range(args.pairs):
        load = os.getloadavg()[0]
        for name in names:
            results[name].append(run(commands[name], env))
        print(f"pair {pair + 1} (load {load:.1f}): " + "; ".join(
            f"{name} step {r[-1][0]:.2f} fwd {r[-1][1]:.2f} bwd {r[-1][2]:.2f} opt {r[-1][3]:.2f}"
            for name, r in results.items()), flush=True)
    medians = {name: [statistics.median(r[i] for r in rs) for i in range(4)] for name, rs in results.items()}
    print(f"medians of {args.pairs} runs, CPU ms (step, forward, backward, optimizer):")
    for name in names:
        print(f"  {name:8s} " + "  ".join(f"{v:6.2f}" for v in medians[name]))
    for name in names[1:]:
        ratios = [t / s for t, s in zip(medians["torch"], medians[name])]
        print(f"  ratio torch/{name}: " + "  ".join(f"{v:6.2f}" for v in ratios))
    # The fastest run of each: on a shared machine, the one least disturbed by others.
    minima = {name: [min(r[i] for r in rs) for i in range(4)] for name, rs in results.items()}
    print(f"minima of {args.pairs} runs, CPU ms (step, forward, backward, optimizer):")
    for name in names:
        print(f"  {name:8s} " + "  ".join(f"{v:6.2f}" for v in minima[name]))
    for name in names[1:]:
        ratios = [t / s for t, s in zip(minima["torch"], minima[name])]
        print(f"  ratio torch/{name}: " + "  ".join(f"{v:6.2f}" for v in ratios))


if __name__ == "__main__":
    main()
