#!/usr/bin/env python3
"""The README's results table, made from the tables `qsweep run` / `qsweep results` print.

A component-wise sweep prints one table per (model, format, options, quantize), its parts
sorted by damage (mean KL divergence from the unquantized model, then perplexity increase;
cli/results.c). This script turns them into one markdown table per model: a row per rank, a
column per (format, quantize) (NVFP4 before MXFP4, W4A16 before W4A4), each cell
"part KL (+ppl increase %)", KL to 3 decimals, the increase to 1, computed from the printed
ppl and baseline ppl, preceded by the unquantized perplexity.

The block lives between the lines
    <!-- results-table:begin -->
    <!-- results-table:end -->
of a markdown file (README.md, or a committed expected table such as
tests/cli/data/tiny_results.md).

Usage:
    results_table.py render RUN_OUTPUT            print the block
    results_table.py update RUN_OUTPUT FILE.md    replace FILE's block with the run's
    results_table.py check  RUN_OUTPUT FILE.md    exit 1 (with a diff) unless FILE's block is
                                                  the run's, digit for digit
RUN_OUTPUT is a file holding what `qsweep run GRID` or `qsweep results EXPERIMENT` printed
("-": standard input), e.g.
    build/release/cli/qsweep run experiments/smollm2-fp4-components.yaml | tee run.txt
    python3 tools/results_table.py update run.txt README.md
Exit status: 0 ok, 1 check found a difference, 2 bad input (names the file and line).
"""
import difflib
import re
import sys

BEGIN = "<!-- results-table:begin -->"
END = "<!-- results-table:end -->"
HEADER = re.compile(r"^(\S+)  (\S+) (.*?)  (\S+)  (\S+)-wise\s+baseline \(unquantized\) ppl (\S+)$")
# top-1 "-": not measured; the SQNR column (dB, "-": not measured) after it, absent in older output
ROW = re.compile(r"^  (\S+)\s+(\S+)\s+(\S+)\s+(\S+)%\s+(\S+)\s+(\S+)\s+(\S+%|-)(?:\s+(\S+))?$")
FORMAT_ORDER = ["nvfp4", "mxfp4"]
QUANT_NAMES = {"weights": "W4A16", "weights+activations": "W4A4"}


class BadInput(Exception):
    pass


def read_text(path):
    """The run output at path ("-": standard input, read once)."""
    return sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()


def parse(path, text=None):
    """[(model, format, options, quantize, mode, baseline, [(part, ppl, kl)])] in print order,
    from text when given (path then only names it), else from path."""
    text = read_text(path) if text is None else text
    groups = []
    # progress lines end in \r: split on both
    for no, line in enumerate(re.split(r"\r\n|\r|\n", text), 1):
        h = HEADER.match(line)
        if h:
            model, fmt, opts, quant, mode, base = h.groups()
            try:
                groups.append((model, fmt, opts, quant, mode, float(base), []))
            except ValueError:
                raise BadInput(f"{path}:{no}: baseline ppl {base!r} is not a number")
            continue
        r = ROW.match(line)
        if r and groups and r.group(1) != "part":
            part, ppl, _delta, _pct, kl, _p99, _top1, _sqnr = r.groups()
            try:
                groups[-1][6].append((part, float(ppl), float(kl)))
            except ValueError:
                raise BadInput(f"{path}:{no}: row {line.strip()!r}: ppl or KL not a number")
    if not groups:
        raise BadInput(f"{path}: no results table (qsweep run / qsweep results output expected)")
    return groups


def column_key(g):
    fmt, quant = g[1], g[3]
    f = FORMAT_ORDER.index(fmt) if fmt in FORMAT_ORDER else len(FORMAT_ORDER)
    q = list(QUANT_NAMES).index(quant) if quant in QUANT_NAMES else len(QUANT_NAMES)
    return (f, fmt, q, quant, g[2])


def render(groups, path):
    out = [BEGIN]
    models = []
    for g in groups:
        if g[0] not in models:
            models.append(g[0])
    for model in models:
        cols = sorted((g for g in groups if g[0] == model and g[4] == "component"), key=column_key)
        if not cols:
            raise BadInput(f"{path}: model {model}: no component-wise table")
        bases = {f"{g[5]:.4f}" for g in cols}
        if len(bases) != 1:
            raise BadInput(f"{path}: model {model}: the tables disagree on the baseline ({bases})")
        labels = []
        for g in cols:
            label = f"{g[1].upper()} {QUANT_NAMES.get(g[3], g[3])}"
            if sum(1 for h in cols if h[1] == g[1] and h[3] == g[3]) > 1:
                label += f" {g[2]}"
            labels.append(label)
        if len(models) > 1:
            out += ["", f"{model}:"]
        out += ["", f"Unquantized perplexity {bases.pop()}.", ""]
        out.append("| rank | " + " | ".join(labels) + " |")
        out.append("| --- |" + " --- |" * len(cols))
        for rank in range(max(len(g[6]) for g in cols)):
            cells = []
            for g in cols:
                if rank >= len(g[6]):
                    cells.append("")
                    continue
                part, ppl, kl = g[6][rank]
                pct = 100.0 * (ppl - g[5]) / g[5]
                cells.append(f"{part} {kl:.3f} ({pct:+.1f}%)")
            out.append(f"| {rank + 1} | " + " | ".join(cells) + " |")
    out += ["", END]
    return out


def block_of(path):
    """(lines before, block lines, lines after) of a markdown file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    try:
        b = lines.index(BEGIN)
        e = lines.index(END, b)
    except ValueError:
        raise BadInput(f"{path}: no {BEGIN} ... {END} block")
    return lines[:b], lines[b : e + 1], lines[e + 1 :]


def run(argv, prog, render_fn, block_fn, doc, parse_fn=parse):
    """render|update|check over a run's output (read by parse_fn): the command line of this
    tool and of the table tools built on its parser (tests/methods/methods_table.py)."""
    if len(argv) < 3 or argv[1] not in ("render", "update", "check") or (
        argv[1] != "render" and len(argv) != 4
    ):
        sys.stderr.write(doc)
        return 2
    try:
        new = render_fn(parse_fn(argv[2]), argv[2])
        if argv[1] == "render":
            print("\n".join(new))
            return 0
        before, old, after = block_fn(argv[3])
        if argv[1] == "update":
            with open(argv[3], "w", encoding="utf-8") as f:
                f.write("\n".join(before + new + after))
            return 0
        if old == new:
            print(f"{prog}: {argv[3]} matches {argv[2]}")
            return 0
        sys.stdout.writelines(
            difflib.unified_diff(
                [l + "\n" for l in old], [l + "\n" for l in new], argv[3], f"from {argv[2]}"
            )
        )
        print(f"{prog}: {argv[3]} differs from the run in {argv[2]}")
        return 1
    except (BadInput, OSError) as e:
        sys.stderr.write(f"{prog}: {e}\n")
        return 2


def main(argv):
    return run(argv, "results_table", render, block_of, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
