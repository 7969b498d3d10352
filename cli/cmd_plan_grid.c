/* The plan as a grid that measures it (cmd_plan_parts.h): written for `qsweep submit`/`run`, or
 * submitted by --validate. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd_plan_parts.h"
#include "numerics_path.h"
#include "synthetic.h"

/* The name of the experiment that measures the plan:
 * "<sweep>-plan-<B>b[-groups][-ppl][-methods-<M1+M2...>]", so that plans of one sweep and budget
 * from other --methods do not take one another's name. */
static void validation_name(const qsweep_plan_opts *o, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s-plan-%gb%s%s%s", o->experiment, o->budget,
                     o->uniform_groups ? "-groups" : "",
                     !strcmp(o->objective, "ppl") ? "-ppl" : "", o->methods ? "-methods-" : "");
    for (const char *m = o->methods; m && *m && n > 0 && (size_t)n + 1 < cap; m++) {
        buf[n++] = *m == ',' ? '+' : *m;
        buf[n] = 0;
    }
    /* other candidate formats are another plan at the same budget: another name */
    if (o->formats && n > 0 && (size_t)n + sizeof "-formats-" < cap) {
        n += snprintf(buf + n, cap - (size_t)n, "-formats-");
        for (const char *f = o->formats; *f && (size_t)n + 1 < cap; f++) {
            buf[n++] = *f == ',' ? '+' : *f;
            buf[n] = 0;
        }
    }
}

/* Prints v as a YAML scalar (a JSON string, which YAML reads as the same text). */
static void yaml_string(FILE *out, const char *v) {
    json_t *j = json_string(v);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    fputs(t ? t : "\"\"", out);
    free(t);
    json_decref(j);
}

/* The grid of the plan (cmd_plan_parts.h): the sweep's conditions, mode policy, each linear. */
void qsweep_plan_write_grid(FILE *out, const qsweep_plan_choice *pc, const json_t *method_options,
                            double cost, double bits) {
    const qsweep_plan_opts *o = pc->o;
    const qsweep_plan_input *in = pc->in;
    const char *quant = in->quantize;
    char name[256];
    validation_name(o, name, sizeof name);
    fprintf(out,
            "# qsweep plan %s --budget-bits %g --objective %s%s%s%s\n"
            "# predicted %s (sum over items, not measured): %.6g at %.4f bits per weight\n"
            "# model %s, %s-mode costs, quantize %s\n"
            "name: %s\ndescription: ",
            o->experiment, o->budget, o->objective, o->uniform_groups ? " --uniform-groups" : "",
            o->methods ? " --methods " : "", o->methods ? o->methods : "", o->objective, cost, bits, in->model_path, in->layer_mode ? "layer" : "component", quant,
            name);
    char desc[512];
    snprintf(desc, sizeof desc, "the plan of %s at %g bits per weight (%s), measured whole",
             o->experiment, o->budget, o->objective);
    yaml_string(out, desc);
    if (in->numerics[0]) fprintf(out, "\nnumerics: %s", in->numerics); /* the sweep's path */
    fprintf(out, "\nkind: sensitivity\nmodels:\n  - ");
    const char *mp = in->model_path;
    if (qw_synthetic_is(mp)) {
        /* "synthetic:<shape>:<seed>" as the grid's form */
        const char *shape = mp + strlen("synthetic:"), *seed = strrchr(mp, ':');
        fprintf(out, "{synthetic: %.*s, seed: %s}", (int)(seed - shape), shape, seed + 1);
    } else { /* with its digest: the grid refuses to load once the file is another model */
        fprintf(out, "{path: ");
        yaml_string(out, mp);
        fprintf(out, ", digest: %s}", in->file_digest);
    }
    const char *dpath = json_string_value(json_object_get(in->dataset, "path"));
    const char *text = qs_dataset_text_path(dpath);
    fprintf(out, "\ndataset:\n  %s: ", text ? "text" : "tokens");
    yaml_string(out, text ? text : dpath ? dpath : "");
    fprintf(out, "\n  ctx: %lld\n  max_chunks: %lld\n",
            (long long)json_integer_value(json_object_get(in->dataset, "ctx")),
            (long long)json_integer_value(json_object_get(in->dataset, "max_chunks")));
    /* a plan with methods: the sweep's calibration, which its calibrated linears read */
    const char *cpath = json_string_value(json_object_get(in->calibration, "path"));
    if (method_options && cpath) {
        fprintf(out, "  calibration: {chunks: %lld",
                (long long)json_integer_value(json_object_get(in->calibration, "chunks")));
        if (!dpath || strcmp(cpath, dpath)) {
            fprintf(out, ", tokens: ");
            yaml_string(out, cpath);
        }
        fprintf(out, "}\n");
    }
    fprintf(out, "sensitivity:\n");
    /* the sweep's options of each format (a flow mapping in JSON form is YAML too), once per
       format whatever the methods of its candidates */
    int any = 0;
    for (size_t f = 0; f < in->n_formats; f++) {
        const json_t *opts = json_object_get(in->options, in->formats[f]);
        if (!opts || !strcmp(in->formats[f], "bf16")) continue;
        size_t first = 0;
        while (strcmp(in->formats[first], in->formats[f]))
            first++;
        if (first < f) continue;
        char *t = json_dumps(opts, JSON_SORT_KEYS | JSON_COMPACT);
        fprintf(out, "%s    - {name: %s, options: %s}\n", any ? "" : "  formats:\n", in->formats[f],
                t ? t : "{}");
        free(t);
        any = 1;
    }
    char *metrics = json_dumps(in->metrics, JSON_COMPACT);
    fprintf(out, "  quantize: [%s]\n  modes: [policy]\n  metrics: %s\n", quant,
            metrics ? metrics : "[kl, ppl]");
    free(metrics);
    /* the method of each linear not by rtn (kinds/method.h per-linear) */
    if (method_options) {
        char *t = json_dumps(method_options, JSON_SORT_KEYS | JSON_COMPACT);
        fprintf(out, "  method:\n    - {name: per-linear, options: %s}\n", t ? t : "{}");
        free(t);
    }
    fprintf(out, "  policy:\n");
    for (int b = 0; b < in->n_layers; b++)
        for (int k = 0; k < 7; k++)
            fprintf(out, "    \"%d.%s\": %s\n", b, qsweep_plan_kinds[k],
                    qsweep_plan_chosen_format(pc, b, k));
}

