/* The generic YAML configuration reader (config.h): file checks, overrides, typed values and
 * error locations. */
#include "config.h"
#include "nearest.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "utf8.h"

/* Largest file accepted: grids are a few kilobytes; this bounds what a mistaken path (a model
 * file given as the grid) costs to read. */
#define CONFIG_MAX_BYTES ((size_t)4 << 20)
/* Nodes that following YAML aliases may reach before the file is refused: a grid is a few
 * hundred nodes, and nine levels of ten aliases each (the "billion laughs") would be 10^9. */
#define CONFIG_MAX_ALIAS_NODES 100000
/* Deepest nesting of mappings and sequences walked (a grid nests four levels). */
#define CONFIG_MAX_DEPTH 64

struct qc_config {
    char *file;
    char *dir;  /* directory of the file, for relative paths */
    char *text; /* the file's bytes; the document's scalars point into it */
    struct fy_diag *diag;
    struct fy_document *doc;
    struct fy_node **set_nodes; /* value node each override put in place, for error locations */
    struct fy_node **set_keys;  /* key node each "+key=value" created (no position in the file) */
    const char *const *sets;
    size_t n_sets;
    qs_error *err;
};

const char *qc_config_file(const qc_config *c) {
    return c->file;
}

struct fy_node *qc_config_root(const qc_config *c) {
    return fy_document_root(c->doc);
}

char *qc_config_emit(const qc_config *c) {
    return fy_emit_document_to_string(c->doc, FYECF_DEFAULT);
}

size_t qc_config_from_set(const qc_config *c, struct fy_node *n) {
    for (struct fy_node *a = n; a; a = fy_node_get_parent(a))
        for (size_t i = 0; i < c->n_sets; i++)
            if (c->set_nodes[i] == a || c->set_keys[i] == a) return i + 1;
    return 0;
}

/* The key of the mapping pair whose value is n, NULL when n is not a mapping value. */
static struct fy_node *key_of(struct fy_node *n) {
    struct fy_node *map = n ? fy_node_get_parent(n) : NULL;
    if (!map || !fy_node_is_mapping(map)) return NULL;
    void *it = NULL;
    struct fy_node_pair *pair;
    while ((pair = fy_node_mapping_iterate(map, &it)))
        if (fy_node_pair_value(pair) == n) return fy_node_pair_key(pair);
    return NULL;
}

static qs_status vfail(qc_config *c, struct fy_node *n, qs_status code, const char *fmt,
                       va_list ap) {
    char msg[800];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t set = qc_config_from_set(c, n);
    if (set) return qs_error_set(c->err, code, "--set %s: %s", c->sets[set - 1], msg);
    int line = 0, column = 0;
    /* An empty value ("ctx:" and nothing after it) is a null scalar without a token, so
       libfyaml knows no position for it: name its key's. */
    if (n && fy_node_is_scalar(n) && !fy_node_get_scalar_token(n)) {
        struct fy_node *k = key_of(n);
        n = k ? k : fy_node_get_parent(n); /* an empty list item: the list's */
    }
    /* Nodes an override created have no position in the file; qc_config_from_set named them
       above, so n is one libfyaml parsed from the file. libfyaml's own report of the node
       gives its position. */
    if (n) {
        fy_node_report(n, FYET_ERROR, "%s", msg);
        void *it = NULL;
        struct fy_diag_error *e, *last = NULL;
        while ((e = fy_diag_errors_iterate(c->diag, &it)))
            last = e;
        if (last) {
            line = last->line;
            column = last->column;
        }
    }
    return qs_error_set(c->err, code, "%s:%d:%d: %s", c->file, line, column, msg);
}

qs_status qc_config_fail(qc_config *c, struct fy_node *n, qs_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    qs_status st = vfail(c, n, code, fmt, ap);
    va_end(ap);
    return st;
}

qs_status qc_config_error(qc_config *c, qs_status code, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qs_error_set(c->err, code, "%s", msg);
}

