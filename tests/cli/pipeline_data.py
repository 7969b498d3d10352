#!/usr/bin/env python3
"""SQL for a pipeline experiment as the store holds one (tests/cli/pipeline_results_test.sh).

Experiment NAME: train jobs of shape mini (200 steps, lr 0.003), recipes bf16 and nvfp4 with
seeds 1, 2, 3 and mxfp4 with seed 1, each with its final metrics; per trained model a baseline
job and eval jobs (nvfp4 and mxfp4 x weights and weights+activations x the seven components and
blocks 0..2, and the nvfp4 W4A16 down_proj jobs again by gptq and by mr-gptq with
scale_search), every one naming its model's training job in spec.model.trained_by, with the
job_deps edges a pipeline has (eval -> baseline, eval and baseline -> train). The values are
pseudo-random (seeded), so no figure is written down: tests/cli/pipeline_check.py computes
what the views and the printed tables must hold from these rows.

Around it, what the views must leave out: a train job no sweep uses, a second baseline of
one model with another numerics version (the views prefer the same one), and experiment
plain-NAME, a sweep of a model no training job made.

Usage: pipeline_data.py NAME SEED  (writes the SQL on stdout)"""
import json
import random
import sys

name, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
# the method jobs' values, from a stream of their own so the others' stay as they were
method_rng = random.Random(seed + 1)
out = []


def lit(s):
    return "'" + s.replace("'", "''") + "'"


def job(key, kind, spec, state="succeeded"):
    out.append(
        "INSERT INTO jobs (job_key, kind, spec, state) VALUES (%s, %s, %s::jsonb, %s);"
        % (lit(key), lit(kind), lit(json.dumps(spec)), lit(state))
    )
    out.append(
        "INSERT INTO experiment_jobs SELECT e.id, j.id FROM experiments e, jobs j "
        "WHERE e.name = %s AND j.job_key = %s;" % (lit(exp_of[key]), lit(key))
    )


def result(key, metric, value):
    out.append(
        "INSERT INTO results (job, attempt, name, value, step, final) SELECT id, 1, %s, %r, -1, "
        "true FROM jobs WHERE job_key = %s;" % (lit(metric), value, lit(key))
    )


def dep(key, on):
    out.append(
        "INSERT INTO job_deps SELECT a.id, b.id FROM jobs a, jobs b WHERE a.job_key = %s AND "
        "b.job_key = %s;" % (lit(key), lit(on))
    )


exp_of = {}
for e in (name, "plain-" + name):
    out.append("INSERT INTO experiments (name, grid) VALUES (%s, 'kind: pipeline');" % lit(e))
