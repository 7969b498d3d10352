/* The method table (method.h). */
#include "method.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "method_label.h"
#include "names.h"

static const qs_method methods[] = {
    {"rtn", false, QS_ROTATE_NONE, false, false, false},
    {"gptq", true, QS_ROTATE_NONE, true, false, false},
    {"rotate16", false, 16, false, false, false},
    {"rotate32", false, 32, false, false, false},
    {"rotate128", false, 128, false, false, false},
    {"rotate-full", false, QS_ROTATE_FULL, false, false, false},
    {"mr-gptq", true, QS_ROTATE_GROUP, true, false, false},
    {"smoothquant", true, QS_ROTATE_NONE, false, true, false},
    {"per-linear", true, QS_ROTATE_NONE, true, true, true},
};
#define N_METHODS ((int)(sizeof methods / sizeof methods[0]))

int qs_method_count(void) {
    return N_METHODS;
}

const qs_method *qs_method_at(int i) {
    return i >= 0 && i < N_METHODS ? &methods[i] : NULL;
}

int qs_method_by_name(const char *name) {
    for (int i = 0; name && i < N_METHODS; i++)
        if (!strcmp(methods[i].name, name)) return i;
    return -1;
}

const char *qs_method_list(void) {
    return "rtn, gptq, rotate16, rotate32, rotate128, rotate-full, mr-gptq, smoothquant, "
           "per-linear";
}

bool qs_method_scale_search(const qs_method *m) {
    return m->gptq && m->rotate == QS_ROTATE_GROUP && !m->per_linear;
}

/* per-linear's "linears": NULL when it is an object of "<block>.<kind>": a method label other
 * than rtn and per-linear, else what is wrong (written into msg when it names a linear). */
static const char *linears_error(const json_t *v, char *msg, size_t cap) {
    if (!json_is_object(v)) return "expected an object of \"<block>.<kind>\": method";
    const char *k;
    json_t *name;
    json_object_foreach((json_t *)v, k, name) {
        bool search;
        int block, part, i = qs_method_by_label(json_string_value(name), &search);
        if (qs_block_linear_parse(k, &block, &part)) {
            snprintf(msg, cap, "'%s' is not a block linear (\"<block>.<kind>\")", k);
            return msg;
        }
        if (i <= QS_METHOD_RTN || methods[i].per_linear) {
            const char *given = json_string_value(name);
            snprintf(msg, cap,
                     "%s: expected a method other than rtn and per-linear (or mr-gptq+search), "
                     "not %s%.40s%s",
                     k, given ? "'" : "", given ? given : "a string", given ? "'" : "");
            return msg;
        }
    }
    return NULL;
}

/* per-linear's one form of each scale-search choice (method.h): when every mr-gptq linear
 * searches, "mr-gptq" in the map and scale_search true; else labels in the map and no flag. */
static void canonical_search(json_t *o) {
    json_t *linears = json_object_get(o, "linears");
    bool flag = json_is_true(json_object_get(o, "scale_search")), plain = false, any = false;
    const char *k;
    json_t *v;
    json_object_foreach(linears, k, v) {
        bool search;
        const qs_method *m = qs_method_at(qs_method_by_label(json_string_value(v), &search));
        if (!m || !qs_method_scale_search(m)) continue;
        any = true;
        plain |= !search && !flag;
    }
    if (!any) return;
    json_object_foreach(linears, k, v) {
        bool search;
        const qs_method *m = qs_method_at(qs_method_by_label(json_string_value(v), &search));
        if (!m || !qs_method_scale_search(m)) continue;
        char label[40];
        snprintf(label, sizeof label, "%s%s", m->name, plain && search ? "+search" : "");
        json_object_set_new(linears, k, json_string(label));
    }
    if (plain)
        json_object_del(o, "scale_search");
    else
        json_object_set_new(o, "scale_search", json_true());
}