struct fy_node *qc_config_lookup(struct fy_node *map, const char *key) {
    if (!map || !fy_node_is_mapping(map)) return NULL;
    return fy_node_mapping_lookup_by_string(map, key, FY_NT);
}

const char *qc_config_scalar(struct fy_node *n) {
    return (n && fy_node_is_scalar(n)) ? fy_node_get_scalar0(n) : NULL;
}

qs_status qc_config_string(qc_config *c, struct fy_node *n, const char *what, const char **out) {
    const char *s = qc_config_scalar(n);
    if (!s || !*s)
        return qc_config_fail(c, n, QS_EFORMAT, "expected a non-empty string for %s", what);
    *out = s;
    return QS_OK;
}

qs_status qc_config_int(qc_config *c, struct fy_node *n, const char *what, long lo, long hi,
                        int *out) {
    const char *s = qc_config_scalar(n);
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi)
        return qc_config_fail(c, n, QS_EFORMAT,
                              "expected an integer in [%ld, %ld] for %s, got '%s'", lo, hi, what,
                              s ? s : "(not a scalar)");
    *out = (int)v;
    return QS_OK;
}

qs_status qc_config_number(qc_config *c, struct fy_node *n, const char *what, double lo, double hi,
                           double *out) {
    const char *s = qc_config_scalar(n);
    char *end = NULL;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !isfinite(v) || v < lo || v > hi)
        return qc_config_fail(c, n, QS_EFORMAT, "expected a number in [%g, %g] for %s, got '%s'",
                              lo, hi, what, s ? s : "(not a scalar)");
    *out = v;
    return QS_OK;
}

qs_status qc_config_bool(qc_config *c, struct fy_node *n, const char *what, int *out) {
    const char *s = qc_config_scalar(n);
    /* YAML 1.2 core schema booleans */
    if (s && (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))) {
        *out = 1;
        return QS_OK;
    }
    if (s && (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE"))) {
        *out = 0;
        return QS_OK;
    }
    return qc_config_fail(c, n, QS_EFORMAT, "expected true or false for %s, got '%s'", what,
                          s ? s : "(not a scalar)");
}

qs_status qc_config_check_keys(qc_config *c, struct fy_node *n, const char *what,
                               const char *const *allowed) {
    void *it = NULL;
    struct fy_node_pair *pair;
    while ((pair = fy_node_mapping_iterate(n, &it))) {
        struct fy_node *k = fy_node_pair_key(pair);
        const char *ks = qc_config_scalar(k);
        int ok = 0;
        for (size_t i = 0; ks && allowed[i]; i++)
            ok |= strcmp(ks, allowed[i]) == 0;
        if (!ok) {
            char list[256] = "";
            size_t n_allowed = 0;
            for (; allowed[n_allowed]; n_allowed++) {
                if (n_allowed) strncat(list, ", ", sizeof list - strlen(list) - 1);
                strncat(list, allowed[n_allowed], sizeof list - strlen(list) - 1);
            }
            const char *near = ks ? qs_nearest(ks, allowed, n_allowed) : NULL;
            if (near)
                return qc_config_fail(c, k, QS_EINVAL,
                                      "unknown key '%s' in %s: did you mean '%s'? (expected one "
                                      "of: %s)",
                                      ks, what, near, list);
            return qc_config_fail(c, k, QS_EINVAL, "unknown key '%s' in %s (expected one of: %s)",
                                  ks ? ks : "(not a scalar)", what, list);
        }
    }
    return QS_OK;
}

qs_status qc_config_each(qc_config *c, struct fy_node *n, const char *what, qc_config_item_fn fn,
                         void *ctx) {
    if (n && fy_node_is_scalar(n)) return fn(c, n, ctx);
    if (!n || !fy_node_is_sequence(n) || fy_node_sequence_item_count(n) == 0)
        return qc_config_fail(c, n, QS_EFORMAT, "expected a name or a non-empty list for %s", what);
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(n, &it))) {
        qs_status st = fn(c, item, ctx);
        if (st) return st;
    }
    return QS_OK;
}