/* --validate (cmd_plan_parts.h): the grid through a private file into the sweep's database. */
/* The numerics path the validation experiment is pinned to: the path the plan read
 * (qsweep_plan_pick_path) where a worker can announce it; NULL where the plan read every job
 * (no result names a path) or a path of results older than attempts' paths ("gpu-<gemm>"). */
static const char *validation_pin(const qsweep_plan_input *in) {
    return qs_numerics_path_valid(in->path) ? in->path : NULL;
}

qs_status qsweep_plan_validate(qc_store *s, const qsweep_plan_choice *pc,
                               const json_t *method_options, double cost, double bits,
                               qs_error *err) {
    const qsweep_plan_opts *o = pc->o;
    int any = 0;
    for (size_t i = 0; i < pc->n; i++)
        any |= strcmp(pc->in->formats[pc->choice[i]], "bf16") != 0;
    if (!any) {
        printf("validation: nothing to measure: every linear stays bf16 (the baseline)\n");
        return QS_OK;
    }
    char tmp[4096] = "";
    const char *path = o->output;
    if (!path) {
        const char *dir = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/qsweep-plan-XXXXXX.yaml", dir && *dir ? dir : "/tmp");
        int fd = mkstemps(tmp, 5);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!f) {
            if (fd >= 0) close(fd);
            return qs_error_set(err, QS_EIO, "%s: %s", tmp, strerror(errno));
        }
        qsweep_plan_write_grid(f, pc, method_options, cost, bits);
        if (fclose(f) != 0) {
            unlink(tmp);
            return qs_error_set(err, QS_EIO, "writing %s: %s", tmp, strerror(errno));
        }
        path = tmp;
    }
    qc_grid *g = NULL;
    qc_job_list jobs = {0};
    qc_submit_counts counts = {0};
    qs_status st = qsweep_load_grid(path, NULL, 0, &g, &jobs, err);
    /* pinned to the path the plan read, so its workers measure it where the costs were
       measured; its job keys, and so the baseline it shares with the sweep, stay the grid's */
    const char *pin = validation_pin(pc->in);
    if (!st) st = qsweep_submit_jobs_pinned(s, g, &jobs, pin, &counts, err);
    if (!st) {
        printf("validation: ");
        qsweep_print_submit(g, jobs.n, &counts, stdout);
        if (pin) printf("validation: pinned to numerics path %s, the one the plan read\n", pin);
        if (counts.jobs_new || counts.reused_pending)
            printf("validation: %s (qsweep worker, or qsweep run on the grid); "
                   "then qsweep plan %s --budget-bits %g%s%s%s%s%s%s prints it measured\n",
                   counts.jobs_new ? "the workers run it" : "already queued: the workers run it",
                   o->experiment, o->budget, o->uniform_groups ? " --uniform-groups" : "",
                   !strcmp(o->objective, "ppl") ? " --objective ppl" : "",
                   o->formats ? " --formats " : "", o->formats ? o->formats : "",
                   o->methods ? " --methods " : "", o->methods ? o->methods : "");
    }
    qc_job_list_free(&jobs);
    qc_grid_free(g);
    if (tmp[0]) unlink(tmp);
    return st;
}
