/* qc_config: the generic reader of qsweep's YAML configuration files (grids), split from what
 * any one grid kind means (grid_kind.h). It knows YAML, environment expansion, command-line
 * overrides and error locations; nothing about models, formats or jobs.
 *
 * Reading a file (qc_config_load):
 *   - the file must be UTF-8 text (common/utf8.h) with no control characters but tab, LF, CR
 *     (YAML 1.2 section 5.1), at most 4 MiB, one YAML document;
 *   - YAML aliases may expand to at most 100000 nodes, nesting at most 64 levels;
 *   - overrides "dotted.key=value" replace a value (sequence items by index: models.0=...),
 *     "+dotted.key=value" adds a key that is absent (Hydra's override grammar, reduced to
 *     dotted keys and indexes); the value is YAML.
 * Reading values: qc_config_path expands ${VAR}, ${VAR:-default} (the default may hold ${...})
 * and a leading ~, then resolves it against the file's directory (values given with an
 * override: against the current directory).
 *
 * Errors: every qc_config_* call on a reader records its error in the qs_error given to
 * qc_config_load (so a grid kind's parser reads like the schema, one check per line) and
 * returns the status. Messages read "file:line:column: what was expected" for a node of the
 * file, "--set ARG: ..." for a node an override put in place. */
#ifndef QC_CONFIG_H
#define QC_CONFIG_H

#include <libfyaml.h>
#include <stddef.h>

#include "error.h"

/* An open configuration document. Opaque; free with qc_config_free. */
typedef struct qc_config qc_config;

/* Reads the YAML file at path, checks it (UTF-8, one document, alias budget) and applies the
 * n_sets overrides in order. err must outlive the reader: later calls record errors in it.
 * Errors: QS_ENOTFOUND / QS_EIO (open, read), QS_EINVAL (file over 4 MiB, aliases past the
 * budget, a bad override: "+key" for a key that exists, a key that does not without '+', an
 * index outside a list, a value that is not YAML), QS_EFORMAT (not UTF-8 text, YAML syntax,
 * a second document, an unknown anchor), QS_ENOMEM. On error *out is NULL. */
qs_status qc_config_load(const char *path, const char *const *sets, size_t n_sets, qc_config **out,
                         qs_error *err);

/* Frees the reader and its document (every node pointer and scalar from it). NULL is allowed. */
void qc_config_free(qc_config *c);

/* The file name as given to qc_config_load, and its root node (NULL for an empty document). */
const char *qc_config_file(const qc_config *c);
struct fy_node *qc_config_root(const qc_config *c);

/* The document after overrides as YAML text (for the experiment record); caller frees.
 * NULL when out of memory. */
char *qc_config_emit(const qc_config *c);

/* Records "file:line:column: message" for node n (or "--set ARG: message" when n comes from
 * an override; an empty value is located at its key) and returns code. n may be NULL (the
 * message then names the file with line and column 0). */
qs_status qc_config_fail(qc_config *c, struct fy_node *n, qs_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Records code and a message without a location (out of memory, internal) and returns code. */
qs_status qc_config_error(qc_config *c, qs_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* 1 + the index of the override node n came from (n or an ancestor is its value, or n is the
 * key it added); 0 when n comes from the file. */
size_t qc_config_from_set(const qc_config *c, struct fy_node *n);

/* The value of key in mapping map; NULL when map is not a mapping or lacks the key. */
struct fy_node *qc_config_lookup(struct fy_node *map, const char *key);

/* The NUL-terminated text of scalar n; NULL when n is NULL or not a scalar. */
const char *qc_config_scalar(struct fy_node *n);

/* Typed values. `what` names the value in the message ("the model path", "dataset.ctx").
 *   string: a non-empty scalar (QS_EFORMAT otherwise); *out borrows the document's text;
 *   int:    a decimal integer in [lo, hi] (QS_EFORMAT otherwise);
 *   number: a finite decimal or exponent number (strtod) in [lo, hi] (QS_EFORMAT otherwise);
 *   bool:   true/false (YAML 1.2 core schema) (QS_EFORMAT otherwise). */
qs_status qc_config_string(qc_config *c, struct fy_node *n, const char *what, const char **out);
qs_status qc_config_int(qc_config *c, struct fy_node *n, const char *what, long lo, long hi,
                        int *out);
qs_status qc_config_number(qc_config *c, struct fy_node *n, const char *what, double lo, double hi,
                           double *out);
qs_status qc_config_bool(qc_config *c, struct fy_node *n, const char *what, int *out);

/* Every key of mapping n must be one of the NULL-terminated allowed; QS_EINVAL at the first
 * other key, listing the allowed ones. `what` names the mapping ("the dataset"). */
qs_status qc_config_check_keys(qc_config *c, struct fy_node *n, const char *what,
                               const char *const *allowed);

/* A value that may be one scalar or a non-empty sequence: calls fn on each scalar item (a
 * mapping item too: fn decides). QS_EFORMAT for an empty list or a mapping given as the value;
 * else the first status fn returns. */
typedef qs_status (*qc_config_item_fn)(qc_config *c, struct fy_node *n, void *ctx);
qs_status qc_config_each(qc_config *c, struct fy_node *n, const char *what, qc_config_item_fn fn,
                         void *ctx);

/* Expands ${VAR}, ${VAR:-default} and a leading ~ in text. Returns a new string (caller frees)
 * or NULL: out of memory, or a variable unset without a default, or an unterminated ${ (then
 * bad receives the reason). Exposed for values that are not paths. */
char *qc_config_expand(const char *text, char *bad, size_t bad_len);

/* The path in scalar n, expanded (qc_config_expand), made absolute against the file's
 * directory (or the current directory for an override) and resolved with realpath.
 * *out is a new string (caller frees). what names it ("model file"). Errors: QS_EFORMAT
 * (not a non-empty string), QS_EINVAL (expansion), QS_ENOTFOUND (no such file), QS_EIO. */
qs_status qc_config_path(qc_config *c, struct fy_node *n, const char *what, char **out);

/* Refuses (QS_EINVAL at the scalar) a key or value anywhere under n holding NUL or a control
 * character (C0, DEL, C1): a name cut at a NUL, or a newline in a name, is not what the file
 * shows. free_text (may be NULL) is one node where tab and newline are allowed. */
qs_status qc_config_check_text(qc_config *c, struct fy_node *n, struct fy_node *free_text);

#endif
