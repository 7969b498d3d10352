/* Experiment grids: a YAML file read by the generic reader (config.h), whose `kind` picks a
 * grid kind from the registry (grid_kind.h) that checks its schema and expands it into jobs
 * (docs/architecture.md "Data flow of a job").
 *
 * Every grid has `name`, optional `description`, `kind` (default sensitivity), `priority`,
 * `max_attempts` and `resources` (what each job needs of a worker; the scheduler matches it;
 * every key optional, none: any worker, CPU-only ones included):
 *   resources:
 *     gpu_count: 1          # GPUs per job, 0 (default): none needed
 *     tensor_parallel: 2    # the same as gpu_count (the forward's tensor-parallel degree);
 *                           # both given: they must agree
 *     gpu_memory_mib: 81920 # per GPU; default: computed from the model (kinds/resources.h)
 *     gemm: native_fp4      # native_fp4 (needs compute capability >= 10.0: Blackwell) |
 *                           # emulated (BF16 emulation even on Blackwell) | any (default)
 *     native_fp4: true      # the same as gemm: native_fp4
 * A job that asks for GPUs (gpu_count or tensor_parallel >= 1, or native FP4) gets its GPU
 * memory per GPU computed by its kind (kinds/resources.h) unless gpu_memory_mib is given.
 * The rest is the kind's (kind: training, grid_training.c; kind: pipeline, grid_pipeline.c:
 * stages of those two, a sweep naming the models a training stage trains). A
 * sensitivity grid (every key but `name`, `models`, `dataset` and `sensitivity.formats` is
 * optional; `formats` too when the only mode is policy):
 *
 *   name: smollm2-fp4-components          # experiment name
 *   description: free text
 *   kind: sensitivity
 *   models:                               # each: a path string, or a mapping
 *     - ${XDG_CACHE_HOME:-~/.cache}/qsweep/models/smollm2.gguf   # HF directory or .gguf file
 *     - {path: ../ckpt/tiny, name: tiny}
 *     - {synthetic: llama2-7b, seed: 1}   # named Llama shape, random weights from the seed
 *   dataset: {tokens: ../data/wiki.tokens, ctx: 256, max_chunks: 16}   # max_chunks 0: all
 *            # or {text: ../data/wiki.txt, ...}: UTF-8, tokenized by each model's tokenizer
 *   sensitivity:
 *     formats: [nvfp4, {name: mxfp4, options: {scale_rule: floor}}]
 *     quantize: [weights, weights+activations]     # W4A16, W4A4; default [weights]
 *     modes: [component, block]   # component | block | layer | cumulative | leave_one_out
 *                                 # | leave_one_out_block | leave_one_out_layer | policy
 *     policy: {"0.q": nvfp4, "3.down": bf16}   # mode policy: a format per linear (names.h)
 *     parts: [q, k, v, o, gate, up, down, lm_head, embeddings]   # of component and
 *                                 # leave_one_out modes; default the seven block linears
 *     metrics: [ppl, kl, top1, sqnr]              # default: all four
 *   priority: 0                   # higher runs first
 *   max_attempts: 3
 *
 * Relative paths are relative to the grid file's directory (paths given with --set: to the
 * current directory); ${VAR}, ${VAR:-default} and a leading ~ are expanded. Overrides given as
 * "dotted.key=value" (Hydra style: sequence items by index, "+key=value" adds a key that is absent,
 * the value is YAML) are applied before validation. Every error names file:line:column (or the
 * --set argument) and what was expected. */
#ifndef QC_GRID_H
#define QC_GRID_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "names.h"
#include "resources.h"
#include "spec.h"

/* Version of the numerics a job's results depend on: the job kinds' (kinds/spec.h). */
#define QC_NUMERICS_VERSION QS_NUMERICS_VERSION

struct qc_grid_kind;