char *qc_config_expand(const char *in, char *bad, size_t bad_len) {
    size_t cap = strlen(in) + 256, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    const char *s = in;
    if (s[0] == '~' && (s[1] == '/' || s[1] == 0)) {
        const char *home = getenv("HOME");
        if (!home) {
            snprintf(bad, bad_len, "HOME");
            free(out);
            return NULL;
        }
        len = (size_t)snprintf(out, cap, "%s", home);
        if (len >= cap) {
            free(out);
            snprintf(bad, bad_len, "HOME is too long");
            return NULL;
        }
        s++;
    }
    while (*s) {
        const char *piece = s;
        size_t piece_len = 1;
        char *sub = NULL;
        if (s[0] == '$' && s[1] == '{') {
            const char *b = s + 2;
            int depth = 1;
            const char *e = b;
            for (; *e && depth; e++)
                depth += (*e == '{') - (*e == '}');
            if (depth) {
                snprintf(bad, bad_len, "unterminated ${ in '%s'", in);
                free(out);
                return NULL;
            }
            /* b..e-2 is "VAR" or "VAR:-default" */
            char *body = strndup(b, (size_t)(e - 1 - b));
            if (!body) {
                free(out);
                return NULL;
            }
            char *dflt = strstr(body, ":-");
            if (dflt) *dflt = 0;
            const char *val = getenv(body);
            if (val && *val)
                sub = strdup(val);
            else if (dflt)
                sub = qc_config_expand(dflt + 2, bad, bad_len);
            else
                snprintf(bad, bad_len, "environment variable %s is not set", body);
            free(body);
            if (!sub) {
                free(out);
                return NULL;
            }
            piece = sub;
            piece_len = strlen(sub);
            s = e;
        } else {
            s++;
        }
        if (len + piece_len + 1 > cap) {
            cap = 2 * (len + piece_len + 1);
            char *n = realloc(out, cap);
            if (!n) {
                free(sub);
                free(out);
                return NULL;
            }
            out = n;
        }
        memcpy(out + len, piece, piece_len);
        len += piece_len;
        free(sub);
    }
    out[len] = 0;
    return out;
}

qs_status qc_config_path(qc_config *c, struct fy_node *n, const char *what, char **out) {
    const char *text = NULL;
    char label[128];
    snprintf(label, sizeof label, "the %s", what);
    qs_status st = qc_config_string(c, n, label, &text);
    if (st) return st;
    char bad[256] = "";
    char *exp = qc_config_expand(text, bad, sizeof bad);
    if (!exp) {
        if (!bad[0]) return qc_config_error(c, QS_ENOMEM, "out of memory");
        return qc_config_fail(c, n, QS_EINVAL, "cannot expand %s '%s': %s", what, text, bad);
    }
    char *joined = exp, cwd[4096];
    const char *base = c->dir;
    if (qc_config_from_set(c, n)) base = getcwd(cwd, sizeof cwd) ? cwd : ".";
    if (exp[0] != '/') {
        size_t l = strlen(base) + strlen(exp) + 2;
        joined = malloc(l);
        if (!joined) {
            free(exp);
            return qc_config_error(c, QS_ENOMEM, "out of memory");
        }
        snprintf(joined, l, "%s/%s", base, exp);
        free(exp);
    }
    char *real = realpath(joined, NULL);
    if (!real) {
        int e = errno;
        st = qc_config_fail(c, n, e == ENOENT ? QS_ENOTFOUND : QS_EIO, "%s %s: %s", what, joined,
                            e == ENOENT ? "no such file or directory" : strerror(e));
        free(joined);
        return st;
    }
    free(joined);
    *out = real;
    return QS_OK;
}

