#!/usr/bin/env python3
"""Merges the Markdown tables of several reshard_bench runs into one.

On an oversubscribed machine one mpirun launch can differ from the next by a factor of two
(where the ranks land, what else runs), more than the median over repetitions inside a
launch can hide. So run the benchmark several times and keep, per row and numeric column,
the median over the launches; the ratios and percentages against a reference time are
recomputed from the merged times ("runtime / raw work", "vs raw coll.", or the older
tables' "vs raw work" and "raw MPI ms"); "paired ratio" and "raw work IQR" are medians over
the launches of each launch's own figure.

    for i in 1 2 3; do mpirun -np 8 ... build/bin/reshard_bench --sizes-mib 1,64 > run$i.md; done
    python3 bench/median_tables.py run1.md run2.md run3.md

--compare BEFORE.md ... -- AFTER.md ...: one row per transition with the paired ratio of
each set (the median over its launches), the launches' range, and the target judged on
the after set: for two builds launched alternately in the same time window.

    python3 bench/median_tables.py --compare main.*.md -- new.*.md
"""
import statistics
import sys


def rows(path):
    header, out = None, []
    for line in open(path):
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-"):
            out.append(cells)
    return header, out


def number(text):
    try:
        return float(text.rstrip("%"))
    except ValueError:
        return None


def main(paths):
    if not paths:
        sys.exit("usage: median_tables.py RUN.md [RUN.md ...]")
    header, merged, order = None, {}, []
    for path in paths:
        h, body = rows(path)
        if h is None:
            sys.exit(f"{path}: no table")
        if header is not None and h != header:
            sys.exit(f"{path}: another table layout")
        header = h
        for cells in body:
            key = tuple(cells[:3])  # transition, mesh (or ranks), MiB
            if key not in merged:
                merged[key] = []
                order.append(key)
            merged[key].append(cells)
    col = {name: i for i, name in enumerate(header)}
    print(f"median over {len(paths)} launches\n")
    # The target: the runtime within 10% of raw work at 1 MiB (below 16 MiB), within 5% at
    # 16 MiB and more; judged on the paired ratio (the median of per-round ratios).
    judge = "paired ratio" in col
    print("| " + " | ".join(header + (["target"] if judge else [])) + " |")
    print("|" + "---|" * (len(header) + (1 if judge else 0)))
    for key in order:
        runs = merged[key]
        out = list(runs[0])
        for i in range(3, len(header)):
            values = [number(r[i]) for r in runs]
            if all(v is not None for v in values) and not header[i].startswith("vs") \
                    and not header[i].startswith("outside /") and header[i] != "runtime / raw work":
                m = statistics.median(values)
                if header[i] == "paired ratio":
                    out[i] = f"{m:.2f}"
                elif runs[0][i].endswith("%"):
                    out[i] = f"{m:.0f}%"
                else:
                    out[i] = f"{m:.3f}"
        runtime = number(out[col["runtime ms"]])
        # Each reference time and its "vs" column (the current table, then the older one).
        for ref, vs in (("raw work ms", "vs raw work"), ("raw coll. ms", "vs raw coll."),
                        ("raw MPI ms", "vs raw"), ("raw MPI_I* ms", "vs MPI_I*")):
            if ref in col and vs in col and number(out[col[ref]]) not in (None, 0.0):
                t = number(out[col[ref]])
                out[col[vs]] = f"{100 * (runtime - t) / t:+.0f}%"
        if "runtime / raw work" in col and number(out[col["raw work ms"]]):
            out[col["runtime / raw work"]] = f"{runtime / number(out[col['raw work ms']]):.2f}"
        for ref, share in (("raw coll. ms", "outside / raw coll."), ("raw MPI ms", "outside / raw")):
            if ref in col and share in col and "outside ms" in col and number(out[col[ref]]):
                out[col[share]] = f"{100 * number(out[col['outside ms']]) / number(out[col[ref]]):.0f}%"
        if judge:
            paired, mib = number(out[col["paired ratio"]]), number(out[col["MiB"]])
            if paired is None or mib is None:
                out.append("-")
            else:
                limit = limit_for(mib)
                out.append(f"{'ok' if paired <= limit else 'over'} ({limit:.2f})")
        print("| " + " | ".join(out) + " |")


def limit_for(mib):
    return 1.10 if mib < 16 else 1.05


def paired_by_row(paths):
    """{(transition, mesh, MiB): [paired ratio per launch]} in first-seen order."""
    out = {}
    for path in paths:
        header, body = rows(path)
        if header is None or "paired ratio" not in header:
            sys.exit(f"{path}: no table with a paired ratio")
        i = header.index("paired ratio")
        for cells in body:
            v = number(cells[i])
            if v is not None:
                out.setdefault(tuple(cells[:3]), []).append(v)
    return out


def compare(before_paths, after_paths):
    before, after = paired_by_row(before_paths), paired_by_row(after_paths)
    print(f"paired ratio, median over launches: before {len(before_paths)}, after {len(after_paths)}\n")
    print("| transition | mesh | MiB | before | before range | after | after range | target |")
    print("|---|---|---|---|---|---|---|---|")

    def cell(values):
        return (f"{statistics.median(values):.2f}", f"{min(values):.2f}-{max(values):.2f}") if values else ("-", "-")

    for key in list(dict.fromkeys(list(before) + list(after))):
        b, a = before.get(key, []), after.get(key, [])
        verdict = "-"
        if a and number(key[2]) is not None:
            limit = limit_for(number(key[2]))
            verdict = f"{'ok' if statistics.median(a) <= limit else 'over'} ({limit:.2f})"
        print("| " + " | ".join(list(key) + [*cell(b), *cell(a), verdict]) + " |")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--compare":
        if "--" not in args[1:]:
            sys.exit("usage: median_tables.py --compare BEFORE.md ... -- AFTER.md ...")
        cut = args.index("--")
        compare(args[1:cut], args[cut + 1:])
    else:
        main(args)
