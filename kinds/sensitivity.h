/* The sensitivity job kinds: "baseline" (the unquantized model's
 * reference log-probabilities on a dataset) and "eval" (one quantization policy measured
 * against that baseline). One typed spec serves both; the coordinator's grid expansion
 * encodes it and the worker's job kinds decode it (worker/jobs), so the two sides cannot
 * disagree on a field.
 *
 * Canonical JSON (spec.h for the shared parts), keys sorted:
 *   {"dataset", "format", "format_options", "kind", "metrics", "mode", "model",
 *    "numerics_version", "part", "quantize"}
 *   plus, only when they apply (so the specs and keys of earlier grids are unchanged):
 *   "leave_one_out_of": [part, ...]  leave_one_out over parts other than the seven block
 *                                     linears (block order, then lm_head, embeddings);
 *   "tied_embeddings": "head_copy_only" | "embeddings_copy_only" | "both_copies"
 *                                     the model ties lm_head to the embeddings and the job
 *                                     quantizes lm_head and/or the embeddings: each is
 *                                     quantized as a copy of its own, so quantizing lm_head
 *                                     of a tied model quantizes the head copy only;
 *   "fuse": ["gate_up", "qkv"]       eval: the fused groups whose members share one
 *                                     per-tensor scale (the joint amax of their weights) in
 *                                     the formats that have one; absent when none;
 *   "method", "method_options", "calibration"
 *                                    eval: how the quantized linears are quantized, when not
 *                                     by round-to-nearest (method.h); absent for rtn;
 *   "reference_model": {"path", "digest"}
 *                                    eval, a compare job: the model's KL and top-1 are
 *                                     measured against this model's baseline (the job's
 *                                     baseline is this model's), and the job quantizes
 *                                     nothing: mode policy with the empty map, quantize
 *                                     "weights", rtn, no fuse. The scored model is a checkpoint
 *                                     stored quantized (an FP4 checkpoint, read dequantized),
 *                                     the reference its parent. Its path is not part of the
 *                                     job key; absent in every other job;
 *   "sqnr_rows": N                   eval with metric sqnr: the SQNR probe measures the last N
 *                                     rows of each linear call only (the reference GEMM on N
 *                                     rows, not every row); absent: every row;
 *   "resources": {...}               spec.h (not part of the job key).
 * baseline: format "bf16", format_options {}, quantize/mode/part null, metrics ["ppl"].
 * eval: format a numeric-core name (kernels/quant.h) with its canonical options object (every
 *   option that applies, defaults filled in: the grid's job); quantize "weights" or
 *   "weights+activations"; mode and part as names.h gives them; metrics a sorted non-empty
 *   array of names.h's metric names.
 * policy mode (a mixed-precision plan measured whole): "format" "policy",
 *   "policy" {"<block>.<kind>" | "lm_head" | "embeddings": format name} the linears the job
 *   quantizes, each in its format; every linear not in the map stays as it is (the
 *   unquantized reference: a "bf16" entry means that, and is dropped from the map, so a map
 *   and the same map with its bf16 linears listed are one job); "format_options" {format
 *   name: its canonical options object} for exactly the formats of the map; "part" the
 *   policy id (qs_sensitivity_policy_id).
 * With "weights+activations" the embeddings (a lookup, not a GEMM: no activation input) get
 * their weight format only. */
#ifndef QS_KINDS_SENSITIVITY_H
#define QS_KINDS_SENSITIVITY_H

#include <jansson.h>
#include <stdbool.h>

#include "error.h"
#include "method.h"
#include "names.h"
#include "spec.h"

/* Part indexes beyond the seven linear kinds (0..6). */
enum { QS_PART_LM_HEAD = 7, QS_PART_EMBEDDINGS = 8, QS_PARTS = 9 };
/* Bit set of parts (1 << part): the default universe of leave_one_out, the block linears. */
#define QS_PARTS_BLOCK_LINEARS 0x7fu

/* Name of part index p ("q".."down", "lm_head", "embeddings"), "?" if out of range; index of a
 * name, -1 if none. */
const char *qs_part_name(int p);
int qs_part_by_name(const char *name);