/* Facts about one model that validation and expansion need. */
typedef struct qc_model_facts {
    int n_layers;                /* transformer blocks */
    int vocab_size;              /* token ids must be < vocab_size */
    int max_position_embeddings; /* longest context it was trained for, in tokens (config.json
                                    max_position_embeddings, GGUF llama.context_length); 0 when
                                    the model does not say: dataset.ctx must not exceed it */
    char digest[65];             /* BLAKE2b-256 hex of the model's files (qw_checkpoint_digest) */
    int tied_embeddings;         /* 1: lm_head shares the embedding matrix (config.json
                                    tie_word_embeddings, GGUF without output.weight) */
    qs_model_shape shape;        /* what sizes its tensors (kinds/resources.h); all 0 when the
                                    probe does not say (then no GPU memory is computed) */
    int64_t stored_bytes;        /* every tensor in its stored dtype (lm_head once when tied),
                                    from the checkpoint's headers; 0 for a synthetic model */
    int master_bytes;            /* device bytes per element of its block linears' masters on
                                    the CUDA auto path (2: BF16/F16, 4: FP32-valued); 0: not
                                    known (counted as 2) */
    long long n_params;          /* parameters (embeddings, linears, norms, lm_head unless
                                    tied); 0 when the reader does not say */
} qc_model_facts;

/* Facts about one token file. */
typedef struct qc_dataset_facts {
    char digest[65]; /* BLAKE2b-256 hex of the whole file (qw_tokens) */
    size_t n_tokens;
    uint32_t max_token; /* largest token id in the file */
    uint32_t
        vocab_size; /* the header's vocab_size: must not exceed a model's (the worker's rule) */
} qc_dataset_facts;

/* How the grid reads models, token files and format names. The grid module knows no model
 * or kernel code (dependencies point down: docs/architecture.md); `qsweep` passes the engine's readers
 * (worker/jobs/probe.h). Each function returns QS_OK or fills err (its message names the
 * path) and returns the failure; format_known returns 1 when the numeric core knows name. */
typedef struct qc_grid_probe {
    qs_status (*model)(void *user, const char *path, qc_model_facts *out, qs_error *err);
    qs_status (*dataset)(void *user, const char *path, qc_dataset_facts *out, qs_error *err);
    int (*format_known)(void *user, const char *name);
    /* Checks one option of a known format (key and its value as text): QS_ENOTFOUND when the
     * option does not apply to the format, QS_EINVAL for a bad value; the message names what
     * would be accepted. The numeric core's parser (kernels/quant.h qk_quant_option_set), so
     * the grid and the worker accept exactly the same names. */
    qs_status (*format_option)(void *user, const char *format, const char *key, const char *value,
                               qs_error *err);
    void *user;
    /* Facts of the synthetic (random-weight) model of a named Llama shape built from seed
     * (the engine's shape table): n_layers, vocab_size, max_position_embeddings and
     * tied_embeddings; the grid fills the digest (kinds/spec.h qs_synthetic_model).
     * QS_ENOTFOUND when the shape is unknown, with a message listing the known ones. NULL:
     * synthetic models are refused (QS_EUNSUPPORTED). */
    qs_status (*synthetic)(void *user, const char *shape, qc_model_facts *out, qs_error *err);
    /* Whether the token file at tokens_path was made by the tokenizer of the model at
     * model_path (a file, not a synthetic model): QS_EINVAL naming the token file and both
     * tokenizers when not. NULL: not checked (the vocabulary rules are all there is). */
    qs_status (*tokens_match_model)(void *user, const char *tokens_path, const char *model_path,
                                    qs_error *err);
    /* A text dataset (`dataset: {text: FILE}`) for the model at model_path: the
     * text's ids by that model's own tokenizer (worker/tokenizer qw_text_dataset: tokenized
     * once per tokenizer and text, then cached), their facts in *out (digest: that of the
     * token file, covering ids and tokenizer), and in *bos_id the id each chunk starts with
     * when the tokenizer adds BOS, else -1. Errors: QS_EINVAL (invalid UTF-8: names the file
     * and the byte offset), QS_ENOTFOUND (no such text, a model without a tokenizer), the
     * tokenizer's. NULL: text datasets are refused (QS_EUNSUPPORTED). */
    qs_status (*text_dataset)(void *user, const char *model_path, const char *text_path,
                              qc_dataset_facts *out, int *bos_id, qs_error *err);
} qc_grid_probe;