qs_status qc_config_check_text(qc_config *c, struct fy_node *n, struct fy_node *free_text) {
    /* Recursion depth: qc_config_load refused documents nested deeper than 64 levels. */
    if (!n) return QS_OK;
    qs_status st = QS_OK;
    if (fy_node_is_scalar(n)) {
        size_t len = 0;
        const unsigned char *s = (const unsigned char *)fy_node_get_scalar(n, &len);
        for (size_t i = 0; s && i < len; i++) {
            unsigned ch = s[i];
            int c1 = ch == 0xc2 && i + 1 < len && s[i + 1] >= 0x80 && s[i + 1] <= 0x9f;
            if (n == free_text && (ch == '\t' || ch == '\n')) continue;
            if (ch < 0x20 || ch == 0x7f || c1)
                return qc_config_fail(c, n, QS_EINVAL,
                                      "control character U+%04X at byte %zu of a string (names, "
                                      "paths and values are printable text; only the "
                                      "description may hold tab and newline)",
                                      c1 ? s[i + 1] : ch, i);
        }
    } else if (fy_node_is_sequence(n)) {
        void *it = NULL;
        struct fy_node *item;
        while (!st && (item = fy_node_sequence_iterate(n, &it)))
            st = qc_config_check_text(c, item, free_text);
    } else if (fy_node_is_mapping(n)) {
        void *it = NULL;
        struct fy_node_pair *pair;
        while (!st && (pair = fy_node_mapping_iterate(n, &it))) {
            st = qc_config_check_text(c, fy_node_pair_key(pair), free_text);
            if (!st) st = qc_config_check_text(c, fy_node_pair_value(pair), free_text);
        }
    }
    return st;
}

/* Whether byte sequence s (n bytes left) starts with a character a YAML file may hold: valid
 * UTF-8 (common/utf8.h) and printable, tab, LF or CR (YAML 1.2 section 5.1). Its length, or
 * 0. */
static size_t yaml_char(const unsigned char *s, size_t n) {
    uint32_t cp = 0;
    size_t len = qs_utf8_decode(s, n, &cp);
    if (len == 1 && !((cp >= 0x20 && cp != 0x7f) || cp == '\t' || cp == '\n' || cp == '\r'))
        return 0;
    return len;
}

/* Reads the file and checks that it is UTF-8 text before libfyaml sees it: YAML requires
 * Unicode, and libfyaml 0.7 loops forever on a directive line ('%' at the start) holding an
 * invalid byte (found by tests/cli/fuzz_grid.c), so such input must never reach it. */
static qs_status read_text(qc_config *c) {
    const char *path = c->file;
    FILE *f = fopen(path, "rb");
    if (!f)
        return qs_error_set(c->err, errno == ENOENT ? QS_ENOTFOUND : QS_EIO,
                            "%s: cannot open grid file: %s", path, strerror(errno));
    char *buf = malloc(CONFIG_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, CONFIG_MAX_BYTES + 1, f) : 0;
    int failed = buf && ferror(f);
    fclose(f);
    if (!buf) return qs_error_set(c->err, QS_ENOMEM, "out of memory");
    if (failed || n > CONFIG_MAX_BYTES) {
        free(buf);
        return failed
                   ? qs_error_set(c->err, QS_EIO, "%s: read error", path)
                   : qs_error_set(c->err, QS_EINVAL, "%s: larger than %zu bytes: not a grid file",
                                  path, CONFIG_MAX_BYTES);
    }
    int line = 1, column = 1;
    for (size_t i = 0; i < n;) {
        size_t len = yaml_char((const unsigned char *)buf + i, n - i);
        if (!len) {
            qs_status st = qs_error_set(c->err, QS_EFORMAT,
                                        "%s:%d:%d: byte 0x%02x is not UTF-8 text (a grid is "
                                        "YAML: UTF-8, no control characters but tab and newline)",
                                        path, line, column, (unsigned char)buf[i]);
            free(buf);
            return st;
        }
        if (buf[i] == '\n') {
            line++;
            column = 1;
        } else {
            column++;
        }
        i += len;
    }
    buf[n] = 0;
    c->text = buf;
    return QS_OK;
}

/* Counts the nodes of n, following aliases; every node reached through an alias adds to
 * *budget. Refuses (QS_EINVAL at the alias) once it passes CONFIG_MAX_ALIAS_NODES, before
 * libfyaml copies anything, and refuses nesting deeper than CONFIG_MAX_DEPTH. */
