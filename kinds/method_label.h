/* Method labels: the names under which a user reads and writes a method with its options
 * (the columns of `qsweep results` and of the report, a plan's candidates and `--methods`,
 * per-linear's linears; docs/methods.md), from a method and its canonical options (method.h)
 * and back. */
#ifndef QS_KINDS_METHOD_LABEL_H
#define QS_KINDS_METHOD_LABEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "method.h"

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

/* Whether canonical setting label text[0, len) (qs_method_setting_label_canonical) names setting
 * s: the same label (qs_method_label), and every "+<option>=<value>" and per-linear
 * "+<block>.<kind>=<method label>" it spells out equal to s's own, written as labels write
 * them. So "gptq+damp=0.01" names the setting whose label, measured in that one setting, is
 * "gptq" when its damp is 0.01, and "gptq" names every gptq setting. */
bool qs_method_setting_named(const char *text, size_t len, const qs_method_setting *s);

#endif
