/* Method labels and setting labels (method_label.h). */
#include "method_label.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int qs_method_label(int i, const json_t *options, char *out, size_t cap) {
    const qs_method *m = qs_method_at(i);
    if (!m) return snprintf(out, cap, "?");
    bool search =
        qs_method_scale_search(m) && json_is_true(json_object_get(options, "scale_search"));
    return snprintf(out, cap, "%s%s", m->name, search ? "+search" : "");
}

int qs_method_by_label(const char *label, bool *scale_search) {
    static const char suffix[] = "+search";
    size_t n = label ? strlen(label) : 0, s = sizeof suffix - 1;
    *scale_search = n > s && !strcmp(label + n - s, suffix);
    size_t name = *scale_search ? n - s : n; /* the method's name: the label before "+search" */
    for (int i = 0; i < qs_method_count(); i++) {
        const qs_method *m = qs_method_at(i);
        if (strlen(m->name) == name && !strncmp(m->name, label, name))
            return !*scale_search || qs_method_scale_search(m) ? i : -1;
    }
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
    bool folded = m && qs_method_scale_search(m) && !search &&
                  json_is_true(json_object_get(o, "scale_search"));
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
    if (qs_block_linear_parse(key, &block, &kind) || i <= QS_METHOD_RTN ||
        qs_method_at(i)->per_linear)
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
        size_t n = strcspn(p + 1, "+"), k = 0,
               linear = qs_method_at(i)->per_linear ? linear_part(p) : 0;
        if (linear) {
            p += linear;
            continue;
        }
        while (k < N_LABEL_OPTIONS && (strncmp(p + 1, label_options[k], strlen(label_options[k])) ||
                                       p[1 + strlen(label_options[k])] != '='))
            k++;
        if (k == N_LABEL_OPTIONS || !has_option(qs_method_at(i), label_options[k]) ||
            n <= strlen(label_options[k]) + 1)
            return -1;
        p += 1 + n;
    }
    *label_len = (size_t)(end - text);
    return i;
}

/* The value of option key in a setting label, as the grid reads it: true or false for
 * act_order, else a finite decimal number; NULL when text is neither. */
static json_t *label_value(const char *key, const char *text) {
    if (!strcmp(key, "act_order"))
        return !strcmp(text, "true") ? json_true() : !strcmp(text, "false") ? json_false() : NULL;
    char *end;
    errno = 0;
    double x = strtod(text, &end);
    bool decimal = *text && strspn(text, "0123456789.eE-") == strlen(text);
    return decimal && !*end && !errno && isfinite(x) ? json_real(x) : NULL;
}

/* The "+<key>=<value>" parts of setting label text after its label, read into given (its
 * options, per-linear's linears under "linears") and checked by qs_method_options. */
static qs_status read_label_parts(int i, char *const *part, size_t np, json_t *given,
                                  qs_error *err) {
    const qs_method *m = qs_method_at(i);
    json_t *linears = json_object_get(given, "linears");
    for (size_t j = 0; j < np; j++) {
        char *eq = strchr(part[j], '=');
        if (!eq)
            return qs_error_set(err, QS_EINVAL, "'+%s': expected \"+<option>=<value>\"", part[j]);
        *eq = 0;
        const char *key = part[j], *text = eq + 1;
        int block, kind;
        size_t k = 0;
        while (k < N_LABEL_OPTIONS && strcmp(key, label_options[k]))
            k++;
        if (k < N_LABEL_OPTIONS && has_option(m, key)) {
            if (json_object_get(given, key))
                return qs_error_set(err, QS_EINVAL, "'%s=%s': the option is given twice", key,
                                    text);
            json_t *v = label_value(key, text);
            if (!v)
                return qs_error_set(err, QS_EINVAL, "'%s=%s': expected %s", key, text,
                                    !strcmp(key, "act_order") ? "true or false" : "a number");
            /* the range the grid allows: qs_method_options over this one option */
            json_t *one = json_pack("{sO}", key, v), *checked = NULL;
            qs_error why = {0};
            qs_status st = one ? qs_method_options(i, one, &checked, &why) : QS_ENOMEM;
            json_decref(checked);
            json_decref(one);
            if (st) {
                json_decref(v);
                return qs_error_set(err, st, "'%s=%s': %s", key, text,
                                    st == QS_ENOMEM ? "out of memory" : why.msg);
            }
            json_object_set_new(given, key, v);
        } else if (m->per_linear && !qs_block_linear_parse(key, &block, &kind)) {
            char label[64];
            bool search;
            /* a linear's "+search" is a part of its own */
            bool searched = j + 1 < np && !strcmp(part[j + 1], "search");
            snprintf(label, sizeof label, "%s%s", text, searched ? "+search" : "");
            int li = qs_method_by_label(label, &search);
            if (li <= QS_METHOD_RTN || qs_method_at(li)->per_linear)
                return qs_error_set(err, QS_EINVAL,
                                    "'%s=%s': expected a method other than rtn and per-linear", key,
                                    label);
            if (json_object_get(linears, key))
                return qs_error_set(err, QS_EINVAL, "'%s=%s': the linear is given twice", key,
                                    label);
            json_object_set_new(linears, key, json_string(label));
            j += searched;
        } else {
            return qs_error_set(err, QS_EINVAL, "'%s=%s': %s has no option %s (expected %s)", key,
                                text, m->name, key,
                                m->per_linear ? "act_order, alpha, damp or <block>.<kind>"
                                : m->gptq     ? "act_order or damp"
                                : m->smooth   ? "alpha"
                                              : "none");
        }
    }
    return QS_OK;
}

