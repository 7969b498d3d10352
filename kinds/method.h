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

/* The name under which a user reads and writes method i with its canonical options (the
 * columns of `qsweep results`, a plan's candidates and their --methods, per-linear's linears):
 * the method's name, then "+search" for mr-gptq with scale_search ("mr-gptq+search"). Other
 * options do not enter it. Writes at most cap bytes into out; returns snprintf's count. */
int qs_method_label(int i, const json_t *options, char *out, size_t cap);
/* The method a label names, and in *scale_search whether it adds "+search"; -1 when it names
 * none (an unknown name, "+search" after a method without the scale search). */
int qs_method_by_label(const char *label, bool *scale_search);

/* A setting a sweep measured: a method with its canonical options (NULL when it has none). */
typedef struct qs_method_setting {
    int method;
    const json_t *options;
} qs_method_setting;

/* The label of setting s among the settings of a sweep (all, n of them; s among them or not),
 * which tells two settings of one label apart: qs_method_label, then "+<option>=<value>" for each
 * option (act_order, alpha, damp, in that order) whose value differs between the settings of that
 * label in all ("gptq+damp=0.01" and "gptq+damp=0.1"; a label measured in one setting stays as it
 * is, so job keys and the columns of one-setting sweeps do not change); per-linear then adds
 * "+<block>.<kind>=<method label>" for each linear, in key order, whose method (its map's
 * scale_search folded in) differs from another per-linear setting's. A number is written in
 * the shortest form that reads back as the same double. Writes at most cap bytes into out;
 * returns snprintf's count. */
int qs_method_setting_label(const qs_method_setting *s, const qs_method_setting *all, size_t n,
                            char *out, size_t cap);
/* The method a setting label names: a label (qs_method_by_label), then zero or more
 * "+<option>=<value>" naming options of that method with a value (per-linear's also
 * "+<block>.<kind>=<method label>"); *scale_search as for
 * qs_method_by_label, *label_len the length of the label before the first option. -1 when it
 * names none. */
int qs_method_by_setting_label(const char *text, bool *scale_search, size_t *label_len);

/* Setting label text as the user types it (`qsweep plan --methods`), written into out as
 * qs_method_setting_label writes a measured one, so that the two compare as text: the label,
 * its options in label order, each value read as the grid reads it (true or false, a number)
 * and written in the shortest form ("gptq+damp=0.10" and "gptq+damp=1e-1" read
 * "gptq+damp=0.1"), then per-linear's linears in key order. Errors: QS_EINVAL naming the bad
 * part (an option the method lacks, a value missing, malformed or refused by
 * qs_method_options, an option or linear given twice, a label longer than cap), QS_ENOTFOUND
 * when the text before its first "+<key>=" names no method, QS_ENOMEM. */
qs_status qs_method_setting_label_canonical(const char *text, char *out, size_t cap, qs_error *err);

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