/* A baseline or eval job. Strings and format_options are owned (qs_sensitivity_clear). */
typedef struct qs_sensitivity_spec {
    bool eval; /* false: "baseline", true: "eval" */
    qs_model_ref model;
    qs_model_ref reference; /* eval: a compare job's reference model (path NULL: none) */
    qs_dataset_ref dataset;
    char *format;           /* numeric-core format name; "bf16" for a baseline */
    json_t *format_options; /* object; {} for a baseline */
    int quantize_acts;      /* eval: 0 "weights" (W4A16), 1 "weights+activations" (W4A4) */
    qs_mode mode;           /* eval */
    int block;              /* eval: the block the part names, -1 when the mode names none */
    int part;               /* eval: the kind or part index (0..8) the part names, -1 none */
    unsigned loo_of;        /* eval, leave_one_out: parts the job quantizes but one (bit set);
                               QS_PARTS_BLOCK_LINEARS unless the grid listed lm_head or
                               embeddings */
    bool tied;              /* the model ties lm_head to its embeddings */
    json_t *policy;         /* policy mode: {"3.down": "nvfp4", ...} (owned), else NULL */
    unsigned fuse;          /* eval: QS_FUSE_* bits, the fused groups sharing a tensor scale */
    unsigned metrics;       /* QS_METRIC_* bits; a baseline has QS_METRIC_PPL */
    int sqnr_rows;          /* eval with QS_METRIC_SQNR: > 0 the probe's rows per linear call
                               (the last ones); 0 every row, the default */
    int method;             /* eval: index in method.h's table; QS_METHOD_RTN (0) by default */
    json_t *method_options; /* the method's canonical options (owned), NULL when it has none */
    int calib_chunks;       /* a calibrated method: the last calib_chunks whole chunks ... */
    char *calib_path;       /* ... of this token file (owned) ... */
    char calib_digest[65];  /* ... whose BLAKE2b this is; 0 / NULL / "" otherwise */
    char numerics_version[16];
    qs_resources resources;
} qs_sensitivity_spec;

/* Fused groups (the grid key sensitivity.fuse, the spec's "fuse"): the linears of a block that
 * a serving engine runs as one GEMM and quantizes with one per-tensor scale. Names "qkv" and
 * "gate_up"; the canonical list is sorted by name ("gate_up" before "qkv"). */
enum { QS_FUSE_QKV = 1, QS_FUSE_GATE_UP = 2, QS_FUSE_ALL = 3 };
/* The bit of a group name, 0 when unknown. */
unsigned qs_fuse_bit(const char *name);
/* "gate_up", "qkv", or "gate_up+qkv" for a bit set ("" for 0), for labels and reports. */
const char *qs_fuse_text(unsigned fuse);

/* The format a policy-mode spec has in "format". */
#define QS_POLICY_FORMAT "policy"

/* Reads a policy map key: "<block>.<kind>" (block without leading zeros, kind q..down) into
 * *block and *part (0..6), "lm_head" / "embeddings" into block -1 and their part index.
 * Returns 0, or -1 when key is neither. */
int qs_policy_key_parse(const char *key, int *block, int *part);

/* The id of a policy map: the first 16 hex digits of BLAKE2b-256 (libsodium) of its canonical
 * text (sorted keys, compact), the "part" of its job. id gets 16 digits and a NUL.
 * Errors: QS_EINVAL (not an object), QS_ENOMEM. */
qs_status qs_sensitivity_policy_id(const json_t *map, char id[17], qs_error *err);

/* Checks the fields' consistency: mode vs. block/part (a block mode needs 0 <= block, a kind
 * mode needs a part; lm_head and embeddings only in component and leave_one_out modes), loo_of
 * holding the part, metrics non-empty, format and options present, a baseline holding none of
 * the eval fields. Errors: QS_EINVAL naming the field. */
qs_status qs_sensitivity_validate(const qs_sensitivity_spec *s, qs_error *err);

/* The part's text: "down", "lm_head" (kind modes), "3" (block modes), "3.down" (layer modes),
 * the policy id (policy mode; "" when the map is not an object); "" for a baseline. cap >= 32
 * is always enough. */
void qs_sensitivity_part_text(const qs_sensitivity_spec *s, char *buf, size_t cap);

/* Which of lm_head / embeddings the job quantizes (bits 1 << QS_PART_LM_HEAD, ...). */
unsigned qs_sensitivity_extra_parts(const qs_sensitivity_spec *s);

/* The canonical spec object of s (validated first). *out is a new reference.
 * Errors: those of qs_sensitivity_validate, QS_ENOMEM. */
qs_status qs_sensitivity_encode(const qs_sensitivity_spec *s, json_t **out, qs_error *err);

/* Reads a spec object (as stored, or as a worker receives it) into *out, then validates it.
 * Unknown keys are refused, so a field a newer coordinator adds is not silently ignored.
 * Errors: QS_EINVAL naming the field ("job spec: mode: unknown 'diagonal' (expected ...)"),
 * QS_ENOMEM. On error *out is cleared. */
qs_status qs_sensitivity_decode(const json_t *spec, qs_sensitivity_spec *out, qs_error *err);

/* Frees the owned members and zeroes *s. NULL is allowed. */
void qs_sensitivity_clear(qs_sensitivity_spec *s);

#endif