/* Appends "+<option>=<value>" to out at len for each label option opts holds, in label order
 * (act_order, alpha, damp), values written as labels write them; returns the new length
 * (snprintf's count: at least cap when cut). */
static size_t append_options(const json_t *opts, char *out, size_t cap, size_t len) {
    for (size_t k = 0; k < N_LABEL_OPTIONS; k++) {
        const json_t *v = json_object_get(opts, label_options[k]);
        char value[40];
        if (!v) continue;
        option_text(v, value, sizeof value);
        len += (size_t)snprintf(out + (len < cap ? len : cap), len < cap ? cap - len : 0, "+%s=%s",
                                label_options[k], value);
    }
    return len;
}

qs_status qs_method_setting_label_canonical(const char *text, char *out, size_t cap,
                                            qs_error *err) {
    if (cap) out[0] = 0;
    size_t n = text ? strlen(text) : 0, np = 1;
    for (size_t c = 0; c < n; c++)
        np += text[c] == '+';
    char *buf = malloc(n + 1), **part = malloc(np * sizeof *part);
    json_t *given = json_object(), *linears = json_object();
    if (!buf || !part || !given || !linears || json_object_set(given, "linears", linears)) {
        free(buf);
        free(part);
        json_decref(given);
        json_decref(linears);
        return qs_error_set(err, QS_ENOMEM, "out of memory");
    }
    memcpy(buf, text ? text : "", n + 1);
    part[0] = buf;
    for (size_t c = 0, p = 1; c < n; c++)
        if (buf[c] == '+') buf[c] = 0, part[p++] = buf + c + 1;
    /* the label: the parts before the first holding '=' ("mr-gptq+search") */
    size_t nl = 0;
    while (nl < np && !strchr(part[nl], '='))
        nl++;
    char label[64] = "";
    for (size_t j = 0; j < nl; j++)
        snprintf(label + strlen(label), sizeof label - strlen(label), "%s%s", j ? "+" : "",
                 part[j]);
    bool search;
    int i = qs_method_by_label(label, &search);
    qs_status st = i < 0 ? qs_error_set(err, QS_ENOTFOUND, "unknown method '%s'", label)
                         : read_label_parts(i, part + nl, np - nl, given, err);
    size_t len = st ? 0 : (size_t)snprintf(out, cap, "%s", label);
    if (!st) len = append_options(given, out, cap, len);
    size_t nk = json_object_size(linears), k = 0;
    const char **keys = !st && nk ? malloc(nk * sizeof *keys) : NULL;
    if (!st && nk && !keys) st = qs_error_set(err, QS_ENOMEM, "out of memory");
    const char *key;
    json_t *v;
    if (keys) {
        json_object_foreach(linears, key, v) keys[k++] = key;
        qsort(keys, nk, sizeof *keys, by_text);
    }
    for (k = 0; keys && k < nk; k++)
        len += (size_t)snprintf(out + (len < cap ? len : cap), len < cap ? cap - len : 0, "+%s=%s",
                                keys[k], json_string_value(json_object_get(linears, keys[k])));
    if (!st && len >= cap)
        st = qs_error_set(err, QS_EINVAL, "a setting label of %zu characters (at most %zu)", len,
                          cap ? cap - 1 : 0);
    free(keys);
    free(part);
    free(buf);
    json_decref(linears);
    json_decref(given);
    return st;
}

/* The "+"-separated parts of text[0, len) into part (at most cap), a part without '=' after the
 * first one holding '=' joined to the one before it (a linear's "+search"); returns how many.
 * buf (len + 1 bytes) holds them. */
static size_t label_parts(const char *text, size_t len, char *buf, char **part, size_t cap) {
    memcpy(buf, text, len);
    buf[len] = 0;
    size_t np = 0;
    bool opts = false;
    for (char *p = buf, *next; p && np < cap; p = next) {
        next = strchr(p, '+');
        if (next) *next++ = 0;
        if (opts && !strchr(p, '=') && np) {
            p[-1] = '+'; /* a continuation: back into the part before it */
            continue;
        }
        opts |= strchr(p, '=') != NULL;
        part[np++] = p;
    }
    return np;
}

bool qs_method_setting_named(const char *text, size_t len, const qs_method_setting *s) {
    const qs_method *m = qs_method_at(s->method);
    if (!m || len > 255) return false;
    /* s's label with every option it has and every linear spelled out */
    char full[512], label[64];
    int n = qs_method_label(s->method, s->options, label, sizeof label);
    if (n < 0 || (size_t)n >= sizeof label) return false;
    size_t fl = (size_t)snprintf(full, sizeof full, "%s", label);
    fl = append_options(s->options, full, sizeof full, fl);
    const json_t *lin = json_object_get(s->options, "linears");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)lin, key, v) {
        char ll[64];
        linear_label(s->options, key, ll, sizeof ll);
        if (fl < sizeof full)
            fl += (size_t)snprintf(full + fl, sizeof full - fl, "+%s=%s", key, ll);
    }
    if (fl >= sizeof full) return false;
    char tb[256], fb[512], *tp[64], *fp[64];
    size_t nt = label_parts(text, len, tb, tp, 64), nf = label_parts(full, fl, fb, fp, 64);
    /* the label: the parts before the first holding '=' */
    size_t lt = 0, lf = 0;
    while (lt < nt && !strchr(tp[lt], '='))
        lt++;
    while (lf < nf && !strchr(fp[lf], '='))
        lf++;
    if (lt != lf) return false;
    for (size_t j = 0; j < lt; j++)
        if (strcmp(tp[j], fp[j])) return false;
    for (size_t j = lt; j < nt; j++) {
        size_t k = lf;
        while (k < nf && strcmp(tp[j], fp[k]))
            k++;
        if (k == nf) return false;
    }
    return true;
}
