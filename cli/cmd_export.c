/* qsweep export GRID -o DIR: a plan (qsweep plan's grid) or one eval job of a grid written as a
 * checkpoint that serving engines load, with the codes and scales the sweep measured
 * (worker/export/export.h; docs/export.md). The job's policy is the one its worker builds
 * (worker/jobs qw_jobs_policy), applied by the engine to the source checkpoint, and its method
 * (GPTQ) applied after it as the worker applies it. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "checkpoint.h"
#include "cli.h"
#include "export.h"
#include "grid.h"
#include "jobs.h"
#include "sensitivity.h"
#include "spec.h"
#include "tokens.h"

static void export_usage(FILE *out) {
    fprintf(out,
            "usage: qsweep export GRID -o DIR [--to LAYOUT] [--job KEY|LABEL] [--model PATH]\n"
            "                     [--set KEY=VALUE ...] [--threads N] [--calib-chunks N]\n"
            "  GRID          a grid: qsweep plan's output (one policy job), or any sensitivity\n"
            "                grid with --job naming one of its eval jobs\n"
            "  -o DIR        the checkpoint folder to create (must not exist); written beside it\n"
            "                as DIR.tmp-XXXXXX and renamed when complete\n"
            "  --to LAYOUT   compressed-tensors (default; vLLM's format: NVFP4, MXFP4), gguf\n"
            "                (llama.cpp: a GGUF source's MXFP4 linears as DIR/model.gguf), or\n"
            "                modelopt (TensorRT-LLM: NVFP4 W4A4 with calibrated input scales)\n"
            "  --job K       the eval job: a job key (or a prefix of one) or its label as\n"
            "                qsweep submit --dry-run prints it\n"
            "  --model PATH  the source checkpoint, when it is not where the grid names it: its\n"
            "                digest must equal the one the sweep measured\n"
            "  --set K=V     as qsweep run's --set: changes the grid before it is expanded\n"
            "  --threads N   quantizer threads (default: all)\n"
            "  --calib-chunks N  modelopt: the input scales' calibration, the last N whole chunks\n"
            "                of the job's token file, none of them scored (default 4)\n");
}

/* A progress line on a terminal; in a log, the last step only. */
static void progress(void *ctx, size_t done, size_t total) {
    (void)ctx;
    if (!isatty(STDERR_FILENO) && done != total) return;
    fprintf(stderr, "\rexport: %zu/%zu%s", done, total, done == total ? "\n" : "");
}

/* The eval job `want` names (key prefix or label), or the only eval job when want is NULL. */
static qs_status pick_job(const char *grid, const qc_job_list *jobs, const char *want,
                          const qc_job **out, qs_error *err) {
    const qc_job *found = NULL;
    size_t n_eval = 0, n_match = 0;
    for (size_t i = 0; i < jobs->n; i++) {
        const qc_job *j = &jobs->jobs[i];
        if (strcmp(j->kind, "eval") != 0) continue;
        n_eval++;
        if (!want || !strncmp(j->key, want, strlen(want)) ||
            (j->label && !strcmp(j->label, want))) {
            found = j;
            n_match++;
        }
    }
    if (n_match == 1) {
        *out = found;
        return QS_OK;
    }
    if (!want)
        return qs_error_set(err, QS_EINVAL,
                            "%s: %zu eval jobs: name one with --job (a key or a label from "
                            "qsweep submit %s --dry-run)",
                            grid, n_eval, grid);
    return qs_error_set(err, QS_EINVAL, "%s: --job %s: %s", grid, want,
                        n_match ? "matches several eval jobs (give more of the key)"
                                : "matches no eval job of the grid");
}

/* modelopt's calibration: the last n whole chunks of the job's token file at its ctx (each first
 * token replaced by the dataset's BOS when it has one, as the evaluation does), none of them a
 * chunk the job scores. *ids is heap (free()). */
static qs_status read_calibration(const json_t *spec, int n, uint32_t **ids, int *ctx,
                                  qs_error *err) {
    qs_sensitivity_spec s;
    memset(&s, 0, sizeof s);
    qw_tokens t = {0};
    qs_status st = qs_sensitivity_decode(spec, &s, err);
    const char *path = st ? NULL : s.dataset.path;
    if (!st && qs_dataset_text_path(path))
        st = qs_error_set(err, QS_EUNSUPPORTED,
                          "export: calibration reads a token file, and the job's dataset is the "
                          "text %s (qsweep tokenize makes its token file)",
                          qs_dataset_text_path(path));
    if (!st) st = qw_tokens_load(path, &t, err);
    if (!st && strcmp(t.digest, s.dataset.digest) != 0)
        st = qs_error_set(err, QS_EINVAL, "export: %s has digest %.16s..., the job names %.16s...",
                          path, t.digest, s.dataset.digest);
    size_t c = st ? 1 : (size_t)s.dataset.ctx, total = t.n / c;
    size_t scored = !st && s.dataset.max_chunks > 0 && (size_t)s.dataset.max_chunks < total
                        ? (size_t)s.dataset.max_chunks
                        : total;
    if (!st && total - scored < (size_t)n)
        st = qs_error_set(err, QS_EINVAL,
                          "export: %s holds %zu whole chunks of ctx %zu and the job scores %zu: "
                          "%d calibration chunks (--calib-chunks) would overlap them",
                          path, total, c, scored, n);
    if (!st && !(*ids = malloc((size_t)n * c * sizeof **ids)))
        st = qs_error_set(err, QS_ENOMEM, "export: out of memory (calibration)");
    if (!st) {
        memcpy(*ids, t.ids + (total - (size_t)n) * c, (size_t)n * c * sizeof **ids);
        for (int i = 0; s.dataset.bos && i < n; i++)
            (*ids)[(size_t)i * c] = (uint32_t)s.dataset.bos_id;
        *ctx = (int)c;
    }
    qw_tokens_free(&t);
    qs_sensitivity_clear(&s);
    return st;
}

