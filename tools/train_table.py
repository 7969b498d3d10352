#!/usr/bin/env python3
"""The training table of docs/training.md, made from what `qsweep run` / `qsweep results`
prints for a training experiment.

For each (shape, lr) the run prints one table (cli/train_results.c): per recipe, the number of
seeds, the final validation loss (mean +- sd over seeds), the gap to the bf16 run of the same
shape, lr and seed, and the relative gap (mean +- sd). This script turns each into a markdown
table with the same digits: a row per recipe, in the printed order (lowest loss first).

The block lives between the lines
    <!-- train-table:begin -->
    <!-- train-table:end -->
of a markdown file (docs/training.md, or a committed expected table such as
tests/cli/data/tiny_training_short.md).

Usage:
    train_table.py render RUN_OUTPUT            print the block
    train_table.py update RUN_OUTPUT FILE.md    replace FILE's block with the run's
    train_table.py check  RUN_OUTPUT FILE.md    exit 1 (with a diff) unless FILE's block is
                                                the run's, digit for digit
RUN_OUTPUT is a file holding what `qsweep run GRID` or `qsweep results EXPERIMENT` printed
("-": standard input), e.g.
    build/release/cli/qsweep run experiments/tiny-fp4-training.yaml | tee run.txt
    python3 tools/train_table.py update run.txt docs/training.md
Exit status: 0 ok, 1 check found a difference, 2 bad input (names the file and line).
"""
import difflib
import re
import sys

BEGIN = "<!-- train-table:begin -->"
END = "<!-- train-table:end -->"
GROUP = re.compile(r"^(\S+)  lr (\S+)$")
COLUMNS = re.compile(r"^  recipe\s+seeds\s+val loss\s+gap to bf16\s+relative gap$")
NUM = r"([+-]?\d+\.\d+)"
ROW_SEEDS = re.compile(
    rf"^  (\S+)\s+(\d+)\s+{NUM} \+- {NUM}\s+{NUM} \+- {NUM}\s+{NUM}% \+- {NUM}%(.*)$")
ROW_ONE = re.compile(
    rf"^  (\S+)\s+(\d+)\s+{NUM}\s+\(1 seed\)\s+{NUM}\s+\(1 seed\)\s+{NUM}%\s+\(1 seed\)(.*)$")
ROW_NO_BF16 = re.compile(rf"^  (\S+)\s+(\d+)\s+{NUM}(?: \+- {NUM}|\s+\(1 seed\))\s+no bf16 run$")


class BadInput(Exception):
    pass


def parse(path):
    """[(shape, lr, [(recipe, seeds, loss, gap)])] in print order; loss and gap are strings."""
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    groups = []
    in_table = False
    # progress lines end in \r: split on both
    for no, line in enumerate(re.split(r"\r\n|\r|\n", text), 1):
        g = GROUP.match(line)
        if g:
            groups.append((g.group(1), g.group(2), []))
            in_table = False
            continue
        if groups and COLUMNS.match(line):
            in_table = True
            continue
        if not in_table:
            continue
        if not line.startswith("  "):
            in_table = False
            continue
        rows = groups[-1][2]
        m = ROW_SEEDS.match(line)
        if m:
            recipe, seeds, loss, loss_sd, _gap, _gap_sd, rel, rel_sd, _rest = m.groups()
            rows.append((recipe, seeds, f"{loss} ± {loss_sd}", f"{rel}% ± {rel_sd}%"))
            continue
        m = ROW_ONE.match(line)
        if m:
            recipe, seeds, loss, _gap, rel, _rest = m.groups()
            rows.append((recipe, seeds, loss, f"{rel}%"))
            continue
        m = ROW_NO_BF16.match(line)
        if m:
            recipe, seeds, loss, loss_sd = m.groups()
            rows.append((recipe, seeds, f"{loss} ± {loss_sd}" if loss_sd else loss, "no bf16 run"))
            continue
        raise BadInput(f"{path}:{no}: not a row of the training table: {line.strip()!r}")
    if not any(rows for _s, _l, rows in groups):
        raise BadInput(f"{path}: no training table (a 'SHAPE  lr LR' line and its rows)")
    return groups


def render(groups):
    out = [BEGIN, ""]
    for shape, lr, rows in groups:
        if len(groups) > 1:
            out += [f"Shape {shape}, lr {lr}:", ""]
        out.append("| recipe | seeds | validation loss | gap to bf16 |")
        out.append("| --- | --- | --- | --- |")
        for recipe, seeds, loss, gap in rows:
            out.append(f"| {recipe} | {seeds} | {loss} | {gap} |")
        out.append("")
    out.append(END)
    return "\n".join(out) + "\n"


def split_block(path):
    text = open(path, encoding="utf-8").read()
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < b:
        raise BadInput(f"{path}: no {BEGIN} ... {END} block")
    return text[:b], text[b:e + len(END)] + "\n", text[e + len(END) + 1:]


def main(argv):
    if len(argv) < 3 or argv[1] not in ("render", "update", "check") or \
            (argv[1] != "render") != (len(argv) == 4):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        block = render(parse(argv[2]))
        if argv[1] == "render":
            sys.stdout.write(block)
            return 0
        head, old, tail = split_block(argv[3])
        if argv[1] == "update":
            with open(argv[3], "w", encoding="utf-8") as f:
                f.write(head + block + tail)
            return 0
        if old == block:
            return 0
        sys.stdout.writelines(difflib.unified_diff(
            old.splitlines(True), block.splitlines(True), argv[3], argv[2] + " (rendered)"))
        return 1
    except (BadInput, OSError) as e:
        print(f"train_table: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