/* One model of the grid. */
typedef struct qc_grid_model {
    char *name; /* label: the `name` key, else the file name, else "synthetic:<shape>" */
    char *path; /* absolute path, or "synthetic:<shape>:<seed>" */
    qc_model_facts facts;
    qc_dataset_facts dataset; /* the dataset as this model reads it: with a text dataset its
                                 ids by this model's tokenizer, else the grid's token file */
    int bos_id;               /* -1: chunks as they are; else each chunk starts with this id
                                 (a text dataset whose tokenizer adds BOS) */
    char trained_by[65];      /* job_key of the pipeline training job that makes it ("" for a
                                 model that exists): path is checkpoint_dir/<that key>, the
                                 digest its stand-in (kinds/spec.h qs_trained_model_digest),
                                 and facts come from the training stage's shape */
    size_t train_stage;       /* with trained_by: the pipeline stage that trains it, and */
    size_t train_job;         /* the job's index among that stage's jobs (grid_pipeline.c) */
    char *ref_path;           /* `compare_to`: the reference model (absolute path; NULL: none):
                                 the model gets one compare job against this model's baseline
                                 and is not swept (kinds/sensitivity.h reference_model) */
    char *ref_name;           /* its label: the file name */
    qc_model_facts ref_facts;
} qc_grid_model;

/* One format of the sweep. options: canonical JSON object (sorted keys, every option that
 * applies to the format with its default filled in), so equal settings give equal keys. */
typedef struct qc_grid_format {
    char *name;
    char *options_json;
} qc_grid_format;

/* A parsed, validated grid. Arrays are owned; free with qc_grid_free. The fields from
 * `models` to `metrics_json` are those of the sensitivity kind (grid_sensitivity.c) and the
 * sections it shares with other kinds (models and dataset: grid_kind.h); a kind with a schema
 * of its own keeps it in kind_data. */
typedef struct qc_grid {
    char *file; /* the grid file as given */
    char *name, *description;
    char *source; /* the grid as YAML after overrides, for the experiment record */
    qc_grid_model *models;
    size_t n_models;
    char *dataset_path; /* absolute: the token file, or the text file when dataset_text */
    int dataset_text;   /* 1: `dataset: {text: FILE}`, tokenized per model (qc_grid_model) */
    int ctx;            /* tokens per chunk, >= 3 (at least one scored position per chunk) */
    int max_chunks;     /* 0: every whole chunk of the file */
    qc_dataset_facts dataset;
    qc_grid_format *formats;
    size_t n_formats;
    int quantize_acts[2]; /* quantize modes in grid order: 0 = weights, 1 = weights+activations */
    size_t n_quantize;
    qs_mode modes[QS_MODE_COUNT];
    size_t n_modes;
    int parts[9]; /* parts of component and leave_one_out modes, in grid order (kinds/
                     sensitivity.h part indexes); default the seven block linears */
    size_t n_parts;
    char *metrics_json; /* canonical JSON array of metric names, sorted */
    int priority;
    int max_attempts;       /* >= 1 */
    qs_resources resources; /* the optional `resources` key: what every job of the grid needs
                               of a worker (kinds/spec.h); recorded in each spec, not keyed */
    char *numerics; /* the optional `numerics` key: the path every job runs on ("cpu", "cuda",
                       a path such as "cpu-qsweep-fixed2", or "any"); recorded in each spec as
                       "numerics" and keyed (except "any": kinds/spec.h); NULL: none */
    const struct qc_grid_kind *kind; /* the grid kind that parsed it (grid_kind.h) */
    void *kind_data; /* what a grid kind parsed beyond the fields above (sensitivity: the map
                        of mode policy); freed by its kind */
} qc_grid;

/* Parses grid file `path`, applies the n_sets overrides ("a.b=value", "+a.c=value"), checks
 * every key and value, and probes every model and the dataset through probe. Nothing is
 * queued here: a grid that loads is one that can be submitted.
 * Errors (message "file:line:column: ..." or "--set ARG: ..."):
 *   QS_EFORMAT    YAML syntax error; a second YAML document; a key of the wrong type or value
 *                 (names what was expected);
 *   QS_EINVAL     a bad --set argument ("+key" for a key that exists), an unknown key, an
 *                 unknown format/mode/metric/option, dataset tokens >= a model's vocabulary or
 *                 a token file header's vocab_size > a model's, dataset.ctx > a model's
 *                 max_position_embeddings, YAML aliases expanding past 100000 nodes (names the
 *                 alias), a control character in a string (tab and newline only in the
 *                 description);
 *   QS_ENOTFOUND  a model or token file that does not exist;
 *   QS_EIO and the probe's errors, wrapped with the location of the path in the grid;
 *   QS_ENOMEM.
 * On success *out is a new grid (free with qc_grid_free); on error *out is NULL. */
qs_status qc_grid_load(const char *path, const char *const *sets, size_t n_sets,
                       const qc_grid_probe *probe, qc_grid **out, qs_error *err);

