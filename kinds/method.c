/* The method table (method.h). */
#include "method.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Whether method m has MR-GPTQ's scale search (option scale_search). */
static bool searches(const qs_method *m) {
    return m->gptq && m->rotate == QS_ROTATE_GROUP && !m->per_linear;
}

int qs_method_label(int i, const json_t *options, char *out, size_t cap) {
    const qs_method *m = qs_method_at(i);
    if (!m) return snprintf(out, cap, "?");
    bool search = searches(m) && json_is_true(json_object_get(options, "scale_search"));
    return snprintf(out, cap, "%s%s", m->name, search ? "+search" : "");
}

int qs_method_by_label(const char *label, bool *scale_search) {
    static const char suffix[] = "+search";
    size_t n = label ? strlen(label) : 0, s = sizeof suffix - 1;
    *scale_search = n > s && !strcmp(label + n - s, suffix);
    size_t name = *scale_search ? n - s : n; /* the method's name: the label before "+search" */
    for (int i = 0; i < N_METHODS; i++)
        if (strlen(methods[i].name) == name && !strncmp(methods[i].name, label, name))
            return !*scale_search || searches(&methods[i]) ? i : -1;
    return -1;
}

/* The options a setting label may spell out, in label order. */
static const char *const label_options[] = {"act_order", "alpha", "damp"};
#define N_LABEL_OPTIONS (sizeof label_options / sizeof label_options[0])

/* Whether method m has option key (one of label_options). */
static bool has_option(const qs_method *m, const char *key) {
    return !strcmp(key, "alpha") ? m->smooth : m->gptq;
}

/* v as a label value: true/false, an integer, the shortest decimal that reads back as the same
 * double, or a string as it is. */
