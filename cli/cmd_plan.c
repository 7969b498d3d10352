/* qsweep plan EXPERIMENT --budget-bits B: a per-linear format assignment from a layer-mode
 * (or component-mode) sensitivity sweep (its costs: cmd_plan_costs.c), solved exactly by
 * plan.c, printed with its predicted cost and what was measured of it (cmd_plan_measured.c),
 * and written as a grid `policy` part (cmd_plan_grid.c). The predicted cost of a plan is the
 * sum of its items' costs; damage is not additive, so it is an estimate to be measured. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_plan_parts.h"
#include "method.h"
#include "method_label.h"

static void plan_usage(FILE *out) {
    fprintf(out,
            "usage: qsweep plan EXPERIMENT --budget-bits B [--formats F1,F2,...]\n"
            "                   [--methods M1,M2,...] [--objective kl_mean|ppl]\n"
            "                   [--uniform-groups] [--quantize Q]\n"
            "                   [--model NAME] [--numerics PATH] [-o FILE] [--validate]\n"
            "                   [--db CONNINFO]\n"
            "  From a layer-mode (else component-mode) sensitivity sweep, the format of each\n"
            "  linear that minimizes the summed measured damage under an average of B bits per\n"
            "  weight, block scales counted (nvfp4 4.5, mxfp4 4.25, mxfp8_e4m3 8.25, fp8_e4m3 8,\n"
            "  bf16 16; per-tensor FP32 scales are shown, not budgeted). Exact: a\n"
            "  multiple-choice knapsack solved by dynamic programming. Damage is not additive:\n"
            "  the predicted cost is the sum of the isolated measurements. A measured cost\n"
            "  below 0 (noise) counts as 0, as bf16's does; ties go to the higher-precision\n"
            "  format. The model at the sweep's path must be the one swept (same digest).\n"
            "  --formats LIST     candidate formats (default: those measured, and bf16); a\n"
            "                     format without a measurement for a linear is not chosen for it\n"
            "  --methods LIST     the methods whose measurements are candidates (default: every\n"
            "                     one the sweep ran): a sweep of several methods plans (method,\n"
            "                     format) pairs, and its grid measures them with method\n"
            "                     per-linear; mr-gptq+search is mr-gptq with scale_search,\n"
            "                     gptq+damp=0.1 the setting of gptq with damp 0.1 where the\n"
            "                     sweep measured another (docs/methods.md)\n"
            "  --objective        kl_mean (default: mean KL divergence from the baseline) or ppl\n"
            "                     (perplexity increase)\n"
            "  --uniform-groups   q/k/v and gate/up of a block share one format (fused GEMMs)\n"
            "  --quantize Q       which sweep setting (weights, weights+activations) when both\n"
            "  --model NAME       which model (path, file name, or a pipeline's name of a\n"
            "                     trained model: train/micro/bf16/seed=1) when the sweep has several\n"
            "  --numerics PATH    read the results of this numerics path (cpu-qsweep-fixed2,\n"
            "                     cuda-cc90-auto, ...); default: the only path the experiment's\n"
            "                     results ran on, else the path it is pinned to; one that ran\n"
            "                     on several and is pinned to none of them is refused\n"
            "  -o FILE            write the plan as a grid that measures it (the sweep's model\n"
            "                     and dataset, sensitivity mode policy); default: printed after\n"
            "                     the table. A plan that keeps every linear bf16 has no grid:\n"
            "                     with -o or --validate it is refused (exit 2), nothing written\n"
            "  --validate         submit that grid (experiment <EXPERIMENT>-plan-<B>b...): one\n"
            "                     eval job of the whole plan, run by the workers; once it is\n"
            "                     done, plan prints its measured damage beside the prediction\n"
            "  Measured damage, when the results exist: the plan's policy job, and for each\n"
            "  format the job that quantized every linear in it (policy or cumulative mode).\n");
}

/* --methods: a comma-separated list of one or more method labels (kinds/method.h), each one a
 * sweep can run (per-linear is what a plan's grid runs, never a candidate), written into out
 * with each setting label in its canonical form (qs_method_setting_label_canonical), which the
 * labels of the measured settings are compared with. QS_EXIT_OK, else the exit status after
 * printing why: usage for a name that is no method, bad input for a malformed setting label. */
