#!/usr/bin/env python3
"""The method study's tables (docs/methods.md), made from the tables `qsweep run` prints.

A component sweep with a method axis prints one table per (model, format, options, quantize);
the options name the method ("method": "gptq", ...; round-to-nearest names none; mr-gptq with
"scale_search": true is the column "mr-gptq+search"). Where one (format, quantize) holds a
method label in two settings (gptq with "damp" 0.01 and 0.1), each is a column of its own under
its setting label, as `qsweep results` names it (kinds/method_label.h qs_method_setting_label): the
label, then "+<option>=<value>" for each of act_order, alpha, damp whose value differs between
those settings ("gptq+damp=0.01", "gptq+damp=0.1"). This script
reads them with tools/results_table.py's parser and writes one markdown table per (format,
quantize): a row per component, in round-to-nearest's order of damage (most damaging first), a
column per method, each cell "KL (+ppl increase %)" (mean KL divergence from the unquantized
model to 4 decimals, the perplexity increase to 1), and a last column naming the method with the
lowest KL (ties: the first). The block lives between the lines
    <!-- methods-table:begin -->
    <!-- methods-table:end -->
of a markdown file (docs/methods.md, or tests/methods/data/fp4_methods_tiny.md).

A pipeline's sweep prints its tables another way (cli/results.c: the trained model's name, one
column per training recipe, "KL mean" and "ppl increase" without the perplexities); a run
output without the tables above is read as that, one recipe and one seed per table, and its
block has no perplexity line.

Usage (--block NAME first: the block between <!-- methods-table:NAME:begin --> and
<!-- methods-table:NAME:end --> instead, a second table of the same file; then --decimals N:
the KL to N decimals instead of 4, for a model FP4 barely moves, at most the 6 qsweep prints;
a pipeline's increase comes with 2 decimals, rounded here to 1 like every table's):
    methods_table.py render RUN_OUTPUT            print the block
    methods_table.py update RUN_OUTPUT FILE.md    replace FILE's block with the run's
    methods_table.py check  RUN_OUTPUT FILE.md    exit 1 (with a diff) unless FILE's block is
                                                  the run's, digit for digit
Exit status: 0 ok, 1 check found a difference, 2 bad input (names the file and line).
"""
import importlib.util
import json
import os
import re
import sys

_spec = importlib.util.spec_from_file_location(
    "results_table",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "results_table.py"),
)
rt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rt)

BEGIN = "<!-- methods-table:begin -->"
END = "<!-- methods-table:end -->"
DECIMALS = 4
# a pipeline sweep's table (cli/results.c): its header, then one recipe line, then its rows
# (options absent when they are {}: cli/pipeline_results.c)
PIPE_HEADER = re.compile(r"^(\S.*?)  (\S+)(?: (\{.*\}))?  (\S+)  (\S+)-wise$")
PIPE_RECIPE = re.compile(r"^\s+(\S+), (\d+) seeds?, val loss \S+$")
PIPE_ROW = re.compile(r"^  (\S+)\s+(\S+)\s+([+-]\S+)%$")
METHOD_ORDER = ["rtn", "gptq", "rotate16", "rotate32", "rotate128", "rotate-full", "mr-gptq",
                "mr-gptq+search", "smoothquant"]


# The options a setting label may spell out, in label order (kinds/method.c label_options).
LABEL_OPTIONS = ["act_order", "alpha", "damp"]


def setting_of(opts, path):
    """(method label, {option: value} of LABEL_OPTIONS) of a table's options."""
    try:
        o = json.loads(opts) if opts else {}
    except ValueError:
        raise rt.BadInput(f"{path}: options {opts!r} are not JSON")
    if not isinstance(o, dict) or "method" not in o:
        return "rtn", {}
    m = o["method"]
    label = m + "+search" if o.get("scale_search") is True else m
    return label, {k: o[k] for k in LABEL_OPTIONS if k in o}


