#!/usr/bin/env python3
"""Checks the attr defaults gen_numeric.py writes into every numeric golden (attr_defaults.py)
against the op declarations, as `spmd ops --json` prints them: the same ops; per op the
same attr names in the same order; per attr the declared default (or REQUIRED where the
declaration has none), of the declared kind (bool, int, float, string, a list of ints or
floats). Prints one line per difference and exits 1 when there is any.

Usage: check_attr_defaults.py SPMD   (the spmd binary)
"""

import json
import subprocess
import sys

from attr_defaults import DEFAULTS, REQUIRED


def of_kind(value, kind):
    """True when the Python value is an exact value of the attr kind."""
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, float)
    if kind == "string":
        return isinstance(value, str)
    if kind in ("ints", "floats"):
        element = int if kind == "ints" else float
        return isinstance(value, list) and all(
            isinstance(v, element) and not isinstance(v, bool) for v in value)
    return False


def differences(declared, defaults):
    """Every way `defaults` (op -> {attr: default}) differs from `declared` (spmd ops --json)."""
    out = []
    names = [op["name"] for op in declared]
    for name in names:
        if name not in defaults:
            out.append(f"{name}: declared, not in attr_defaults.py")
    for name in defaults:
        if name not in names:
            out.append(f"{name}: in attr_defaults.py, no such op")
    for op in declared:
        ours = defaults.get(op["name"])
        if ours is None:
            continue
        want = [a["name"] for a in op["attrs"]]
        if list(ours) != want:
            out.append(f"{op['name']}: attrs {list(ours)}, declared {want}")
            continue
        for a in op["attrs"]:
            value = ours[a["name"]]
            where = f"{op['name']}.{a['name']}"
            if a.get("required"):
                if value is not REQUIRED:
                    out.append(f"{where}: default {value!r}, declared required")
            elif value is REQUIRED:
                out.append(f"{where}: REQUIRED, declared default {a['default']!r}")
            elif not of_kind(value, a["kind"]):
                out.append(f"{where}: {value!r} is not of the declared kind, {a['kind']}")
            elif value != a["default"]:
                out.append(f"{where}: default {value!r}, declared {a['default']!r}")
    return out


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    run = subprocess.run([argv[1], "ops", "--json"], capture_output=True, text=True, check=True)
    declared = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    found = differences(declared, DEFAULTS)
    for line in found:
        print("attr_defaults.py: " + line)
    if found:
        return 1
    print(f"attr defaults: {len(declared)} ops agree with the declarations")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