dataset = {"path": "/data/held-out.tokens", "digest": "ds-held-out", "ctx": 64, "max_chunks": 4}
runs = [("bf16", s) for s in (1, 2, 3)] + [("nvfp4", s) for s in (1, 2, 3)] + [("mxfp4", 1)]
PARTS = [("component", p) for p in ("q", "k", "v", "o", "gate", "up", "down")] + [
    ("block", str(b)) for b in range(3)
]
for recipe, s in runs:
    tkey = "%s-train-%s-s%d" % (name, recipe, s)
    exp_of[tkey] = name
    job(tkey, "train", {"kind": "train", "recipe": {"name": recipe}, "shape": {"name": "mini"},
                        "lr": 0.003, "seed": s, "steps": 200, "batch": 8})
    val = 3.0 + (0.05 if recipe != "bf16" else 0) + rng.uniform(-0.04, 0.04)
    for m, v in (("final_train_loss", val - rng.uniform(0.01, 0.1)), ("final_val_loss", val),
                 ("val_ppl", 2.718281828 ** val), ("tokens_seen", 102400.0),
                 ("wall_s", rng.uniform(30, 60))):
        result(tkey, m, v)
    model = {"path": "/ckpt/" + tkey, "digest": "digest-" + tkey, "trained_by": tkey}
    bkey = tkey + "-baseline"
    exp_of[bkey] = name
    job(bkey, "baseline", {"kind": "baseline", "model": model, "dataset": dataset,
                           "format": "bf16", "format_options": {}, "numerics_version": "7"})
    dep(bkey, tkey)
    base_ppl = 20.0 + rng.uniform(-2, 2)
    result(bkey, "ppl", base_ppl)
    if (recipe, s) == ("bf16", 2):
        # another numerics version's baseline of the same model, made later: not the pair
        okey = bkey + "-numerics-6"
        exp_of[okey] = name
        job(okey, "baseline", {"kind": "baseline", "model": model, "dataset": dataset,
                               "format": "bf16", "format_options": {}, "numerics_version": "6"})
        dep(okey, tkey)
        result(okey, "ppl", base_ppl + 5)
    for fmt, scale in (("nvfp4", 1.0), ("mxfp4", 2.5)):
        for quant, qs in (("weights", 1.0), ("weights+activations", 1.8)):
            for mode, part in PARTS:
                ekey = "%s-%s-%s-%s-%s" % (tkey, fmt, quant, mode, part)
                exp_of[ekey] = name
                job(ekey, "eval", {"kind": "eval", "model": model, "dataset": dataset,
                                   "format": fmt, "format_options": {"rht": False},
                                   "quantize": quant, "mode": mode, "part": part,
                                   "metrics": ["kl_mean", "kl_p99", "ppl", "top1"],
                                   "numerics_version": "7"})
                dep(ekey, bkey)
                dep(ekey, tkey)
                kl = scale * qs * rng.uniform(0.002, 0.03) * (0.8 if recipe == "nvfp4" else 1)
                if (recipe, fmt, quant, part) == ("bf16", "nvfp4", "weights", "o"):
                    # a KL that sums to a tiny negative value (rounding; a KL is >= 0): its
                    # mean over seeds prints as 0.000000, never -0.000000
                    kl = -3e-9 * s
                result(ekey, "kl_mean", kl)
                result(ekey, "kl_p99", kl * rng.uniform(5, 9))
                result(ekey, "ppl", base_ppl * (1 + kl * rng.uniform(0.8, 1.2)))
                result(ekey, "top1", 1 - kl * rng.uniform(2, 4))
    # the same down_proj jobs by two more methods, one of them with options: each its own row
    # of the summary, never averaged with rtn's
    for method, mopts, gain in (("gptq", None, 0.6), ("mr-gptq", {"scale_search": True}, 0.5)):
        ekey = "%s-nvfp4-weights-component-down-%s" % (tkey, method)
        exp_of[ekey] = name
        spec = {"kind": "eval", "model": model, "dataset": dataset, "format": "nvfp4",
                "format_options": {"rht": False}, "quantize": "weights", "mode": "component",
                "part": "down", "method": method, "metrics": ["kl_mean", "ppl"],
                "numerics_version": "7"}
        if mopts:
            spec["method_options"] = mopts
        job(ekey, "eval", spec)
        dep(ekey, bkey)
        dep(ekey, tkey)
        kl = gain * method_rng.uniform(0.002, 0.03)
        result(ekey, "kl_mean", kl)
        result(ekey, "ppl", base_ppl * (1 + kl))
# a training run no sweep names
exp_of[name + "-train-unused"] = name
job(name + "-train-unused", "train", {"kind": "train", "recipe": {"name": "bf16"},
                                      "shape": {"name": "mini"}, "lr": 0.003, "seed": 1,
                                      "steps": 50, "batch": 8})
result(name + "-train-unused", "final_val_loss", 9.0)
# a plain sweep of a model from a file
plain = {"path": "/models/plain.gguf", "digest": "digest-plain"}
exp_of["plain-base"] = exp_of["plain-eval"] = "plain-" + name
job("plain-base", "baseline", {"kind": "baseline", "model": plain, "dataset": dataset,
                               "format": "bf16", "format_options": {}, "numerics_version": "7"})
result("plain-base", "ppl", 18.0)
job("plain-eval", "eval", {"kind": "eval", "model": plain, "dataset": dataset, "format": "nvfp4",
                           "format_options": {"rht": False}, "quantize": "weights",
                           "mode": "component", "part": "down",
                           "metrics": ["kl_mean", "ppl"], "numerics_version": "7"})
dep("plain-eval", "plain-base")
result("plain-eval", "kl_mean", 0.05)
result("plain-eval", "ppl", 18.9)
print("BEGIN;")
print("\n".join(out))
print("COMMIT;")
