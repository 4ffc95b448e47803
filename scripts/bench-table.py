#!/usr/bin/env python3
"""The table of docs/performance.md from the JSON lines of scripts/bench-compare.py
(`make bench` writes them to build/cpu/bench.jsonl too):

    python3 scripts/bench-table.py build/cpu/bench.jsonl [--into docs/performance.md]

prints Markdown (with --into, writes it into that file between the lines
<!-- bench-table: begin --> and <!-- bench-table: end --> instead): a line with the date, CPU, thread counts and rounds, then one
table with, per case and thread count, zorch's figure, PyTorch's, zorch's time
over PyTorch's, and each one's fraction of the machine limit the case is bound
by (the limits are rows of the same table)."""
import io
import json
import sys

BEGIN, END = "<!-- bench-table: begin -->", "<!-- bench-table: end -->"


def fmt(x, pct=False):
    if x is None:
        return "—"
    if pct:
        return f"{100 * x:.0f}%"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def main():
    args, into = sys.argv[1:], None
    if "--into" in args:
        i = args.index("--into")
        into = args[i + 1]
        del args[i:i + 2]
        out = io.StringIO()
        sys.stdout, real = out, sys.stdout
    table(args)
    if into:
        sys.stdout = real
        with open(into) as f:
            doc = f.read()
        if BEGIN not in doc or END not in doc:
            sys.exit(f"bench-table: {into} has no {BEGIN} ... {END} lines")
        head, rest = doc.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        with open(into, "w") as f:
            f.write(head + BEGIN + "\n" + out.getvalue() + END + tail)


def gemm_note(blas):
    """The GEMM libraries zorch ran, from zorch_blas_info (older lines have none)."""
    if not blas:
        return ""
    parts = [p.strip() for p in blas.split(";") if "GEMM" in p]
    return " zorch's GEMMs: " + "; ".join(parts) + "." if parts else ""


def table(paths):
    lines = []
    for path in paths or ["-"]:
        f = sys.stdin if path == "-" else open(path)
        lines += [json.loads(l) for l in f if l.startswith("{")]
    machine = next((l for l in lines if l.get("name") == "machine"), None)
    if not machine:
        sys.exit("bench-table: no machine line (is this the output of scripts/bench-compare.py?)")
    threads = machine["threads"]
    torch = f"PyTorch {machine['torch']}" if machine.get("torch") else f"no PyTorch ({machine.get('torch_note')})"
    print(f"{machine['date']}, {machine['cpu']} ({machine['cpus']} CPUs), threads {' and '.join(map(str, threads))}, "
          f"{torch}, OMP_WAIT_POLICY={machine['omp_wait_policy']}; medians of {machine['rounds']} interleaved rounds "
          "(limits: the best round). Ratio: zorch's time over PyTorch's (below 1: zorch is faster); "
          "% of limit: the case's rate against the measured limit in the same table." +
          gemm_note(machine.get("zorch_blas")) + "\n")
    head = "| case | unit |"
    rule = "|---|---|"
    for th in threads:
        t = f"{th}T"
        head += f" zorch {t} | PyTorch {t} | ratio {t} | % of limit {t} (zorch / PyTorch) |"
        rule += "---|---|---|---|"
    print(head)
    print(rule)
    by = {}
    order = []
    for l in lines:
        n = l.get("name")
        if n == "machine":
            continue
        if n not in by:
            order.append(n)
        by.setdefault(n, {})[l["threads"]] = l
    for n in order:
        row = by[n]
        first = next(iter(row.values()))
        if n.startswith("limit/"):
            cells = "".join(f" {fmt(row[t]['value']) if t in row else '—'} | — | — | — |" for t in threads)
            print(f"| limit: {n[6:]} | {first['unit']} |{cells}")
        elif "zorch" in first:
            cells = ""
            for t in threads:
                r = row.get(t, {})
                lim = "—"
                if r.get("zorch_of_limit") is not None:
                    lim = f"{fmt(r['zorch_of_limit'], True)} / {fmt(r.get('torch_of_limit'), True)}"
                cells += f" {fmt(r.get('zorch'))} | {fmt(r.get('torch'))} | {fmt(r.get('time_ratio'))} | {lim} |"
            print(f"| {n} | {first['unit']} |{cells}")
        else:  # a zorch-only figure such as the script-over-C ratio
            cells = "".join(f" {fmt(row[t]['value']) if t in row else '—'} | — | — | — |" for t in threads)
            print(f"| {n} | {first['unit']} |{cells}")
    limits = sorted({r["limit"] for row in by.values() for r in row.values() if r.get("limit")})
    if limits:
        print(f"\nLimits used: {', '.join(limits)}.")


if __name__ == "__main__":
    main()