static int methods_read(const char *list, char *out, size_t cap) {
    const char *p = list;
    size_t used = 0;
    out[0] = 0;
    do {
        size_t n = strcspn(p, ",");
        char why[160] = "", name[256], label[64];
        qs_error err = {0};
        qs_status st = QS_OK;
        const qs_method *m = NULL;
        if (!n)
            snprintf(why, sizeof why, "an empty method name");
        else if (n >= sizeof name)
            snprintf(why, sizeof why, "a method name of %zu characters", n);
        else {
            bool search;
            size_t len;
            snprintf(name, sizeof name, "%.*s", (int)n, p);
            st = qs_method_setting_label_canonical(name, label, sizeof label, &err);
            m = st ? NULL : qs_method_at(qs_method_by_setting_label(label, &search, &len));
            if (st == QS_ENOTFOUND)
                snprintf(why, sizeof why, "unknown method '%.64s'", name);
            else if (m && m->per_linear) /* its setting labels too: per-linear+0.q=gptq */
                snprintf(why, sizeof why,
                         "per-linear is the method of a plan's grid, not a candidate");
        }
        if (*why) {
            fprintf(stderr, "qsweep plan: --methods '%s': %s (expected one or more of ", list, why);
            for (int i = 0; i < qs_method_count(); i++)
                if (!qs_method_at(i)->per_linear) fprintf(stderr, "%s, ", qs_method_at(i)->name);
            fprintf(stderr, "mr-gptq+search, or a setting label such as gptq+damp=0.1, "
                            "comma-separated)\n");
            return QS_EXIT_USAGE;
        }
        if (st) {
            fprintf(stderr, "qsweep plan: --methods '%s': malformed setting label '%s': %s\n", list,
                    name, err.msg);
            return QS_EXIT_INPUT;
        }
        used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "," : "", label);
        if (used >= cap) {
            fprintf(stderr, "qsweep plan: --methods '%s': a list of more than %zu characters\n",
                    list, cap - 1);
            return QS_EXIT_USAGE;
        }
        p += n;
    } while (*p++ == ',');
    return QS_EXIT_OK;
}