static qs_status count_alias_nodes(qc_config *c, struct fy_node *n, struct fy_node *alias,
                                   int depth, size_t *budget) {
    if (!n) return QS_OK;
    if (depth > CONFIG_MAX_DEPTH)
        return qc_config_fail(c, alias ? alias : n, QS_EINVAL,
                              "nesting (with aliases expanded) deeper than %d levels",
                              CONFIG_MAX_DEPTH);
    if (alias && ++*budget > CONFIG_MAX_ALIAS_NODES)
        return qc_config_fail(c, alias, QS_EINVAL,
                              "YAML aliases expand to more than %d nodes (a grid needs a few "
                              "hundred)",
                              CONFIG_MAX_ALIAS_NODES);
    qs_status st = QS_OK;
    if (fy_node_is_alias(n)) {
        struct fy_node *target = fy_node_resolve_alias(n);
        /* An unknown anchor is left to fy_document_resolve, which names it. */
        return target ? count_alias_nodes(c, target, alias ? alias : n, depth + 1, budget) : QS_OK;
    }
    if (fy_node_is_sequence(n)) {
        void *it = NULL;
        struct fy_node *item;
        while (!st && (item = fy_node_sequence_iterate(n, &it)))
            st = count_alias_nodes(c, item, alias, depth + 1, budget);
    } else if (fy_node_is_mapping(n)) {
        void *it = NULL;
        struct fy_node_pair *pair;
        while (!st && (pair = fy_node_mapping_iterate(n, &it))) {
            st = count_alias_nodes(c, fy_node_pair_key(pair), alias, depth + 1, budget);
            if (!st) st = count_alias_nodes(c, fy_node_pair_value(pair), alias, depth + 1, budget);
        }
    }
    return st;
}

/* The length of scalar token t's text as libfyaml's token iterator reads it (the bytes it
 * yields; nothing is kept). */
static size_t iterated_length(struct fy_token *t) {
    struct fy_token_iter *it = fy_token_iter_create(t);
    if (!it) return SIZE_MAX;
    char buf[256];
    ssize_t r;
    size_t n = 0;
    while ((r = fy_token_iter_read(it, buf, sizeof buf)) > 0)
        n += (size_t)r;
    fy_token_iter_destroy(it);
    return n;
}

/* Finds a scalar whose text libfyaml cannot make, before anything asks for it: libfyaml 0.7
 * (before 0.9.5) sizes a scalar's text from a length it counted while scanning and, when the
 * text does not fit it (a single-quoted scalar of consecutive escaped quotes, e.g. a newline
 * and 20 single quotes), returns a text that is not the scalar's and leaks its iterator's
 * chunk array (1 KiB; fy_atom_format_text, upstream libfyaml#233, fixed by commit
 * 0af6061 in v0.9.5). Such a scalar's counted length differs from what its token iterator
 * reads, which leaks nothing. Returns the first such scalar of n (keys included), or n itself
 * when n nests deeper than CONFIG_MAX_DEPTH below depth (*deep set), else NULL. */
static struct fy_node *misread_scalar(struct fy_node *n, int depth, bool *deep) {
    if (!n) return NULL;
    if (depth > CONFIG_MAX_DEPTH) {
        *deep = true;
        return n;
    }
    struct fy_node *bad = NULL;
    if (fy_node_is_scalar(n)) {
        struct fy_token *t = fy_node_get_scalar_token(n);
        if (t && fy_token_get_text_length(t) != iterated_length(t)) bad = n;
    } else if (fy_node_is_sequence(n)) {
        void *it = NULL;
        struct fy_node *item;
        while (!bad && (item = fy_node_sequence_iterate(n, &it)))
            bad = misread_scalar(item, depth + 1, deep);
    } else if (fy_node_is_mapping(n)) {
        void *it = NULL;
        struct fy_node_pair *pair;
        while (!bad && (pair = fy_node_mapping_iterate(n, &it))) {
            bad = misread_scalar(fy_node_pair_key(pair), depth + 1, deep);
            if (!bad) bad = misread_scalar(fy_node_pair_value(pair), depth + 1, deep);
        }
    }
    return bad;
}

