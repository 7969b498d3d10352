/* The parts every typed job spec shares, and the two keys made from a
 * spec: the job_key (what the job computes) and the model affinity key (which worker should
 * run it). Each job kind (sensitivity.h, and later kinds) builds its spec from these.
 *
 * Canonical JSON: a spec is one JSON object, written with sorted keys and no spaces
 * (jansson JSON_SORT_KEYS | JSON_COMPACT), so equal specs are equal text.
 *   "model":     {"digest": hex, "path": text}
 *                plus "trained_by": the job_key of the `train` job that makes the model, only
 *                for a model a pipeline's training stage trains (coordinator/grid/
 *                grid_pipeline.c): then "path" is checkpoint_dir/<that key> and "digest" the
 *                stand-in qs_trained_model_digest(<that key>), since the weights do not exist
 *                when the grid is submitted; the worker checks the weights it loads against
 *                the digest the training job recorded when it ended (worker/jobs/jobs.c).
 *   "dataset":   {"ctx": int, "digest": hex, "max_chunks": int, "path": text}
 *                plus "bos_id": int, only when each chunk starts with BOS (a text
 *                dataset of a model whose tokenizer adds BOS, as llama.cpp's perplexity does);
 *                a path "text:/abs/file.txt" names a UTF-8 text that the worker tokenizes with
 *                the model's tokenizer (the digest is that of the token file it gives, so it
 *                covers the text and the tokenizer); any other path is a token file.
 *   "resources": {"gpu_count": int, "gpu_memory_mib": int, "native_fp4": bool}   (optional;
 *                plus "gemm": "emulated" when the grid asks for the emulated FP4 GEMMs)
 *   "numerics_version": text
 *   "numerics":  text (optional): the numerics path the job must run on, as a grid's `numerics`
 *                key names it ("cpu", "cuda", a path such as "cpu-qsweep-fixed2", or "any");
 *                the coordinator gives the job only to a worker on that path
 *                (coordinator/server/scheduler.h qc_sched_on_path)
 *
 * job_key = BLAKE2b-256 (libsodium crypto_generichash, 32 bytes, as 64 lowercase hex digits)
 * of the canonical text of the spec after removing "model.path", "dataset.path",
 * "calibration.path" and a compare job's "reference_model.path" (where a file is, not what it
 * is: the digests are identity) and "resources" (where a job may run, not what
 * it computes: the engine's results are bit-identical across backends, docs/architecture.md
 * "Invariants"), and "numerics" when it is "any". A spec with another "numerics" is keyed with
 * it: the same grid point on another path is another job; a spec without "numerics" keeps the
 * key it had before paths were named. */
#ifndef QS_KINDS_SPEC_H
#define QS_KINDS_SPEC_H

#include <jansson.h>
#include <stdbool.h>

#include "error.h"

/* Version of the numerics a job's results depend on (quantizers, engine). Part of every
 * job_key: bump it when a change of the numeric core or the engine changes results, so old
 * results are not reused. 2: the CPU engine's fixed path (fixed-order GEMM and exponential,
 * worker/engine/gemm_cpu.h) is the default. */
#define QS_NUMERICS_VERSION "2"

/* A model as a spec names it. path: absolute path, or "synthetic:<shape>:<seed>". */
typedef struct qs_model_ref {
    char *path;          /* owned */
    char digest[65];     /* BLAKE2b-256 hex of the model's files (qw_checkpoint_digest); for a
                            trained model (trained_by set) the stand-in qs_trained_model_digest */
    char trained_by[65]; /* job_key of the train job that makes the model; "" for a model
                            that exists at submit time */
} qs_model_ref;

/* The stand-in digest a spec gives a model that a pipeline's training stage makes (its
 * weights do not exist at submit time): BLAKE2b-256 of "trained:" + the train job's key, as
 * 64 hex digits. Deterministic, so the sweep's job keys are stable across submissions, and
 * the same for a trained model's baseline and eval jobs (the views pair them by
 * model.digest). Errors: QS_EINVAL (train_key not a 64-digit digest). */
qs_status qs_trained_model_digest(const char *train_key, char digest[65], qs_error *err);

/* A token file (or a text: QS_DATASET_TEXT_PREFIX) and how it is cut into chunks
 * (worker/engine/eval.h). */
