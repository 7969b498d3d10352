#!/usr/bin/env python3
"""Checks a pipeline experiment's views, `qsweep results` and report page against the stored
rows (jobs, results, job_deps), computed here without the views.

  python3 tests/cli/pipeline_check.py --db CONNINFO --qsweep BIN --experiment NAME
                                      [--chromium /usr/bin/chromium | --chromium '']

Checked, for every baseline and eval job of the experiment whose spec.model has trained_by:
  - the contract: trained_by is the job_key of a train job; the job depends on it (job_deps);
    an eval job's baseline (paired as v_sensitivity pairs them: same model and dataset digests,
    ctx, max_chunks and bos_id; same numerics_version first, then the latest) names the same
    training job;
  - v_pipeline_sensitivity: one row per (eval job, final metric), no other, with the value, the
    baseline's value, delta, rel_delta, the options (the format's, fuse, the method and its
    options, as `qsweep results` groups a plain sweep) and the training run's recipe, shape, seed, steps, lr,
    final_train_loss and final_val_loss;
  - v_pipeline_summary: per (shape, steps, lr, recipe, format, options, quantize, mode, part,
    metric) the seeds, rows, min, max (exactly), mean and sample sd (to 1e-9 relative);
  - v_pipeline_training: each training run used, with its count of sensitivity jobs;
  - `qsweep results NAME`: each part's line holds, per recipe, the mean KL and relative
    perplexity increase over seeds +- half their range, as printf prints them; each table's
    recipe heads and the training runs' final validation loss;
  - the report page as headless Chromium renders it: one pcell per (figure, part, recipe),
    each with the means (to 1e-12 relative), min and max (exactly) and seed count, and a
    title with the seed spread; "#metric=delta_ppl" colours by the perplexity increase.
Exit 0 and a summary line when all hold; 1 with the first difference."""
import argparse
import html
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--db", required=True)
ap.add_argument("--qsweep", required=True)
ap.add_argument("--experiment", required=True)
ap.add_argument("--chromium", default="/usr/bin/chromium")
a = ap.parse_args()
checks = 0