/* What a misread scalar (misread_scalar) is told, for the error message. */
#define MISREAD_SCALAR                                                                             \
    "a quoted scalar this libfyaml (%s) cannot read (consecutive escaped single quotes): write "   \
    "it in double quotes"

/* Refuses a stream of more than one document: a grid is one, and the rest would be silently
 * ignored. Walks the parser's events only (no tree, no alias expansion). */
static qs_status check_one_document(qc_config *c, size_t len) {
    struct fy_parse_cfg pc = {.flags = FYPCF_QUIET, .diag = c->diag};
    struct fy_parser *fyp = fy_parser_create(&pc);
    if (!fyp || fy_parser_set_string(fyp, c->text, len) != 0) {
        if (fyp) fy_parser_destroy(fyp);
        return qs_error_set(c->err, QS_ENOMEM, "out of memory");
    }
    int docs = 0, line = 0, column = 0;
    struct fy_event *ev;
    while ((ev = fy_parser_parse(fyp))) {
        if (ev->type == FYET_DOCUMENT_START && ++docs == 2) {
            const struct fy_mark *m = fy_event_start_mark(ev);
            line = m ? m->line + 1 : 0;
            column = m ? m->column + 1 : 0;
        }
        fy_parser_event_free(fyp, ev);
        if (docs == 2) break;
    }
    fy_parser_destroy(fyp);
    if (docs < 2) return QS_OK;
    return qs_error_set(c->err, QS_EFORMAT,
                        "%s:%d:%d: a second YAML document (a grid file holds one document)",
                        c->file, line, column);
}

/* Forgets the nodes earlier overrides (before idx) put in place inside old, which override idx
 * is about to free: a freed node's address is reused by later nodes, whose errors would then
 * name the overridden argument instead of the one in effect. */
static void forget_replaced(qc_config *c, size_t idx, struct fy_node *old) {
    for (size_t j = 0; j < idx; j++)
        for (struct fy_node *a = c->set_nodes[j]; a; a = fy_node_get_parent(a))
            if (a == old) {
                c->set_nodes[j] = NULL;
                break;
            }
}

/* The key of mapping node nearest to the len bytes at seg (a typo of it), or NULL. */
static const char *nearest_key(struct fy_node *node, const char *seg, size_t len) {
    enum { MAX_KEYS = 64 };
    const char *keys[MAX_KEYS];
    size_t n = 0;
    char word[128];
    if (!node || !fy_node_is_mapping(node) || len >= sizeof word) return NULL;
    memcpy(word, seg, len);
    word[len] = '\0';
    void *it = NULL;
    struct fy_node_pair *pair;
    while (n < MAX_KEYS && (pair = fy_node_mapping_iterate(node, &it))) {
        const char *k = qc_config_scalar(fy_node_pair_key(pair));
        if (k) keys[n++] = k;
    }
    return qs_nearest(word, keys, n);
}

/* Applies override idx "[+]a.b.c=value" to the document and records the new value node for
 * error locations. */