static qs_status run_export(const char *grid, const char *const *sets, size_t n_sets,
                            const char *want, const char *model, const char *out_dir,
                            const char *layout_name, int threads, int calib_chunks,
                            qs_error *err) {
    qw_export_layout layout;
    qs_status st = qw_export_layout_by_name(layout_name, &layout, err);
    if (st) return st;
    qc_grid *g = NULL;
    qc_job_list jobs = {0};
    st = qsweep_load_grid(grid, sets, n_sets, &g, &jobs, err);
    const qc_job *job = NULL;
    if (!st) st = pick_job(grid, &jobs, want, &job, err);
    json_t *spec = NULL;
    qs_model_ref ref = {0};
    if (!st) {
        json_error_t je;
        spec = json_loads(job->spec, 0, &je);
        if (!spec) st = qs_error_set(err, QS_EFORMAT, "job spec: %s", je.text);
    }
    struct qw_method_plan *method = NULL; /* the job's method, NULL for rtn */
    if (!st) st = qw_export_method_from_spec(job->spec, &method, err);
    if (!st) st = qs_model_ref_read(spec, &ref, err);
    if (!st && !strncmp(ref.path, "synthetic:", 10))
        st = qs_error_set(err, QS_EUNSUPPORTED,
                          "export: %s is a synthetic model: there is no checkpoint to export",
                          ref.path);
    const char *src = model ? model : ref.path;
    qw_checkpoint *ck = NULL;
    if (!st) st = qw_checkpoint_open(src, &ck, err);
    if (!st && model) {
        char hex[65];
        st = qw_checkpoint_digest(ck, hex, err);
        if (!st && strcmp(hex, ref.digest) != 0)
            st = qs_error_set(err, QS_EINVAL,
                              "export: --model %s has digest %.16s..., but the grid's job was "
                              "measured on %s (digest %.16s...): a plan for another model",
                              model, hex, ref.path, ref.digest);
    }
    qw_policy policy = {0};
    if (!st) st = qw_jobs_policy(job->spec, qw_checkpoint_config(ck)->n_layers, &policy, err);
    qw_checkpoint_close(ck);
    uint32_t *calib = NULL;
    int calib_ctx = 0;
    if (!st && layout == QW_EXPORT_MODELOPT)
        st = read_calibration(spec, calib_chunks, &calib, &calib_ctx, err);
    if (!st) {
        fprintf(stderr, "export: %s (%s) from %s to %s\n", job->label ? job->label : "", job->key,
                src, out_dir);
        qw_export_request r = {.model_path = src,
                               .policy = &policy,
                               .method = method,
                               .layout = layout,
                               .out_dir = out_dir,
                               .threads = threads,
                               .progress = progress,
                               .calib = calib,
                               .calib_chunks = calib ? (size_t)calib_chunks : 0,
                               .calib_ctx = calib_ctx};
        st = qw_export_write(&r, err);
    }
    free(calib);
    qw_export_method_free(method);
    qw_policy_free(&policy);
    qs_model_ref_clear(&ref);
    json_decref(spec);
    qc_job_list_free(&jobs);
    qc_grid_free(g);
    return st;
}

int qsweep_cmd_export(int argc, char **argv) {
    static const struct option longopts[] = {
        {"output", required_argument, 0, 'o'}, {"to", required_argument, 0, 't'},
        {"job", required_argument, 0, 'j'},    {"model", required_argument, 0, 'm'},
        {"set", required_argument, 0, 's'},    {"threads", required_argument, 0, 'T'},
        {"calib-chunks", required_argument, 0, 'C'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    const char *out = NULL, *layout = "compressed-tensors", *job = NULL, *model = NULL;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    size_t n_sets = 0;
    int threads = 0, calib_chunks = 4, calib_given = 0, c;
    if (!sets) return QS_EXIT_RUNTIME;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            out = optarg;
            break;
        case 't':
            layout = optarg;
            break;
        case 'j':
            job = optarg;
            break;
        case 'm':
            model = optarg;
            break;
        case 's':
            sets[n_sets++] = optarg;
            break;
        case 'T':
            if (qsweep_parse_int("export", "--threads", optarg, 0, 4096, &threads)) {
                free(sets);
                return QS_EXIT_USAGE;
            }
            break;
        case 'C':
            if (qsweep_parse_int("export", "--calib-chunks", optarg, 1, 1 << 20, &calib_chunks)) {
                free(sets);
                return QS_EXIT_USAGE;
            }
            calib_given = 1;
            break;
        case 'h':
            export_usage(stdout);
            free(sets);
            return QS_EXIT_OK;
        default:
            export_usage(stderr);
            free(sets);
            return QS_EXIT_USAGE;
        }
    }
    if (optind != argc - 1 || !out) {
        export_usage(stderr);
        free(sets);
        return QS_EXIT_USAGE;
    }
    if (calib_given && strcmp(layout, "modelopt") != 0) { /* no other layout calibrates */
        fprintf(stderr, "qsweep export: --calib-chunks: only --to modelopt calibrates (--to %s)\n",
                layout);
        free(sets);
        return QS_EXIT_USAGE;
    }
    qs_error err = {0};
    qs_status st = run_export(argv[optind], sets, n_sets, job, model, out, layout, threads,
                              calib_chunks, &err);
    free(sets);
    if (st) return qsweep_fail("export", &err);
    printf("exported to %s\n", out);
    return QS_EXIT_OK;
}