bool qs_method_linear_quantized(const char *linear, qs_mode mode, int block, int part,
                                unsigned loo_of, const json_t *policy) {
    int b, k;
    if (qs_block_linear_parse(linear, &b, &k)) return false;
    switch (mode) {
    case QS_MODE_COMPONENT:
        return k == part;
    case QS_MODE_LEAVE_ONE_OUT:
        return (loo_of >> k & 1u) && k != part;
    case QS_MODE_BLOCK:
        return b == block;
    case QS_MODE_LAYER:
        return b == block && k == part;
    case QS_MODE_CUMULATIVE:
        return b <= block;
    case QS_MODE_LEAVE_ONE_OUT_BLOCK:
        return b != block;
    case QS_MODE_LEAVE_ONE_OUT_LAYER:
        return b != block || k != part;
    case QS_MODE_POLICY:
        return json_object_get(policy, linear) != NULL;
    default:
        return false;
    }
}

qs_status qs_method_options(int i, const json_t *given, json_t **out, qs_error *err) {
    *out = NULL;
    const qs_method *m = qs_method_at(i);
    if (!m) return qs_error_set(err, QS_EINVAL, "method: index %d is not a method", i);
    if (given && !json_is_object(given))
        return qs_error_set(err, QS_EINVAL, "method_options: expected an object");
    if (!m->gptq && !m->smooth) {
        if (given && json_object_size(given))
            return qs_error_set(err, QS_EINVAL, "method_options: method %s has no options",
                                m->name);
        return QS_OK;
    }
    json_t *o = json_object();
    if (!o) return qs_error_set(err, QS_ENOMEM, "out of memory");
    if (m->gptq) {
        json_object_set_new(o, "act_order", json_false());
        json_object_set_new(o, "damp", json_real(0.01));
    }
    if (m->smooth) json_object_set_new(o, "alpha", json_real(0.5));
    if (m->per_linear) json_object_set_new(o, "linears", json_object());
    /* mr-gptq's scale_search (per-linear: for its mr-gptq linears) is written only when true,
     * so grids without it keep their keys */
    const int searchable = (m->gptq && m->rotate == QS_ROTATE_GROUP) || m->per_linear;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)given, key, v) {
        if (searchable && !strcmp(key, "scale_search")) {
            if (!json_is_boolean(v)) {
                json_decref(o);
                return qs_error_set(err, QS_EINVAL,
                                    "method_options.scale_search: expected true or false (method "
                                    "%s)",
                                    m->name);
            }
            if (json_is_true(v)) json_object_set_new(o, key, json_true());
            continue;
        }
        json_t *have = json_object_get(o, key);
        double x = json_number_value(v);
        const char *bad = NULL;
        char why[160];
        if (!have)
            bad = m->per_linear ? "unknown option (expected act_order, alpha, damp, linears, "
                                  "scale_search)"
                  : searchable  ? "unknown option (expected act_order, damp, scale_search)"
                  : m->gptq     ? "unknown option (expected act_order, damp)"
                                : "unknown option (expected alpha)";
        else if (!strcmp(key, "linears"))
            bad = linears_error(v, why, sizeof why);
        else if (!strcmp(key, "act_order") && !json_is_boolean(v))
            bad = "expected true or false";
        else if (!strcmp(key, "alpha") && (!json_is_number(v) || !(x >= 0.0 && x <= 1.0)))
            bad = "expected a number in [0, 1]";
        else if (!strcmp(key, "damp") && (!json_is_number(v) || !(x > 0.0 && x < 1.0)))
            bad = "expected a number in (0, 1)";
        if (bad) {
            json_decref(o);
            return qs_error_set(err, QS_EINVAL, "method_options.%s: %s (method %s)", key, bad,
                                m->name);
        }
        json_object_set_new(o, key,
                            json_is_object(v)    ? json_deep_copy(v)
                            : json_is_boolean(v) ? json_boolean(json_is_true(v))
                                                 : json_real(json_number_value(v)));
    }
    if (m->per_linear) canonical_search(o);
    *out = o;
    return QS_OK;
}