static qs_status apply_set(qc_config *c, size_t idx) {
    const char *arg = c->sets[idx];
    const char *eq = strchr(arg, '=');
    int add = arg[0] == '+';
    const char *key = arg + add;
    qs_error *err = c->err;
    if (!eq || eq == key)
        return qs_error_set(err, QS_EINVAL, "--set %s: expected key=value (e.g. dataset.ctx=512)",
                            arg);
    struct fy_node *node = fy_document_root(c->doc);
    const char *seg = key;
    for (;;) {
        const char *dot = memchr(seg, '.', (size_t)(eq - seg));
        const char *seg_end = dot ? dot : eq;
        size_t seg_len = (size_t)(seg_end - seg);
        if (seg_len == 0) return qs_error_set(err, QS_EINVAL, "--set %s: empty key segment", arg);
        if (node && fy_node_is_sequence(node)) {
            char *end;
            long i = strtol(seg, &end, 10);
            int count = fy_node_sequence_item_count(node);
            if (end != seg_end || i < 0 || i >= count)
                return qs_error_set(err, QS_EINVAL,
                                    "--set %s: '%.*s' is not an index of a list of %d items", arg,
                                    (int)seg_len, seg, count);
            struct fy_node *item = fy_node_sequence_get_by_index(node, (int)i);
            if (dot) {
                node = item;
                seg = dot + 1;
                continue;
            }
            if (add)
                return qs_error_set(err, QS_EINVAL,
                                    "--set %s: item '%.*s' exists ('+' adds a key; write %s to "
                                    "replace the item)",
                                    arg, (int)(seg_end - key), key, key);
            struct fy_node *v = fy_node_build_from_string(c->doc, eq + 1, FY_NT);
            if (!v || fy_node_sequence_insert_before(node, item, v) != 0)
                return qs_error_set(err, QS_EINVAL, "--set %s: the value is not valid YAML", arg);
            forget_replaced(c, idx, item);
            fy_node_free(fy_node_sequence_remove(node, item));
            c->set_nodes[idx] = v;
            return QS_OK;
        }
        if (!node || !fy_node_is_mapping(node))
            return qs_error_set(err, QS_EINVAL, "--set %s: '%.*s' is not inside a mapping", arg,
                                (int)(seg_end - key), key);
        struct fy_node_pair *pair = fy_node_mapping_lookup_pair_by_string(node, seg, seg_len);
        if (!pair) {
            const char *near = nearest_key(node, seg, seg_len);
            if (near && (dot || !add))
                return qs_error_set(err, QS_EINVAL,
                                    "--set %s: the grid has no key '%.*s'; did you mean '%.*s%s'?",
                                    arg, (int)(seg_end - key), key, (int)(seg - key), key, near);
        }
        if (dot) {
            if (!pair)
                return qs_error_set(err, QS_EINVAL, "--set %s: the grid has no key '%.*s'", arg,
                                    (int)(seg_end - key), key);
            node = fy_node_pair_value(pair);
            seg = dot + 1;
            continue;
        }
        if (!pair && !add)
            return qs_error_set(err, QS_EINVAL,
                                "--set %s: the grid has no key '%.*s' (write +%s to add it)", arg,
                                (int)(seg_end - key), key, arg);
        if (pair && add)
            return qs_error_set(err, QS_EINVAL,
                                "--set %s: the grid already has key '%.*s' ('+' adds a key; write "
                                "%s to replace its value)",
                                arg, (int)(seg_end - key), key, key);
        struct fy_node *v = eq[1] ? fy_node_build_from_string(c->doc, eq + 1, FY_NT)
                                  : fy_node_create_scalar_copy(c->doc, "", 0);
        if (!v) return qs_error_set(err, QS_EINVAL, "--set %s: the value is not valid YAML", arg);
        bool deep = false;
        if (misread_scalar(v, 0, &deep)) {
            fy_node_free(v);
            return deep ? qs_error_set(err, QS_EINVAL, "--set %s: the value nests deeper than %d",
                                       arg, CONFIG_MAX_DEPTH)
                        : qs_error_set(err, QS_EINVAL, "--set %s: " MISREAD_SCALAR, arg,
                                       fy_library_version());
        }
        if (pair) forget_replaced(c, idx, fy_node_pair_value(pair));
        struct fy_node *k = pair ? NULL : fy_node_create_scalar_copy(c->doc, seg, seg_len);
        int rc = pair ? fy_node_pair_set_value(pair, v) : fy_node_mapping_append(node, k, v);
        if (rc != 0)
            return qs_error_set(err, QS_EINVAL, "--set %s: cannot apply the override", arg);
        c->set_nodes[idx] = v;
        c->set_keys[idx] = k;
        return QS_OK;
    }
}