def fail(msg):
    print("pipeline_check: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)  # SystemExit runs the TemporaryDirectory's cleanup


def ok(cond, msg):
    global checks
    checks += 1
    if not cond:
        fail(msg)


def rows(sql, *params):
    """The rows of sql (a SELECT) as dicts, through psql and json_agg."""
    q = "SELECT coalesce(json_agg(t), '[]') FROM (%s) t" % sql
    for i, p in enumerate(params):
        q = q.replace("$%d" % (i + 1), "'" + str(p).replace("'", "''") + "'")
    r = subprocess.run(["psql", a.db, "-qAtX", "-v", "ON_ERROR_STOP=1", "-c", q],
                       capture_output=True, text=True)
    if r.returncode:
        fail("psql: %s\n%s" % (q, r.stderr))
    return json.loads(r.stdout)


def close(x, y, rel):
    if x is None or y is None:
        return x is None and y is None
    return x == y or abs(x - y) <= rel * max(abs(x), abs(y))


exp = a.experiment
# --- the stored rows, read without the views
jobs = {j["id"]: j for j in rows(
    "SELECT j.id, j.job_key, j.kind, j.state, j.spec FROM jobs j JOIN experiment_jobs ej "
    "ON ej.job = j.id JOIN experiments e ON e.id = ej.experiment WHERE e.name = $1", exp)}
ok(jobs, "no jobs in experiment " + exp)
allbase = rows("SELECT id, spec FROM jobs WHERE kind = 'baseline'")
train = {t["job_key"]: t for t in rows("SELECT id, job_key, state, spec FROM jobs "
                                       "WHERE kind = 'train'")}
final = {}
for r in rows("SELECT job, name, value FROM results WHERE final"):
    final.setdefault(r["job"], {})[r["name"]] = r["value"]
deps = {(d["job"], d["depends_on"]) for d in rows("SELECT job, depends_on FROM job_deps")}

piped = [j for j in jobs.values() if j["kind"] in ("baseline", "eval")
         and "trained_by" in (j["spec"].get("model") or {})]
ok(piped, "no sensitivity job of %s has spec.model.trained_by" % exp)


def baseline_of(e, metric):
    """The baseline v_sensitivity pairs with eval job e for metric, or None."""
    es, ed = e["spec"], e["spec"].get("dataset") or {}
    cands = []
    for b in allbase:
        bs, bd = b["spec"], b["spec"].get("dataset") or {}
        if (bs.get("model") or {}).get("digest") != (es.get("model") or {}).get("digest"):
            continue
        if bd.get("digest") != ed.get("digest") or metric not in final.get(b["id"], {}):
            continue
        if any(bd.get(k) != ed.get(k) for k in ("ctx", "max_chunks", "bos_id")):
            continue
        cands.append(((bs.get("numerics_version") == es.get("numerics_version")), b["id"], b))
    return max(cands, key=lambda c: (c[0], c[1]))[2] if cands else None


# --- the contract pipe's grid writes
used = {}
for j in piped:
    key = j["spec"]["model"]["trained_by"]
    ok(key in train, "job %d: trained_by %s is no train job" % (j["id"], key))
    t = train[key]
    ok((j["id"], t["id"]) in deps, "job %d does not depend on its training job %d"
       % (j["id"], t["id"]))
    used.setdefault(t["id"], []).append(j["id"])

# --- v_pipeline_sensitivity, computed
want = {}
for e in piped:
    if e["kind"] != "eval":
        continue
    t = train[e["spec"]["model"]["trained_by"]]
    ts, tf = t["spec"], final.get(t["id"], {})
    for metric, value in final.get(e["id"], {}).items():
        b = baseline_of(e, metric)
        if b is not None:
            ok((b["spec"].get("model") or {}).get("trained_by") == t["job_key"],
               "eval job %d's baseline %d is not of the same training job" % (e["id"], b["id"]))
        bv = final[b["id"]][metric] if b else None
        delta = value - bv if bv is not None else None
        opts = dict(e["spec"].get("format_options") or {})
        if "fuse" in e["spec"]:
            opts["fuse"] = e["spec"]["fuse"]
        if "method" in e["spec"]:
            opts["method"] = e["spec"]["method"]
            opts.update(e["spec"].get("method_options") or {})
        want[(e["id"], metric)] = dict(
            format=e["spec"].get("format"), options=opts, quantize=e["spec"].get("quantize"),
            mode=e["spec"].get("mode"), part=e["spec"].get("part"), value=value,
            baseline_value=bv, delta=delta,
            rel_delta=delta / bv if delta is not None and bv else None,
            train_job_id=t["id"], recipe=(ts.get("recipe") or {}).get("name"),
            shape=(ts.get("shape") or {}).get("name"), seed=ts.get("seed"),
            steps=ts.get("steps"), lr=ts.get("lr"),
            final_train_loss=tf.get("final_train_loss"), final_val_loss=tf.get("final_val_loss"))
got = {(r["job_id"], r["metric"]): r for r in rows(
    "SELECT * FROM v_pipeline_sensitivity WHERE experiment = $1", exp)}
ok(set(got) == set(want), "v_pipeline_sensitivity: %d rows, computed %d (%d not computed, %d "
   "missing)" % (len(got), len(want), len(set(got) - set(want)), len(set(want) - set(got))))
for k, w in want.items():
    g = got[k]
    ok(json.loads(g["options"]) == w["options"], "job %d options %s, want %s"
       % (k[0], g["options"], w["options"]))
    w["options"] = g["options"]  # the view's text is the grouping key below
    for f, v in w.items():
        ok(g[f] == v if f not in ("delta", "rel_delta") else close(g[f], v, 1e-15),
           "v_pipeline_sensitivity job %d %s: %s = %r, want %r" % (k[0], k[1], f, g[f], v))

# --- v_pipeline_summary, computed
GROUP = ("shape", "steps", "lr", "recipe", "format", "options", "quantize", "mode", "part")
groups = {}
for (job, metric), w in want.items():
    groups.setdefault(tuple(w[f] for f in GROUP) + (metric,), []).append(w)


def sd_close(x, y, v):
    """Two sample sds of values v, each summed in float8 in its own order: 1e-9 relative, or
    their squares within 4 n eps max(v^2), the absolute error of a float8 sum of n squares
    (the variance of values near 1 that differ by 1e-8 keeps few of its digits, and
    PostgreSQL's order of the rows is its own)."""
    if close(x, y, 1e-9):
        return True
    if x is None or y is None:
        return False
    return abs(x * x - y * y) <= 4 * len(v) * 2.0 ** -52 * max(t * t for t in v)


def stats(ws, f):
    v = [w[f] for w in ws if w[f] is not None]
    if not v:
        return dict(mean=None, min=None, max=None, sd=None)
    return dict(mean=sum(v) / len(v), min=min(v), max=max(v),
                sd=statistics.stdev(v) if len(v) > 1 else None)


summ = {tuple(r[f] for f in GROUP) + (r["metric"],): r for r in rows(
    "SELECT * FROM v_pipeline_summary WHERE experiment = $1", exp)}
ok(set(summ) == set(groups), "v_pipeline_summary: %d groups, computed %d" % (len(summ),
                                                                              len(groups)))
for k, ws in groups.items():
    g = summ[k]
    ok(g["seeds"] == len({w["seed"] for w in ws}) and g["n"] == len(ws),
       "summary %s: seeds %s n %s" % (k, g["seeds"], g["n"]))
    for f, col in (("value", "value"), ("delta", "delta"), ("rel_delta", "rel_delta")):
        s = stats(ws, f)
        ok(g["min_" + col] == s["min"] and g["max_" + col] == s["max"],
           "summary %s: %s min/max %s %s, want %s %s" % (k, f, g["min_" + col],
                                                        g["max_" + col], s["min"], s["max"]))
        ok(close(g["mean_" + col], s["mean"], 1e-9), "summary %s: mean %s %s, want %s"
           % (k, f, g["mean_" + col], s["mean"]))
        if f != "rel_delta":
            ok(sd_close(g["sd_" + col], s["sd"], [w[f] for w in ws if w[f] is not None]),
               "summary %s: sd %s %s, want %s" % (k, f, g["sd_" + col], s["sd"]))
    fv = stats(ws, "final_val_loss")["mean"]
    ok(close(g["mean_final_val_loss"], fv, 1e-9), "summary %s: mean_final_val_loss" % (k,))

# --- v_pipeline_training
tr = {r["train_job_id"]: r for r in rows("SELECT * FROM v_pipeline_training WHERE "
                                         "experiment = $1", exp)}
ok(set(tr) == set(used), "v_pipeline_training: runs %s, want %s" % (sorted(tr), sorted(used)))
for tid, js in used.items():
    ok(tr[tid]["sensitivity_jobs"] == len(js), "training run %d: %s sensitivity jobs, want %d"
       % (tid, tr[tid]["sensitivity_jobs"], len(js)))
    ok(tr[tid]["final_val_loss"] == final.get(tid, {}).get("final_val_loss"),
       "training run %d: final_val_loss" % tid)


# --- qsweep results: the printed tables
def kl_shown(v, decimals):
    """A KL as the tables print it (cli/result_rows.c, qsweep_kl_shown): a negative value that
    rounds to zero at `decimals` places is 0, so it prints 0.000000, not -0.000000."""
    return 0.0 if v is not None and -0.5 * 10 ** -decimals < v <= 0 else v


def spread(f, k, mean, lo, hi, n):
    if mean is None:
        return ["-"]
    if n < 2:
        return [f % (k * mean)]
    return [f % (k * mean), "+-" + (f % (k * (hi - lo) / 2)).lstrip("+")]


res = subprocess.run([a.qsweep, "results", exp, "--db", a.db], capture_output=True, text=True)
ok(res.returncode == 0, "qsweep results exited %d: %s" % (res.returncode, res.stderr))
out = res.stdout
ok(not re.search(r"(^|\s)-0\.000000", out, re.M),
   "results print a KL of -0.000000 (a negative rounding of 0)")
ok(out.startswith("experiment %s: pipeline" % exp), "results does not open as a pipeline:\n"
   + out[:400])
tables = {}
for k in groups:
    tables.setdefault(k[:3] + k[4:8], {}).setdefault(k[8], {}).setdefault(k[3], {})[k[9]] = \
        groups[k]
KINDS = ["q", "k", "v", "o", "gate", "up", "down"]
lines = out.split("\n")
printed_lines = 0
for tk, parts in tables.items():
    shape, steps, lr, fmt, opts, quant, mode = tk
    head = "%s (%s steps, lr %s)  %s%s  %s  %s-wise" % (
        shape or "(checkpoint)", steps, lr, fmt, "" if opts == "{}" else " " + opts, quant, mode)
    ok(head in lines, "results: no table head '%s'" % head)
    at = lines.index(head)
    recipes = sorted({r for p in parts.values() for r in p}, key=lambda r: (r != "bf16", r))
    for rc in recipes:
        ws = next(p[rc] for p in parts.values() if rc in p)
        ws = ws.get("kl_mean") or ws.get("ppl")
        n = len({w["seed"] for w in ws})
        vl = stats(ws, "final_val_loss")["mean"]
        h = "%s, %d seed%s" % (rc, n, "" if n == 1 else "s") + (
            ", val loss %.4f" % vl if vl is not None else "")
        ok(h in lines[at + 1], "results: table '%s' has no head '%s'" % (head, h))
    for part, byr in parts.items():
        toks = [part]
        for rc in recipes:
            m = byr.get(rc, {})
            kl, pp = m.get("kl_mean", []), m.get("ppl", [])
            s = stats(kl, "value") if kl else None
            toks += spread("%.6f", 1, kl_shown(s["mean"], 6), s["min"], s["max"],
                           len({w["seed"] for w in kl})) if kl else ["-"]
            s = stats(pp, "rel_delta") if pp else None
            t = spread("%+.2f", 100, s["mean"], s["min"], s["max"],
                       len({w["seed"] for w in pp})) if pp else ["-"]
            toks += [x + "%" for x in t] if t != ["-"] else t
        found = [ln for ln in lines[at + 3:] if ln.split()[:1] == [part]]
        ok(found and found[0].split() == toks, "results, table '%s', part %s: %s, want %s"
           % (head, part, found[0].split() if found else None, toks))
        printed_lines += 1
for (shape, steps, lr, recipe) in {(t["shape"], t["steps"], t["lr"], t["recipe"])
                                   for t in tr.values()}:
    vs = [t["final_val_loss"] for t in tr.values() if (t["shape"], t["steps"], t["lr"],
                                                      t["recipe"]) == (shape, steps, lr, recipe)
          and t["final_val_loss"] is not None]
    seeds = len({t["seed"] for t in tr.values() if (t["shape"], t["steps"], t["lr"],
                                                   t["recipe"]) == (shape, steps, lr, recipe)})
    want_toks = [recipe, str(seeds), "seed" + ("s" if seeds != 1 else "")] + spread(
        "%.4f", 1, sum(vs) / len(vs), min(vs), max(vs), len(vs)) if vs else None
    ok(want_toks is None or any(ln.split()[:len(want_toks)] == want_toks for ln in lines),
       "results: no training line %s" % want_toks)

# --- the report page
pcells = 0
tmp = tempfile.TemporaryDirectory(prefix="qsweep-pipecheck-")  # removed at exit
if a.chromium:
    d = tmp.name
    page = os.path.join(d, "report.html")
    r = subprocess.run([a.qsweep, "report", exp, "-o", page, "--db", a.db],
                       capture_output=True, text=True)
    ok(r.returncode == 0, "qsweep report exited %d: %s" % (r.returncode, r.stderr))

    def dom(frag):
        r = subprocess.run([a.chromium, "--headless", "--no-sandbox", "--disable-gpu",
                            "--no-first-run", "--virtual-time-budget=10000", "--dump-dom",
                            "file://" + page + frag], capture_output=True, text=True,
                           env=dict(os.environ, HOME=d))
        ok(r.returncode == 0, "chromium exited %d" % r.returncode)
        return r.stdout

    def cells(text):
        out = []
        for m in re.finditer(r'<rect ([^>]*class="pcell"[^>]*)><title>(.*?)</title>', text, re.S):
            at = {k: html.unescape(v) for k, v in re.findall(r'([a-z0-9_-]+)="([^"]*)"', m.group(1))}
            at["title"] = html.unescape(m.group(2))
            out.append(at)
        return out

    def num(s):
        return float(s) if s != "" else None

    text = dom("")
    cs = cells(text)
    ok(len(cs) == len({k[:9] for k in groups}), "report: %d pcells, want one per (part, recipe, "
       "format, quantize) row: %d" % (len(cs), len({k[:9] for k in groups})))
    ok('data-pipeline-cells="%d"' % len(cs) in text, "report: data-pipeline-cells")
    by = {}
    for k, ws in groups.items():
        by.setdefault(k[:9], {})[k[9]] = ws
    for c in cs:
        key = None
        for k in by:
            if (k[3], k[4], k[5], k[6], k[7], k[8]) == (c["data-recipe"], c["data-format"],
                                                        c["data-options"], c["data-quantize"],
                                                        c["data-mode"], c["data-part"]):
                key = k
        ok(key is not None, "report: pcell of no computed row: %s" % c)
        m = by[key]
        for attr, metric, f in (("kl_mean", "kl_mean", "value"), ("delta_ppl", "ppl", "delta"),
                                ("rel_delta_ppl", "ppl", "rel_delta"),
                                ("kl_p99", "kl_p99", "value"), ("top1", "top1", "value")):
            if metric not in m:
                ok(c["data-" + attr] == "", "report: %s has %s" % (key, attr))
                continue
            s = stats(m[metric], f)
            ok(close(num(c["data-" + attr]), s["mean"], 1e-12), "report %s %s: %s, want %r"
               % (key, attr, c["data-" + attr], s["mean"]))
            ok(num(c["data-" + attr + "_min"]) == s["min"] and
               num(c["data-" + attr + "_max"]) == s["max"], "report %s %s min/max" % (key, attr))
        n = len({w["seed"] for w in m["kl_mean"]})
        ok(c["data-seeds"] == str(n), "report %s: data-seeds %s, want %d" % (key, c["data-seeds"],
                                                                             n))
        ok(c["data-shown"] == c["data-kl_mean"], "report %s: not coloured by kl_mean" % (key,))
        ok("mean over %d seed(s), min..max" % n in c["title"], "report %s: title %s"
           % (key, c["title"]))
        pcells += 1
    cs = cells(dom("#metric=delta_ppl"))
    ok(cs and all(c["data-shown"] == c["data-delta_ppl"] for c in cs),
       "report #metric=delta_ppl: cells do not show delta_ppl")
print("pipeline_check: ok: %s: %d sensitivity rows, %d summary groups, %d training runs, %d "
      "printed lines, %d report cells, %d checks" % (exp, len(want), len(groups), len(used),
                                                     printed_lines, pcells, checks))