static void option_text(const json_t *v, char *out, size_t cap) {
    if (json_is_boolean(v)) {
        snprintf(out, cap, "%s", json_is_true(v) ? "true" : "false");
    } else if (json_is_integer(v)) {
        snprintf(out, cap, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        double x = json_real_value(v);
        for (int p = 1; p <= 17; p++) {
            snprintf(out, cap, "%.*g", p, x);
            if (strtod(out, NULL) == x) break;
        }
    } else {
        snprintf(out, cap, "%s", json_is_string(v) ? json_string_value(v) : "null");
    }
}

/* The method label per-linear's options o give linear key, its map's scale_search folded into
 * an mr-gptq linear ("mr-gptq+search"); "" when o has no such linear. */
static void linear_label(const json_t *o, const char *key, char *out, size_t cap) {
    const char *v = json_string_value(json_object_get(json_object_get(o, "linears"), key));
    bool search;
    const qs_method *m = qs_method_at(qs_method_by_label(v, &search));
    bool folded = m && searches(m) && !search && json_is_true(json_object_get(o, "scale_search"));
    snprintf(out, cap, "%s%s", v ? v : "", folded ? "+search" : "");
}

static int by_text(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends to out at len (snprintf's count) "+<block>.<kind>=<method label>" for each linear of
 * per-linear setting s, in key order, whose method differs from that of another per-linear
 * setting of all[0, n); returns the new count. */
static int append_linears(const qs_method_setting *s, const qs_method_setting *all, size_t n,
                          char *out, size_t cap, int len) {
    const json_t *lin = json_object_get(s->options, "linears");
    size_t nk = json_object_size(lin), k = 0;
    const char **keys = nk ? malloc(nk * sizeof *keys) : NULL;
    if (!keys) return len;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)lin, key, v) keys[k++] = key;
    qsort(keys, nk, sizeof *keys, by_text);
    for (k = 0; k < nk; k++) {
        char mine[64], other[64];
        linear_label(s->options, keys[k], mine, sizeof mine);
        bool differs = false;
        for (size_t i = 0; !differs && i < n; i++) {
            const qs_method *m = qs_method_at(all[i].method);
            if (!m || !m->per_linear) continue;
            linear_label(all[i].options, keys[k], other, sizeof other);
            differs = strcmp(mine, other) != 0;
        }
        if (differs)
            len += snprintf(out + ((size_t)len < cap ? (size_t)len : cap),
                            (size_t)len < cap ? cap - (size_t)len : 0, "+%s=%s", keys[k], mine);
    }
    free(keys);
    return len;
}

int qs_method_setting_label(const qs_method_setting *s, const qs_method_setting *all, size_t n,
                            char *out, size_t cap) {
    char label[64], other[64];
    int len = qs_method_label(s->method, s->options, label, sizeof label);
    if (len < 0 || !qs_method_at(s->method)) return len;
    len = snprintf(out, cap, "%s", label);
    for (size_t k = 0; k < N_LABEL_OPTIONS; k++) {
        const json_t *v = json_object_get(s->options, label_options[k]);
        bool differs = false;
        for (size_t i = 0; v && !differs && i < n; i++) {
            qs_method_label(all[i].method, all[i].options, other, sizeof other);
            const json_t *w = json_object_get(all[i].options, label_options[k]);
            differs = !strcmp(label, other) && !(w && json_equal((json_t *)v, (json_t *)w));
        }
        if (!differs) continue;
        char value[40];
        option_text(v, value, sizeof value);
        len +=
            snprintf(out + ((size_t)len < cap ? (size_t)len : cap),
                     (size_t)len < cap ? cap - (size_t)len : 0, "+%s=%s", label_options[k], value);
    }
    if (qs_method_at(s->method)->per_linear) len = append_linears(s, all, n, out, cap, len);
    return len;
}

/* The length of "+<block>.<kind>=<method label>" at p, one linear of a per-linear setting label
 * (the label's "+search" included); 0 when p starts none. */
static size_t linear_part(const char *p) {
    size_t n = strcspn(p + 1, "+");
    const char *eq = memchr(p + 1, '=', n);
    char key[32], value[64];
    int block, kind;
    bool search;
    if (!eq || (size_t)(eq - p) >= sizeof key) return 0;
    snprintf(key, sizeof key, "%.*s", (int)(eq - p - 1), p + 1);
    size_t end = 1 + n;
    if (!strncmp(p + end, "+search", 7) && (!p[end + 7] || p[end + 7] == '+')) end += 7;
    if ((size_t)(p + end - eq) > sizeof value) return 0;
    snprintf(value, sizeof value, "%.*s", (int)(p + end - eq - 1), eq + 1);
    int i = qs_method_by_label(value, &search);
    if (qs_block_linear_parse(key, &block, &kind) || i <= QS_METHOD_RTN || methods[i].per_linear)
        return 0;
    return end;
}

int qs_method_by_setting_label(const char *text, bool *scale_search, size_t *label_len) {
    *scale_search = false;
    *label_len = 0;
    if (!text) return -1;
    /* the label ends at the first "+<option>=" or "+<block>." (per-linear's linears) */
    const char *end = text;
    for (const char *p = strchr(text, '+');; p = strchr(p + 1, '+')) {
        size_t k = 0;
        while (p && k < N_LABEL_OPTIONS &&
               (strncmp(p + 1, label_options[k], strlen(label_options[k])) ||
                p[1 + strlen(label_options[k])] != '='))
            k++;
        if (!p || k < N_LABEL_OPTIONS || isdigit((unsigned char)p[1])) {
            end = p ? p : text + strlen(text);
            break;
        }
    }
    char label[64];
    if ((size_t)(end - text) >= sizeof label) return -1;
    snprintf(label, sizeof label, "%.*s", (int)(end - text), text);
    int i = qs_method_by_label(label, scale_search);
    if (i < 0) return -1;
    /* each option part: "+<option of the method>=<value>" */
    for (const char *p = end; *p;) {
        size_t n = strcspn(p + 1, "+"), k = 0, linear = methods[i].per_linear ? linear_part(p) : 0;
        if (linear) {
            p += linear;
            continue;
        }
        while (k < N_LABEL_OPTIONS && (strncmp(p + 1, label_options[k], strlen(label_options[k])) ||
                                       p[1 + strlen(label_options[k])] != '='))
            k++;
        if (k == N_LABEL_OPTIONS || !has_option(&methods[i], label_options[k]) ||
            n <= strlen(label_options[k]) + 1)
            return -1;
        p += 1 + n;
    }
    *label_len = (size_t)(end - text);
    return i;
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
        if (!m || !searches(m)) continue;
        any = true;
        plain |= !search && !flag;
    }
    if (!any) return;
    json_object_foreach(linears, k, v) {
        bool search;
        const qs_method *m = qs_method_at(qs_method_by_label(json_string_value(v), &search));
        if (!m || !searches(m)) continue;
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
