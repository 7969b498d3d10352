/* Quantization methods: how the linears a sensitivity job quantizes are quantized (the grid's
 * `method` axis, docs/methods.md). One row per method, as formats are one row per format; the
 * worker's method modules (worker/method) read the row's properties, never the name.
 *
 * A job's spec names its method only when it is not "rtn" (round-to-nearest, what every job
 * did before methods existed), so the specs and job keys of earlier grids are unchanged:
 *   "method": name,
 *   "method_options": {...}    the method's options, every one with its default filled in
 *                              (absent for a method without options);
 *   "calibration": {"chunks": n, "path": token file, "digest": its BLAKE2b}
 *                              for a method that needs calibration activations: the LAST n
 *                              whole chunks (at the dataset's ctx) of that token file, which
 *                              the evaluation never scores (the grid checks it when the file is
 *                              the scored one).
 * A method other than rtn does not combine with "fuse" (sensitivity.h): each linear it makes
 * takes its own per-tensor scale.
 *
 * "per-linear" is no method of its own: a mixed plan (`qsweep plan`, docs/plan.md) measured
 * whole, where each linear of the policy has its method. Its options are
 *   {"act_order", "damp", "alpha": the GPTQ and SmoothQuant options of its linears,
 *    "linears": {"<block>.<kind>": method label}}  the linears of the policy not quantized by
 *                                                  rtn (rtn and per-linear are refused there);
 * it always takes calibration, which its calibrated linears read. Its "scale_search": true
 * searches the scales of every mr-gptq linear; canonically a map holds "mr-gptq+search" only
 * beside a plain "mr-gptq", and when every mr-gptq linear searches it holds "mr-gptq" and
 * scale_search true (the form plans wrote before labels, whose keys stay). */
#ifndef QS_KINDS_METHOD_H
#define QS_KINDS_METHOD_H

#include <jansson.h>
#include <stdbool.h>

#include "error.h"
#include "names.h"

/* The rotation a method applies along K to a linear's weight and input. */
enum {
    QS_ROTATE_NONE = 0,
    QS_ROTATE_GROUP = -1, /* tiles of the weight format's own block size */
    QS_ROTATE_FULL = -2,  /* one tile over all of K (K a power of two) */
};

typedef struct qs_method {
    const char *name;
    bool calibrated; /* needs calibration activations */
    int rotate;      /* QS_ROTATE_* or a tile size (16, 32, 128) */
    bool gptq;       /* GPTQ on the (rotated) weight; options act_order, damp */
    bool smooth;     /* SmoothQuant channel scales; option alpha */
    bool per_linear; /* the methods are in the options, one per linear (gptq, smooth set: its
                        options hold theirs) */
} qs_method;

/* Index 0 is "rtn". */
#define QS_METHOD_RTN 0

/* Number of methods and the i-th (0 <= i < qs_method_count(); NULL outside), in table order. */
int qs_method_count(void);
const qs_method *qs_method_at(int i);
/* Index of a name, -1 when unknown. */
int qs_method_by_name(const char *name);
/* "rtn, gptq, ..." for error messages. */
const char *qs_method_list(void);

/* Whether method m has MR-GPTQ's scale search (its option scale_search): mr-gptq. */
bool qs_method_scale_search(const qs_method *m);

/* The canonical options object of method i from `given` (an object or NULL): gptq and mr-gptq
 * {"act_order": false, "damp": 0.01}, smoothquant {"alpha": 0.5}, per-linear all three and
 * "linears" (default {}); NULL (no options) for the others. *out is a new reference or NULL.
 * Errors: QS_EINVAL naming the option (unknown key, wrong type, alpha outside [0, 1], damp
 * outside (0, 1), a linears key that is not "<block>.<kind>", a label there that is unknown,
 * rtn or per-linear), QS_ENOMEM. */
qs_status qs_method_options(int i, const json_t *given, json_t **out, qs_error *err);

/* Whether a sensitivity job of mode quantizes linear ("<block>.<kind>"): its block and part
 * (-1 when the mode names none), loo_of its leave-one-out set of parts and policy its map in
 * policy mode, as a job spec holds them (sensitivity.h). A per-linear linear must be one its job
 * quantizes: a job applies no method to a linear it leaves unquantized, so one listed there would
 * go unused unseen. 0 for a key that is not a block linear. */
bool qs_method_linear_quantized(const char *linear, qs_mode mode, int block, int part,
                                unsigned loo_of, const json_t *policy);

#endif