/* Frees a grid. NULL is allowed. */
void qc_grid_free(qc_grid *g);

/* Most jobs one job of a grid depends on: a pipeline's eval job needs its baseline and the
 * training job that makes its model. */
#define QC_JOB_DEPS_MAX 4

/* One job of an expanded grid. */
typedef struct qc_job {
    char key[65];     /* job_key: BLAKE2b-256 hex of the spec without its path fields */
    char *spec;       /* canonical spec, JSON, sorted keys, compact (see qc_grid_expand) */
    const char *kind; /* "baseline" or "eval": the job kind in the worker's registry */
    long deps[QC_JOB_DEPS_MAX]; /* indexes (in the list, all earlier) of the jobs this one
                                   needs done first: an eval job's baseline, then in a pipeline
                                   the training job of its model */
    size_t n_deps;
    char stage[32]; /* the pipeline stage that made it (grid_pipeline.c); "" outside one */
    size_t model;   /* index of its model in the grid's models (0 for a kind without) */
    char model_key[QS_AFFINITY_KEY_MAX]; /* affinity key of the spec's model.digest
                                            (qs_affinity_key); "" when the spec names none */
    int mode;         /* the qs_mode of an eval job (kinds/names.h); -1 for other jobs */
    char *label;      /* short human label: "<model> <format> <quantize> <mode> <part>" */
    qs_job_need need; /* what it needs of a worker (kinds/resources.h; qc_grid_expand) */
} qc_job;

/* Jobs in submission order: every job precedes the jobs that depend on it. */
typedef struct qc_job_list {
    qc_job *jobs;
    size_t n;
} qc_job_list;

/* Expands g into jobs through its grid kind (grid_kind.h). The sensitivity kind: per model,
 * one baseline job (kind "baseline": the BF16 model's reference log-probabilities on the
 * dataset), then for every format x quantize x mode x part one "eval" job that depends on it,
 * each spec the canonical JSON of a kinds/sensitivity.h spec (the fields and their rules are
 * there; schema/ views read them):
 *   {"kind", "model": {"path", "digest"}, "dataset": {"path", "digest", "ctx", "max_chunks"},
 *    "format", "format_options", "quantize": "weights"|"weights+activations",
 *    "mode", "part", "metrics", "numerics_version"}
 * part: component and leave_one_out: the part ("down", "lm_head"); block, leave_one_out_block
 * and cumulative: the block index as a string ("3"; cumulative "3" = blocks 0..3); layer and
 * leave_one_out_layer: "<block>.<kind>" ("3.down"). Mode policy: one eval job per model and
 * quantize, the grid's `policy` map in the spec (kinds/sensitivity.h), part the map's id.
 * Keys are distinct by construction: qc_grid_load refuses a model listed twice (equal digests)
 * and a repeated format, quantize, mode or part, and every other field differs between jobs.
 * Each job's need (what it asks of a worker) is its kind's (kinds/resources.h
 * qs_job_resources) over its model's facts.
 * Errors: QS_ENOMEM, the kind's, qs_job_resources's (naming the job). */
qs_status qc_grid_expand(const qc_grid *g, qc_job_list *out, qs_error *err);

/* A pipeline grid's stages (grid_pipeline.c), in the order they run: their number (0 for
 * any other grid), and stage i's name with its kind's name in *kind (may be NULL); NULL when
 * i is out of range. */
size_t qc_grid_pipeline_stages(const qc_grid *g);
const char *qc_grid_pipeline_stage(const qc_grid *g, size_t i, const char **kind);

/* Frees the jobs of a list and zeroes it. NULL is allowed. */
void qc_job_list_free(qc_job_list *list);

/* job_key of a spec given as JSON text (kinds/spec.h qs_spec_key_text: BLAKE2b-256 of the
 * canonical text without "model.path", "dataset.path" and "resources"). hex receives 64
 * lowercase hex digits and a NUL. Errors: QS_EFORMAT (spec is not a JSON object), QS_ENOMEM. */
qs_status qc_job_key(const char *spec_json, char hex[65], qs_error *err);

/* Sets job j's spec "numerics" (a grid's `numerics` key) and its job_key to match. Errors:
 * QS_ENOMEM, those of qs_spec_key. */
qs_status qc_job_set_numerics(qc_job *j, const char *numerics, qs_error *err);

#endif