/* Builds the document from c->text: syntax, one document, alias budget, alias resolution. */
static qs_status build_document(qc_config *c, size_t len) {
    /* Aliases are resolved below, once counting them has bounded what they expand to. */
    struct fy_parse_cfg pc = {.flags = FYPCF_QUIET, .diag = c->diag};
    c->doc = fy_document_build_from_string(&pc, c->text, len);
    if (!c->doc) {
        /* libfyaml collected the syntax error with its line and column. */
        void *it = NULL;
        struct fy_diag_error *e = fy_diag_errors_iterate(c->diag, &it);
        return e ? qs_error_set(c->err, QS_EFORMAT, "%s:%d:%d: YAML syntax error: %s", c->file,
                                e->line, e->column, e->msg)
                 : qs_error_set(c->err, QS_EFORMAT, "%s: not a YAML document", c->file);
    }
    qs_status st = check_one_document(c, len);
    size_t budget = 0;
    if (!st) st = count_alias_nodes(c, fy_document_root(c->doc), NULL, 0, &budget);
    if (!st) { /* count_alias_nodes refused nesting deeper than CONFIG_MAX_DEPTH */
        bool deep = false;
        struct fy_node *bad = misread_scalar(fy_document_root(c->doc), 0, &deep);
        if (bad) st = qc_config_fail(c, bad, QS_EFORMAT, MISREAD_SCALAR, fy_library_version());
    }
    if (!st && fy_document_resolve(c->doc) != 0) {
        void *it = NULL;
        struct fy_diag_error *e, *last = NULL;
        while ((e = fy_diag_errors_iterate(c->diag, &it)))
            last = e;
        st = last
                 ? qs_error_set(c->err, QS_EFORMAT, "%s:%d:%d: YAML alias error: %s", c->file,
                                last->line, last->column, last->msg)
                 : qs_error_set(c->err, QS_EFORMAT, "%s: cannot resolve the YAML aliases", c->file);
    }
    return st;
}

qs_status qc_config_load(const char *path, const char *const *sets, size_t n_sets, qc_config **out,
                         qs_error *err) {
    if (!out || !path || (n_sets && !sets))
        return qs_error_set(err, QS_EINVAL, "qc_config_load: NULL argument");
    *out = NULL;
    qc_config *c = calloc(1, sizeof *c);
    if (!c) return qs_error_set(err, QS_ENOMEM, "out of memory");
    c->err = err;
    c->sets = sets;
    c->n_sets = n_sets;
    c->file = strdup(path);
    c->dir = strdup(path);
    c->set_nodes = calloc(n_sets ? n_sets : 1, sizeof *c->set_nodes);
    c->set_keys = calloc(n_sets ? n_sets : 1, sizeof *c->set_keys);
    struct fy_diag_cfg dc;
    fy_diag_cfg_default(&dc);
    dc.fp = NULL;
    c->diag = fy_diag_create(&dc);
    if (!c->file || !c->dir || !c->set_nodes || !c->set_keys || !c->diag) {
        qc_config_free(c);
        return qs_error_set(err, QS_ENOMEM, "out of memory");
    }
    fy_diag_set_collect_errors(c->diag, true);
    char *slash = strrchr(c->dir, '/');
    if (slash == c->dir)
        slash[1] = 0;
    else if (slash)
        *slash = 0;
    else
        strcpy(c->dir, ".");
    qs_status st = read_text(c);
    if (!st) st = build_document(c, strlen(c->text));
    for (size_t i = 0; !st && i < n_sets; i++)
        st = apply_set(c, i);
    if (st) {
        qc_config_free(c);
        return st;
    }
    *out = c;
    return QS_OK;
}

void qc_config_free(qc_config *c) {
    if (!c) return;
    if (c->doc) fy_document_destroy(c->doc);
    free(c->text); /* after the document, whose scalars point into it */
    if (c->diag) fy_diag_destroy(c->diag);
    free(c->set_nodes);
    free(c->set_keys);
    free(c->file);
    free(c->dir);
    free(c);
}