typedef struct qs_dataset_ref {
    char *path; /* owned, absolute, or "text:" + an absolute path */
    char digest[65];
    int ctx;         /* tokens per chunk, >= 2 */
    long max_chunks; /* 0: every whole chunk */
    bool bos;        /* each chunk's first token is replaced by bos_id */
    int bos_id;      /* with bos: the model's BOS id, >= 0 */
} qs_dataset_ref;

/* The prefix of a dataset path that names a text file (spec's "dataset.path"). */
#define QS_DATASET_TEXT_PREFIX "text:"

/* The text file of a dataset path "text:/abs/file.txt" ("/abs/file.txt"), NULL for a token
 * file's path. */
const char *qs_dataset_text_path(const char *path);

/* What a job needs of the machine that runs it (the grid fills it in; the scheduler matches
 * it against a worker's HELLO). Recorded in the stored spec, not part of the job key. */
typedef struct qs_resources {
    bool present;        /* false: the spec has no "resources" object (any worker will do) */
    long gpu_memory_mib; /* GPU memory per GPU, MiB; 0: any */
    int gpu_count;       /* GPUs, 0: none needed (CPU is fine) */
    bool native_fp4;     /* needs native FP4 GEMMs (compute capability 10.x) */
    bool gemm_emulated;  /* FP4 GEMMs emulated (dequantize to BF16, BF16 GEMM) even on a GPU
                            with native FP4, to compare the two paths; asks nothing of the
                            worker; exclusive with native_fp4 */
} qs_resources;

/* JSON of the shared parts (new references; NULL when out of memory). */
json_t *qs_model_ref_json(const qs_model_ref *m);
json_t *qs_dataset_ref_json(const qs_dataset_ref *d);
json_t *qs_resources_json(const qs_resources *r);

/* Reads the shared parts from spec object `spec` (key "model", "dataset", "resources").
 * Strings are copied (free with qs_model_ref_clear / qs_dataset_ref_clear). A missing
 * "resources" gives present = false. Errors: QS_EINVAL naming the field ("job spec:
 * dataset.ctx: expected an integer >= 2"), QS_ENOMEM. */
qs_status qs_model_ref_read(const json_t *spec, qs_model_ref *out, qs_error *err);
/* qs_model_ref_read of the model under another key (a compare job's "reference_model"). */
qs_status qs_model_ref_read_key(const json_t *spec, const char *key, qs_model_ref *out,
                                qs_error *err);
qs_status qs_dataset_ref_read(const json_t *spec, qs_dataset_ref *out, qs_error *err);
qs_status qs_resources_read(const json_t *spec, qs_resources *out, qs_error *err);
void qs_model_ref_clear(qs_model_ref *m);
void qs_dataset_ref_clear(qs_dataset_ref *d);

/* Whether text is a 64-digit lowercase hex digest. */
bool qs_is_digest(const char *text);

/* The canonical text of spec object `spec` (sorted keys, compact); caller frees. NULL when out
 * of memory. */
char *qs_spec_canonical(const json_t *spec);

/* job_key of spec object `spec` (see the header comment); spec is left as it was. hex gets 64
 * hex digits and a NUL. Errors: QS_EINVAL (libsodium failed to initialise), QS_ENOMEM. */
qs_status qs_spec_key(const json_t *spec, char hex[65], qs_error *err);

/* job_key of a spec given as JSON text. Errors: QS_EFORMAT (not a JSON object: names line and
 * column), those of qs_spec_key. */
qs_status qs_spec_key_text(const char *spec_json, char hex[65], qs_error *err);

/* The affinity key of a model: "model:<digest>". The coordinator stores it with each job
 * (qc_job_submit.model_key) and a worker caches the loaded model under the same key, so the
 * scheduler sends a model's jobs to the worker that holds it. cap >= 71 (QS_AFFINITY_KEY_MAX);
 * writes the empty string when digest is not a digest. */
#define QS_AFFINITY_KEY_MAX 72
void qs_affinity_key(const char *digest, char *buf, size_t cap);

/* Synthetic models (random weights for a named Llama shape from a seed): the model path is
 * "synthetic:<shape>:<seed>" and the digest BLAKE2b-256 of that text, so the same shape and
 * seed are the same model wherever it is built. Errors: QS_EINVAL (shape empty or holding ':',
 * path buffer too small). */
qs_status qs_synthetic_model(const char *shape, unsigned long seed, char *path, size_t cap,
                             char digest[65], qs_error *err);

/* Whether path names a synthetic model ("synthetic:" prefix). */
bool qs_is_synthetic(const char *path);

#endif