def option_text(v):
    """A label value as kinds/method.c writes it: true/false, an integer, the shortest %g that
    reads back as the same double."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        for p in range(1, 18):
            t = f"{v:.{p}g}"
            if float(t) == v:
                return t
    return str(v)


def setting_labels(settings):
    """The setting label of each (label, options) in settings, among them all."""
    out = []
    for label, opts in settings:
        text = label
        for k in LABEL_OPTIONS:
            if k in opts and any(l == label and o.get(k) != opts[k] for l, o in settings):
                text += f"+{k}={option_text(opts[k])}"
        out.append(text)
    return out


def setting_order(label, opts):
    """Columns as `qsweep results` orders them: by method label, then by option values."""
    base = METHOD_ORDER.index(label) if label in METHOD_ORDER else len(METHOD_ORDER)
    return (base, label) + tuple((0, opts[k], "") if isinstance(opts.get(k), (int, float))
                                 else (1, 0, str(opts.get(k, ""))) for k in LABEL_OPTIONS)


def parse_pipeline(path, text):
    """A pipeline sweep's tables in text (read from path) as rt.parse's groups: (model, format,
    options, quantize, mode, None, [(part, ppl increase %, kl)])."""
    groups = []
    for no, line in enumerate(re.split(r"\r\n|\r|\n", text), 1):
        h = PIPE_HEADER.match(line)
        if h:
            model, fmt, opts, quant, mode = h.groups()
            groups.append((model, fmt, opts or "{}", quant, mode, None, []))
            continue
        if line.endswith("-wise") and not line.startswith(" "):
            raise rt.BadInput(f"{path}:{no}: a table header not read: {line!r}")
        r = PIPE_RECIPE.match(line)
        if r and groups and r.group(2) != "1":
            raise rt.BadInput(f"{path}:{no}: {r.group(2)} seeds: one seed per table expected")
        if line.startswith("  part") and groups and len(line.split()) != 5:
            raise rt.BadInput(f"{path}:{no}: more than one recipe in a table")
        r = PIPE_ROW.match(line)
        if r and groups and r.group(1) != "part":
            try:
                groups[-1][6].append((r.group(1), float(r.group(3)), float(r.group(2))))
            except ValueError:
                raise rt.BadInput(f"{path}:{no}: row {line.strip()!r}: KL or increase not a number")
    if not groups:
        raise rt.BadInput(f"{path}: no results table (qsweep run / qsweep results output expected)")
    return groups


def parse_any(path):
    """rt.parse's tables, or a pipeline's where the output has none of those (read once)."""
    text = rt.read_text(path)
    try:
        return rt.parse(path, text)
    except rt.BadInput as e:
        if "no results table" not in str(e):
            raise
        return parse_pipeline(path, text)


def render(groups, path):
    out = [BEGIN]
    models = []
    for g in groups:
        if g[0] not in models:
            models.append(g[0])
    for model in models:
        gs = [g for g in groups if g[0] == model and g[4] == "component"]
        if not gs:
            raise rt.BadInput(f"{path}: model {model}: no component-wise table")
        bases = {f"{g[5]:.4f}" if g[5] is not None else None for g in gs}
        if len(bases) != 1:
            raise rt.BadInput(f"{path}: model {model}: the tables disagree on the baseline ({bases})")
        if len(models) > 1:
            out += ["", f"{model}:"]
        base = bases.pop()
        if base is not None:
            out += ["", f"Unquantized perplexity {base}."]
        cols = sorted({(rt.column_key(g)[:4]) for g in gs})
        for ckey in cols:
            fmt, quant = ckey[1], ckey[3]
            tables = [g for g in gs if g[1] == fmt and g[3] == quant]
            settings = [setting_of(g[2], path) for g in tables]
            by_method, order = {}, {}
            for g, st, m in zip(tables, settings, setting_labels(settings)):
                if m in by_method:
                    raise rt.BadInput(f"{path}: {fmt} {quant}: method {m} has two tables")
                by_method[m], order[m] = g, setting_order(*st)
            methods = sorted(by_method, key=lambda m: order[m])
            first = by_method["rtn"] if "rtn" in by_method else by_method[methods[0]]
            parts = [p[0] for p in first[6]]
            for m in methods:
                for p in by_method[m][6]:
                    if p[0] not in parts:
                        parts.append(p[0])
            out += ["", f"{fmt.upper()} {rt.QUANT_NAMES.get(quant, quant)}:", ""]
            out.append("| component | " + " | ".join(methods) + " | lowest KL |")
            out.append("| --- |" + " --- |" * (len(methods) + 1))
            for part in parts:
                cells, best = [], None
                for m in methods:
                    g = by_method[m]
                    row = [p for p in g[6] if p[0] == part]
                    if not row:
                        cells.append("")
                        continue
                    _, ppl, kl = row[0]
                    # a pipeline's row holds the increase itself (parse_pipeline)
                    pct = ppl if g[5] is None else 100.0 * (ppl - g[5]) / g[5]
                    cells.append(f"{kl:.{DECIMALS}f} ({pct:+.1f}%)")
                    if best is None or kl < best[1]:
                        best = (m, kl)
                out.append(f"| {part} | " + " | ".join(cells) + f" | {best[0]} |")
    out += ["", END]
    return out


def block_of(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    try:
        b = lines.index(BEGIN)
        e = lines.index(END, b)
    except ValueError:
        raise rt.BadInput(f"{path}: no {BEGIN} ... {END} block")
    return lines[:b], lines[b : e + 1], lines[e + 1 :]


def main(argv):
    global BEGIN, END, DECIMALS
    if len(argv) > 2 and argv[1] == "--block":  # a second table of one file, by its own markers
        BEGIN, END = f"<!-- methods-table:{argv[2]}:begin -->", f"<!-- methods-table:{argv[2]}:end -->"
        argv = argv[:1] + argv[3:]
    if len(argv) > 2 and argv[1] == "--decimals":
        if not argv[2].isdigit() or not 1 <= int(argv[2]) <= 6:
            sys.stderr.write(f"methods_table: --decimals {argv[2]!r}: expected 1 to 6 (qsweep "
                             "prints the KL to 6)\n")
            return 2
        DECIMALS = int(argv[2])
        argv = argv[:1] + argv[3:]
    return rt.run(argv, "methods_table", render, block_of, __doc__, parse_any)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