int qsweep_cmd_plan(int argc, char **argv) {
    static const struct option opts[] = {{"budget-bits", required_argument, 0, 'b'},
                                         {"formats", required_argument, 0, 'f'},
                                         {"methods", required_argument, 0, 'M'},
                                         {"objective", required_argument, 0, 'j'},
                                         {"uniform-groups", no_argument, 0, 'u'},
                                         {"quantize", required_argument, 0, 'q'},
                                         {"model", required_argument, 0, 'm'},
                                         {"output", required_argument, 0, 'o'},
                                         {"validate", no_argument, 0, 'V'},
                                         {"db", required_argument, 0, 'd'},
                                         {"numerics", required_argument, 0, 'N'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    qsweep_plan_opts o = {.objective = "kl_mean", .budget = NAN};
    const char *db = NULL;
    char methods[4096]; /* --methods, its setting labels canonical */
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "b:f:j:uq:m:o:d:h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'b':
            errno = 0;
            o.budget = strtod(optarg, &end);
            if (!*optarg || *end || errno || !(o.budget > 0 && o.budget <= 64)) {
                fprintf(stderr,
                        "qsweep plan: --budget-bits %s: expected a number of bits per "
                        "weight in (0, 64]\n",
                        optarg);
                return QS_EXIT_USAGE;
            }
            break;
        case 'f':
            o.formats = optarg;
            break;
        case 'M': {
            int rc = methods_read(optarg, methods, sizeof methods);
            if (rc) return rc;
            o.methods = methods;
            break;
        }
        case 'j':
            if (strcmp(optarg, "kl_mean") && strcmp(optarg, "ppl")) {
                fprintf(stderr, "qsweep plan: --objective %s: expected kl_mean or ppl\n", optarg);
                return QS_EXIT_USAGE;
            }
            o.objective = optarg;
            break;
        case 'u':
            o.uniform_groups = 1;
            break;
        case 'q':
            o.quantize = optarg;
            break;
        case 'm':
            o.model = optarg;
            break;
        case 'o':
            o.output = optarg;
            break;
        case 'V':
            o.validate = 1;
            break;
        case 'd':
            db = optarg;
            break;
        case 'N':
            o.numerics = optarg;
            break;
        case 'h':
            plan_usage(stdout);
            return QS_EXIT_OK;
        default:
            plan_usage(stderr);
            return QS_EXIT_USAGE;
        }
    }
    /* each mistake gets its one line (qsweep plan --help shows the options) */
    if (optind >= argc) {
        fprintf(stderr, "qsweep plan: no EXPERIMENT given (%s plan --help)\n", qsweep_invoked());
        return QS_EXIT_USAGE;
    }
    if (optind < argc - 1) {
        fprintf(stderr, "qsweep plan: unexpected argument '%s'\n", argv[optind + 1]);
        return QS_EXIT_USAGE;
    }
    if (isnan(o.budget)) {
        fprintf(stderr, "qsweep plan: --budget-bits B is required (e.g. --budget-bits 4.5)\n");
        return QS_EXIT_USAGE;
    }
    /* as status, results and report: --db, $QSWEEP_DB, else the private cluster of run */
    const char *conninfo = qsweep_find_db(db, "plan");
    if (!conninfo) return QS_EXIT_USAGE;
    o.experiment = argv[optind];
    qs_error err = {0};
    qc_store *s = NULL;
    qsweep_plan_input in = {0};
    qsweep_plan_item *items = NULL;
    int *choice = NULL;
    json_t *mo = NULL; /* the plan's per-linear method options, NULL when all rtn */
    qs_status st = qsweep_open_existing_store(conninfo, "plan", &s, &err);
    if (!st) st = qsweep_plan_pick_path(qc_store_pgconn(s), &o, &in, &err);
    if (!st) st = qsweep_plan_load_costs(qc_store_pgconn(s), &o, &in, &err);
    if (!st) st = qsweep_plan_load_sweep_facts(qc_store_pgconn(s), &o, &in, &err);
    if (st) goto done;
    const qw_config *cfg = &in.cfg;
    /* items: linears (or kinds, component mode) or their fused groups */
    int per_block = o.uniform_groups ? 4 : 7, blocks = in.layer_mode ? in.n_layers : 1;
    size_t n = (size_t)per_block * (size_t)blocks;
    items = calloc(n, sizeof *items);
    choice = calloc(n, sizeof *choice);
    if (!items || !choice) {
        st = qs_error_set(&err, QS_ENOMEM, "plan");
        goto done;
    }
    unsigned qbits[QSWEEP_PLAN_MAX_FORMATS];
    /* a candidate's name: its format, "method/format" when a method other than rtn makes it */
    char labels[QSWEEP_PLAN_MAX_FORMATS][100];
    for (size_t f = 0; f < in.n_formats; f++) {
        qbits[f] = qsweep_plan_quarter_bits(in.formats[f]);
        if (strcmp(in.methods[f], "rtn"))
            snprintf(labels[f], sizeof labels[f], "%s/%s", in.methods[f], in.formats[f]);
        else
            snprintf(labels[f], sizeof labels[f], "%s", in.formats[f]);
    }
    for (int b = 0; b < blocks; b++)
        for (int g = 0; g < per_block; g++) {
            qsweep_plan_item *it = &items[(size_t)b * (size_t)per_block + (size_t)g];
            const int solo[2] = {g, -1};
            const int *members = o.uniform_groups ? qsweep_plan_groups[g] : solo;
            const char *nm = o.uniform_groups ? qsweep_plan_group_names[g] : qsweep_plan_kinds[g];
            if (in.layer_mode)
                snprintf(it->name, sizeof it->name, "%d.%s", b, nm);
            else
                snprintf(it->name, sizeof it->name, "%s", nm);
            for (size_t f = 0; f < in.n_formats; f++)
                it->cost[f] = 0.0;
            for (int m = 0; members[m] >= 0; m++) {
                it->weights += qsweep_plan_kind_weights(cfg, members[m]) *
                               (uint64_t)(in.layer_mode ? 1 : in.n_layers);
                for (size_t f = 0; f < in.n_formats; f++)
                    it->cost[f] += *qsweep_plan_cost_at(&in, in.layer_mode ? b : -1, members[m], f);
            }
        }
    for (size_t f = 0; f < in.n_formats; f++) {
        size_t missing = 0;
        for (size_t i = 0; i < n; i++)
            missing += isnan(items[i].cost[f]);
        if (missing)
            fprintf(stderr,
                    "qsweep plan: note: %s was not measured for %zu of %zu items; they "
                    "cannot take it\n",
                    labels[f], missing, n);
    }
    if (in.n_negative)
        printf("note: %zu linears measured a negative %s, counted as 0 (noise: no format beats "
               "bf16)\n",
               in.n_negative, !strcmp(o.objective, "ppl") ? "delta" : "kl_mean");
    double cost = 0, bits = 0;
    st = qsweep_plan_solve(items, n, qbits, in.n_formats, o.budget, choice, &cost, &bits, &err);
    if (st) goto done;

    const char *quant = in.quantize;
    printf("plan for %s (%s, quantize %s, %s-mode costs, objective %s), budget %g bits per "
           "weight\n",
           o.experiment, in.model_path, quant, in.layer_mode ? "layer" : "component", o.objective,
           o.budget);
    if (in.any_method)
        printf("  %-12s %12s  %-12s %-12s %6s  %12s\n", "item", "weights", "method", "format",
               "bits", o.objective);
    else
        printf("  %-12s %12s  %-12s %6s  %12s\n", "item", "weights", "format", "bits", o.objective);
    uint64_t total_w = 0;
    double scale_bits = 0;
    for (size_t i = 0; i < n; i++) {
        const char *fm = in.formats[choice[i]];
        if (in.any_method)
            printf("  %-12s %12llu  %-12s %-12s %6.2f  %12.6g\n", items[i].name,
                   (unsigned long long)items[i].weights, in.methods[choice[i]], fm,
                   qbits[choice[i]] / 4.0, items[i].cost[choice[i]]);
        else
            printf("  %-12s %12llu  %-12s %6.2f  %12.6g\n", items[i].name,
                   (unsigned long long)items[i].weights, fm, qbits[choice[i]] / 4.0,
                   items[i].cost[choice[i]]);
        total_w += items[i].weights;
        /* one per-tensor scale per linear of the item */
        int members = o.uniform_groups ? (i % 4 == 0 ? 3 : i % 4 == 2 ? 2 : 1) : 1;
        scale_bits +=
            (double)qsweep_plan_tensor_scale_bits(fm) * members * (in.layer_mode ? 1 : in.n_layers);
    }
    printf(in.any_method ? "\ncandidate counts:" : "\nformat counts:");
    for (size_t f = 0; f < in.n_formats; f++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            k += choice[i] == (int)f;
        printf("  %s %zu", labels[f], k);
    }
    printf("\naverage bits per weight: %.4f (budget %g; %.4f with per-tensor FP32 scales)\n", bits,
           o.budget, bits + scale_bits / (double)total_w);
    printf("predicted %s: %.6g (sum of the isolated measurements; damage is not additive: "
           "measure the plan)\n",
           o.objective, cost);
    double nvfp4_measured = NAN;
    for (size_t f = 0; f < in.n_formats; f++) {
        if (!strcmp(in.formats[f], "bf16")) continue;
        double u = 0;
        for (size_t i = 0; i < n; i++)
            u += items[i].cost[f];
        /* measured: a policy job with every linear in it, else the cumulative job over
           every block (the same linears) */
        json_t *umap = qsweep_plan_map(&in, qsweep_plan_uniform_format, in.formats[f]);
        /* the candidate's jobs: its method's name, its label's options */
        const json_t *umo = json_object_get(in.method_options, in.methods[f]);
        umo = json_is_object(umo) ? umo : NULL;
        bool search;
        size_t len;
        const qs_method *me =
            qs_method_at(qs_method_by_setting_label(in.methods[f], &search, &len));
        const char *uname = me ? me->name : in.methods[f];
        char uid[17];
        double um = qsweep_plan_measured_map(qc_store_pgconn(s), &o, &in, umap, uname, umo, uid);
        json_decref(umap);
        char last[16];
        snprintf(last, sizeof last, "%d", in.n_layers - 1);
        if (isnan(um))
            um =
                qsweep_plan_measured(qc_store_pgconn(s), &o, &in, "cumulative", last, in.formats[f],
                                     json_object_get(in.options, in.formats[f]), uname, umo);
        char meas[96] = "";
        if (!isnan(um)) snprintf(meas, sizeof meas, ", measured %.6g", um);
        if (!strcmp(labels[f], "nvfp4")) nvfp4_measured = um;
        if (isnan(u))
            printf("uniform %s: not every item was measured%s\n", labels[f], meas);
        else
            printf("uniform %s (%.2f bits): predicted %s %.6g%s\n", labels[f], qbits[f] / 4.0,
                   o.objective, u, meas);
    }
    /* the plan measured whole: its policy job, when one ran */
    qsweep_plan_choice pc = {&o, &in, items, choice, n};
    json_t *map = qsweep_plan_map(&in, qsweep_plan_chosen_format, &pc);
    st = qsweep_plan_method_options(&pc, &mo, &err);
    char id[17];
    double pm = st ? NAN
                   : qsweep_plan_measured_map(qc_store_pgconn(s), &o, &in, map,
                                              mo ? "per-linear" : NULL, mo, id);
    json_decref(map);
    if (st) goto done;
    if (!id[0])
        printf("measured %s of the plan: nothing to measure (every linear stays bf16, the "
               "reference)\n",
               o.objective);
    else if (isnan(pm))
        printf("measured %s of the plan: not yet (policy %s; %s)\n", o.objective, id,
               o.validate ? "--validate queues it below" : "--validate queues it");
    else if (isnan(nvfp4_measured))
        printf("measured %s of the plan: %.6g (policy %s; predicted %.6g)\n", o.objective, pm,
               id, cost);
    else
        printf("measured %s of the plan: %.6g (policy %s; predicted %.6g; uniform nvfp4 "
               "measured %.6g)\n",
               o.objective, pm, id, cost, nvfp4_measured);
    /* the plan is the baseline: its grid, an all-bf16 policy, is one submit refuses */
    if (!id[0] && (o.output || o.validate)) {
        st = qs_error_set(&err, QS_EINVAL,
                          "the budget keeps every linear unquantized: nothing to validate (no "
                          "grid %s; a smaller --budget-bits quantizes some linear)",
                          o.output ? "written" : "submitted");
        goto done;
    }
    if (!id[0]) {
        printf("\nno grid: the budget keeps every linear unquantized: nothing to validate\n");
        goto done;
    }
    FILE *out = stdout;
    if (o.output && !(out = fopen(o.output, "w"))) {
        st = qs_error_set(&err, QS_EIO, "cannot write %s: %s", o.output, strerror(errno));
        goto done;
    }
    if (!o.output) printf("\n");
    qsweep_plan_write_grid(out, &pc, mo, cost, bits);
    if (o.output) {
        if (fclose(out) != 0)
            st = qs_error_set(&err, QS_EIO, "writing %s: %s", o.output, strerror(errno));
        else
            printf("policy written to %s\n", o.output);
    }
    if (!st && o.validate) st = qsweep_plan_validate(s, &pc, mo, cost, bits, &err);
done:
    qc_store_close(s);
    qsweep_plan_input_free(&in);
    json_decref(mo);
    free(items);
    free(choice);
    return st ? qsweep_fail("plan", &err) : QS_EXIT_OK;
}