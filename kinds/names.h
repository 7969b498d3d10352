/* The names a sensitivity sweep uses, in one place: linear kinds, the parts
 * beyond the blocks, isolation modes, what is quantized, metrics. The grid (coordinator/grid),
 * the job specs (sensitivity.h) and the worker's job kinds (worker/jobs) all read them here,
 * so a name means the same on both sides of the wire.
 *
 * Modes ("Diagnosing FP4 Inference", arXiv 2603.08747, and docs/numerics.md section 5):
 *   component             one linear kind (or lm_head, embeddings) in every block    part "down"
 *   block                 every linear of one block                                  part "3"
 *   layer                 one linear of one block                                    part "3.down"
 *   leave_one_out         every linear but one kind                                  part "down"
 *   leave_one_out_block   every linear but those of one block                        part "3"
 *   leave_one_out_layer   every linear but one linear of one block                   part "3.down"
 *   cumulative            every linear of blocks 0..b                                part "3"
 *   policy                an explicit format per linear (a mixed-precision plan     part: the
 *                         measured whole; sensitivity.h "policy")                     map's id
 * "leave_one_out" is the component form (the name grids and stored specs
 * use); "leave_one_out_component" is accepted in grids as its alias. */
#ifndef QS_KINDS_NAMES_H
#define QS_KINDS_NAMES_H

#include <stddef.h>

/* The seven linears of a Llama block, in Hugging Face module order (q_proj ... down_proj). */
#define QS_LINEAR_KINDS 7
extern const char *const qs_linear_kind_names[QS_LINEAR_KINDS];   /* "q", ..., "down" */
extern const char *const qs_linear_module_names[QS_LINEAR_KINDS]; /* "self_attn.q_proj", ... */

/* Index of linear kind name ("q".."down", or the HF "q_proj".."down_proj"), -1 if none. */
int qs_linear_kind_index(const char *name);

/* Reads a block linear's key "<block>.<kind>" (block in decimal without leading zeros, at most
 * 1000000; kind a short name, "down" not "down_proj": one spelling, one key) into *block and
 * *kind. Returns 0, or -1 (both -1) when key is not one. */
int qs_block_linear_parse(const char *key, int *block, int *kind);

/* Parts outside the blocks that a component-wise sweep can name. lm_head is the output
 * projection; with tied embeddings its quantized form is a copy of its own, so quantizing
 * lm_head of a tied model quantizes the head copy only (the input embeddings stay as they
 * are), and the job spec says so (sensitivity.h, "tied"). */
#define QS_PART_LM_HEAD_NAME "lm_head"
#define QS_PART_EMBEDDINGS_NAME "embeddings"

/* Isolation modes. The numbers of the first five are stable (grid order, dry-run counts). */
typedef enum qs_mode {
    QS_MODE_COMPONENT = 0,
    QS_MODE_BLOCK = 1,
    QS_MODE_LAYER = 2,
    QS_MODE_LEAVE_ONE_OUT = 3, /* component form */
    QS_MODE_CUMULATIVE = 4,
    QS_MODE_LEAVE_ONE_OUT_BLOCK = 5,
    QS_MODE_LEAVE_ONE_OUT_LAYER = 6,
    QS_MODE_POLICY = 7, /* names neither a block nor a kind: its spec holds the whole map */
    QS_MODE_COUNT = 8,
} qs_mode;

/* Canonical name of m ("component", ...); "?" when out of range. */
const char *qs_mode_name(qs_mode m);

/* The mode named name (canonical names, and "leave_one_out_component"); -1 if none. */
int qs_mode_by_name(const char *name);

/* What a mode's part names: a kind ("down"), a block ("3") or both ("3.down"). */
int qs_mode_has_block(qs_mode m);
int qs_mode_has_kind(qs_mode m);

/* The comma-separated list of canonical mode names, for messages. */
const char *qs_mode_list(void);

/* What is quantized: "weights" (W4A16) or "weights+activations" (W4A4); the grid also takes
 * the aliases w4a16 and w4a4 (any case). Returns 0 (weights), 1 (weights+activations), -1. */
int qs_quantize_by_name(const char *name);
const char *qs_quantize_name(int acts); /* "weights" or "weights+activations" */

/* Metrics an eval job can report, sorted by name (the order of a spec's "metrics" array). */
#define QS_METRICS 4
extern const char *const qs_metric_names[QS_METRICS]; /* "kl", "ppl", "sqnr", "top1" */
enum { QS_METRIC_KL = 1, QS_METRIC_PPL = 2, QS_METRIC_SQNR = 4, QS_METRIC_TOP1 = 8 };

/* Bit of metric name (QS_METRIC_*), 0 if unknown. */
unsigned qs_metric_bit(const char *name);

#endif
