/* Grid files: YAML parsing (libfyaml), --set overrides and validation. Format: grid.h. */
#include "grid.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <libfyaml.h>
#include <limits.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const qc_linear_kinds[7] = {"q", "k", "v", "o", "gate", "up", "down"};

static const char *const mode_names[QC_MODE_COUNT] = {"component", "block", "layer",
                                                      "leave_one_out", "cumulative"};

const char *qc_mode_name(qc_mode m) {
    return (m >= 0 && m < QC_MODE_COUNT) ? mode_names[m] : "?";
}

/* Named Llama shapes for synthetic models (blocks and vocabulary, from each model's
 * published config.json on the Hugging Face hub). */
static const struct {
    const char *name;
    int n_layers, vocab_size, max_position_embeddings;
} synthetic_shapes[] = {
    {"llama2-7b", 32, 32000, 4096},       {"llama2-13b", 40, 32000, 4096},
    {"llama2-70b", 80, 32000, 4096},      {"llama3-8b", 32, 128256, 8192},
    {"llama3-70b", 80, 128256, 8192},     {"llama3.1-8b", 32, 128256, 131072},
    {"llama3.1-70b", 80, 128256, 131072}, {"llama3.1-405b", 126, 128256, 131072},
    {"llama3.2-1b", 16, 128256, 131072},  {"llama3.2-3b", 28, 128256, 131072},
};

static const char *const metric_names[] = {"kl", "ppl", "sqnr", "top1"}; /* sorted */

/* Parsing state of one grid file. */
typedef struct parser {
    const char *file;
    char *dir; /* directory of the grid file, for relative paths */
    struct fy_diag *diag;
    struct fy_document *doc;
    struct fy_node **set_nodes; /* value node each --set put in place, for error locations */
    struct fy_node **set_keys;  /* key node each "+key=value" created (no position in the file) */
    const char *const *sets;
    size_t n_sets;
    const qc_grid_probe *probe;
    qs_error *err;
} parser;

/* 1 + the index of the --set argument node n came from (n or an ancestor is its value, or n
 * is the key it added), 0 when n comes from the grid file. */
static size_t from_set(const parser *p, struct fy_node *n) {
    for (struct fy_node *a = n; a; a = fy_node_get_parent(a))
        for (size_t i = 0; i < p->n_sets; i++)
            if (p->set_nodes[i] == a || p->set_keys[i] == a) return i + 1;
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

/* Records "file:line:column: message" for node n (or "--set ARG: message" when n came from an
 * override), using libfyaml's own report of the node's position. */
static qs_status fail_at(parser *p, struct fy_node *n, qs_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static qs_status fail_at(parser *p, struct fy_node *n, qs_status code, const char *fmt, ...) {
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t set = from_set(p, n);
    if (set) return qs_error_set(p->err, code, "--set %s: %s", p->sets[set - 1], msg);
    int line = 0, column = 0;
    /* An empty value ("ctx:" and nothing after it) is a null scalar without a token, so
       libfyaml knows no position for it: name its key's. */
    if (n && fy_node_is_scalar(n) && !fy_node_get_scalar_token(n)) {
        struct fy_node *k = key_of(n);
        n = k ? k : fy_node_get_parent(n); /* an empty list item: the list's */
    }
    /* Nodes an override created have no position in the file; from_set named them above, so
       n is one libfyaml parsed from the grid text here. */
    if (n) {
        fy_node_report(n, FYET_ERROR, "%s", msg);
        void *it = NULL;
        struct fy_diag_error *e, *last = NULL;
        while ((e = fy_diag_errors_iterate(p->diag, &it)))
            last = e;
        if (last) {
            line = last->line;
            column = last->column;
        }
    }
    return qs_error_set(p->err, code, "%s:%d:%d: %s", p->file, line, column, msg);
}

/* The scalar text of n, NUL-terminated (libfyaml keeps it); NULL when n is not a scalar. */
static const char *scalar(struct fy_node *n) {
    return (n && fy_node_is_scalar(n)) ? fy_node_get_scalar0(n) : NULL;
}

static qs_status get_string(parser *p, struct fy_node *n, const char *what, const char **out) {
    const char *s = scalar(n);
    if (!s || !*s) return fail_at(p, n, QS_EFORMAT, "expected a non-empty string for %s", what);
    *out = s;
    return QS_OK;
}

static qs_status get_int(parser *p, struct fy_node *n, const char *what, long lo, long hi,
                         int *out) {
    const char *s = scalar(n);
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi)
        return fail_at(p, n, QS_EFORMAT, "expected an integer in [%ld, %ld] for %s, got '%s'", lo,
                       hi, what, s ? s : "(not a scalar)");
    *out = (int)v;
    return QS_OK;
}

/* Every key of mapping n must be one of the NULL-terminated `allowed`. */
static qs_status check_keys(parser *p, struct fy_node *n, const char *what,
                            const char *const *allowed) {
    void *it = NULL;
    struct fy_node_pair *pair;
    while ((pair = fy_node_mapping_iterate(n, &it))) {
        struct fy_node *k = fy_node_pair_key(pair);
        const char *ks = scalar(k);
        int ok = 0;
        for (size_t i = 0; ks && allowed[i]; i++)
            ok |= strcmp(ks, allowed[i]) == 0;
        if (!ok) {
            char list[256] = "";
            for (size_t i = 0; allowed[i]; i++) {
                if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
                strncat(list, allowed[i], sizeof list - strlen(list) - 1);
            }
            return fail_at(p, k, QS_EINVAL, "unknown key '%s' in %s (expected one of: %s)",
                           ks ? ks : "(not a scalar)", what, list);
        }
    }
    return QS_OK;
}

static struct fy_node *lookup(struct fy_node *map, const char *key) {
    return fy_node_mapping_lookup_by_string(map, key, FY_NT);
}

/* A value that may be one scalar or a sequence of scalars: calls fn on each scalar node. */
typedef qs_status (*item_fn)(parser *p, struct fy_node *n, void *ctx);
static qs_status each_item(parser *p, struct fy_node *n, const char *what, item_fn fn, void *ctx) {
    if (fy_node_is_scalar(n)) return fn(p, n, ctx);
    if (!fy_node_is_sequence(n) || fy_node_sequence_item_count(n) == 0)
        return fail_at(p, n, QS_EFORMAT, "expected a name or a non-empty list for %s", what);
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(n, &it))) {
        qs_status st = fn(p, item, ctx);
        if (st) return st;
    }
    return QS_OK;
}

/* Expands ${VAR}, ${VAR:-default} (the default may itself hold ${...}) and a leading "~/".
 * Returns a new string or NULL when a variable is unset and has no default (*bad names it). */
static char *expand_env(const char *in, char *bad, size_t bad_len) {
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
            size_t inner = (size_t)(e - 1 - b);
            char *body = strndup(b, inner);
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
                sub = expand_env(dflt + 2, bad, bad_len);
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

/* Resolves a path: environment, then relative to the grid's directory (or, for a path given
 * with --set on the command line, to the current directory), then realpath. A path that does
 * not exist is QS_ENOTFOUND at node n. */
static qs_status resolve_path(parser *p, struct fy_node *n, const char *what, const char *text,
                              char **out) {
    char bad[256] = "";
    char *exp = expand_env(text, bad, sizeof bad);
    if (!exp) return fail_at(p, n, QS_EINVAL, "cannot expand %s '%s': %s", what, text, bad);
    char *joined = exp, cwd[4096];
    const char *base = p->dir;
    if (from_set(p, n)) base = getcwd(cwd, sizeof cwd) ? cwd : ".";
    if (exp[0] != '/') {
        size_t l = strlen(base) + strlen(exp) + 2;
        joined = malloc(l);
        if (!joined) {
            free(exp);
            return qs_error_set(p->err, QS_ENOMEM, "out of memory");
        }
        snprintf(joined, l, "%s/%s", base, exp);
        free(exp);
    }
    char *real = realpath(joined, NULL);
    if (!real) {
        int e = errno;
        qs_status st = fail_at(p, n, e == ENOENT ? QS_ENOTFOUND : QS_EIO, "%s %s: %s", what, joined,
                               e == ENOENT ? "no such file or directory" : strerror(e));
        free(joined);
        return st;
    }
    free(joined);
    *out = real;
    return QS_OK;
}

static void hex_digest(const void *data, size_t len, char hex[65]) {
    unsigned char h[32];
    crypto_generichash(h, sizeof h, data, len, NULL, 0);
    sodium_bin2hex(hex, 65, h, sizeof h);
}

static qs_status parse_model(parser *p, struct fy_node *n, qc_grid_model *m) {
    struct fy_node *path_n = n, *name_n = NULL, *syn_n = NULL, *seed_n = NULL;
    if (fy_node_is_mapping(n)) {
        static const char *const keys[] = {"path", "name", "synthetic", "seed", NULL};
        qs_status st = check_keys(p, n, "a model", keys);
        if (st) return st;
        path_n = lookup(n, "path");
        name_n = lookup(n, "name");
        syn_n = lookup(n, "synthetic");
        seed_n = lookup(n, "seed");
        if (!!path_n == !!syn_n)
            return fail_at(p, n, QS_EFORMAT,
                           "expected a model with exactly one of 'path' or 'synthetic'");
        if (seed_n && !syn_n)
            return fail_at(p, seed_n, QS_EINVAL, "'seed' applies to synthetic models only");
    } else if (!fy_node_is_scalar(n)) {
        return fail_at(p, n, QS_EFORMAT,
                       "expected a model path or a mapping with 'path' or 'synthetic'");
    }
    const char *name = NULL;
    qs_status st;
    if (name_n && (st = get_string(p, name_n, "the model name", &name))) return st;
    if (syn_n) {
        const char *shape = NULL;
        int seed = 0;
        if ((st = get_string(p, syn_n, "the synthetic shape", &shape))) return st;
        if (seed_n && (st = get_int(p, seed_n, "the seed", 0, INT_MAX, &seed))) return st;
        size_t i = 0, ns = sizeof synthetic_shapes / sizeof synthetic_shapes[0];
        while (i < ns && strcmp(synthetic_shapes[i].name, shape))
            i++;
        if (i == ns) {
            char list[512] = "";
            for (size_t j = 0; j < ns; j++) {
                if (j) strncat(list, ", ", sizeof list - strlen(list) - 1);
                strncat(list, synthetic_shapes[j].name, sizeof list - strlen(list) - 1);
            }
            return fail_at(p, syn_n, QS_EINVAL,
                           "unknown synthetic shape '%s' (expected one of: %s)", shape, list);
        }
        char buf[128];
        snprintf(buf, sizeof buf, "synthetic:%s:%d", shape, seed);
        m->path = strdup(buf);
        snprintf(buf, sizeof buf, "synthetic:%s", shape);
        m->name = strdup(name ? name : buf);
        m->facts.n_layers = synthetic_shapes[i].n_layers;
        m->facts.vocab_size = synthetic_shapes[i].vocab_size;
        m->facts.max_position_embeddings = synthetic_shapes[i].max_position_embeddings;
        hex_digest(m->path, strlen(m->path), m->facts.digest);
        return (m->path && m->name) ? QS_OK : qs_error_set(p->err, QS_ENOMEM, "out of memory");
    }
    const char *text = NULL;
    if ((st = get_string(p, path_n, "the model path", &text))) return st;
    if ((st = resolve_path(p, path_n, "model file", text, &m->path))) return st;
    const char *base = strrchr(m->path, '/');
    m->name = strdup(name ? name : (base ? base + 1 : m->path));
    if (!m->name) return qs_error_set(p->err, QS_ENOMEM, "out of memory");
    qs_error e = {0};
    st = p->probe->model(p->probe->user, m->path, &m->facts, &e);
    if (st) return fail_at(p, path_n, st, "cannot read model: %s", e.msg);
    if (m->facts.n_layers <= 0 || m->facts.vocab_size <= 0)
        return fail_at(p, path_n, QS_EFORMAT, "model %s reports %d blocks and a vocabulary of %d",
                       m->path, m->facts.n_layers, m->facts.vocab_size);
    return QS_OK;
}

static qs_status parse_dataset(parser *p, struct fy_node *n, qc_grid *g, struct fy_node **tokens_n,
                               struct fy_node **ctx_n) {
    if (!n || !fy_node_is_mapping(n))
        return fail_at(p, n ? n : fy_document_root(p->doc), QS_EFORMAT,
                       "expected 'dataset' as a mapping with 'tokens', 'ctx' and 'max_chunks'");
    static const char *const keys[] = {"tokens", "ctx", "max_chunks", NULL};
    qs_status st = check_keys(p, n, "the dataset", keys);
    if (st) return st;
    struct fy_node *t = lookup(n, "tokens"), *c = lookup(n, "ctx"), *mc = lookup(n, "max_chunks");
    if (!t) return fail_at(p, n, QS_EFORMAT, "expected a 'tokens' key naming the token file");
    const char *text = NULL;
    if ((st = get_string(p, t, "the token file", &text))) return st;
    if ((st = resolve_path(p, t, "token file", text, &g->dataset_path))) return st;
    g->ctx = 256;
    /* ctx >= 3: a chunk scores positions ctx/2 .. ctx-2 (worker/engine/eval.h), ctx-1-ctx/2 of
       them, which is 0 at ctx 2 (metrics over no position) and 1 at ctx 3. */
    if (c && (st = get_int(p, c, "dataset.ctx (tokens per chunk)", 3, 1 << 20, &g->ctx))) return st;
    if (mc && (st = get_int(p, mc, "dataset.max_chunks (0: all)", 0, INT_MAX, &g->max_chunks)))
        return st;
    qs_error e = {0};
    st = p->probe->dataset(p->probe->user, g->dataset_path, &g->dataset, &e);
    if (st) return fail_at(p, t, st, "cannot read token file: %s", e.msg);
    if (g->dataset.n_tokens < (size_t)g->ctx)
        return fail_at(p, c ? c : t, QS_EINVAL,
                       "the token file holds %zu tokens, fewer than one chunk of ctx %d",
                       g->dataset.n_tokens, g->ctx);
    *tokens_n = t;
    *ctx_n = c ? c : t;
    return QS_OK;
}

/* Options each format accepts; defaults are the numeric core's (kernels/quant.h). */
static qs_status parse_format(parser *p, struct fy_node *n, qc_grid_format *f) {
    struct fy_node *name_n = n, *opt_n = NULL;
    qs_status st;
    if (fy_node_is_mapping(n)) {
        static const char *const keys[] = {"name", "options", NULL};
        if ((st = check_keys(p, n, "a format", keys))) return st;
        name_n = lookup(n, "name");
        opt_n = lookup(n, "options");
        if (!name_n) return fail_at(p, n, QS_EFORMAT, "expected a 'name' key naming the format");
    }
    const char *name = NULL;
    if ((st = get_string(p, name_n, "the format name", &name))) return st;
    if (!p->probe->format_known(p->probe->user, name))
        return fail_at(p, name_n, QS_EINVAL,
                       "unknown format '%s' (expected a numeric-core name such as nvfp4, mxfp4, "
                       "mxfp6_e2m3, mxfp8_e4m3, fp8_e4m3, int8_channel, int4_group, bf16)",
                       name);
    int is_mx = strncmp(name, "mx", 2) == 0, is_nv = strncmp(name, "nvfp4", 5) == 0;
    int is_int4 = strcmp(name, "int4_group") == 0, is_bf16 = strcmp(name, "bf16") == 0;
    json_t *o = json_object();
    if (!o) return qs_error_set(p->err, QS_ENOMEM, "out of memory");
    if (!is_bf16) json_object_set_new(o, "rounding", json_string("rne"));
    if (is_mx) json_object_set_new(o, "scale_rule", json_string("rceil"));
    if (is_nv) json_object_set_new(o, "clamp", json_string("none"));
    if (is_int4) json_object_set_new(o, "group_size", json_integer(128));
    if (opt_n) {
        if (!fy_node_is_mapping(opt_n)) {
            json_decref(o);
            return fail_at(p, opt_n, QS_EFORMAT, "expected 'options' as a mapping");
        }
        void *it = NULL;
        struct fy_node_pair *pair;
        while ((pair = fy_node_mapping_iterate(opt_n, &it))) {
            struct fy_node *k = fy_node_pair_key(pair), *v = fy_node_pair_value(pair);
            const char *ks = scalar(k), *vs = scalar(v);
            qs_error e = {0};
            if ((st = p->probe->format_option(p->probe->user, name, ks ? ks : "(not a scalar)", vs,
                                              &e))) {
                json_decref(o);
                /* Point at the key when the option itself is wrong, at the value otherwise. */
                return fail_at(p, st == QS_ENOTFOUND ? k : v, QS_EINVAL, "%s", e.msg);
            }
            if (strcmp(ks, "group_size") == 0) {
                json_object_set_new(o, ks, json_integer(strtol(vs, NULL, 10)));
                continue;
            }
            json_object_set_new(o, ks, json_string(vs));
        }
    }
    f->name = strdup(name);
    f->options_json = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(o);
    return (f->name && f->options_json) ? QS_OK : qs_error_set(p->err, QS_ENOMEM, "out of memory");
}

static qs_status add_quantize(parser *p, struct fy_node *n, void *ctx) {
    qc_grid *g = ctx;
    const char *s = scalar(n);
    int acts = -1;
    if (s && (strcmp(s, "weights") == 0 || strcasecmp(s, "w4a16") == 0)) acts = 0;
    if (s && (strcmp(s, "weights+activations") == 0 || strcasecmp(s, "w4a4") == 0)) acts = 1;
    if (acts < 0)
        return fail_at(p, n, QS_EINVAL,
                       "unknown quantize '%s' (expected weights or weights+activations)",
                       s ? s : "(not a scalar)");
    for (size_t i = 0; i < g->n_quantize; i++)
        if (g->quantize_acts[i] == acts)
            return fail_at(p, n, QS_EINVAL, "quantize '%s' is listed twice", s);
    g->quantize_acts[g->n_quantize++] = acts;
    return QS_OK;
}

static qs_status add_mode(parser *p, struct fy_node *n, void *ctx) {
    qc_grid *g = ctx;
    const char *s = scalar(n);
    int m = 0;
    while (s && m < QC_MODE_COUNT && strcmp(s, mode_names[m]))
        m++;
    if (!s || m == QC_MODE_COUNT)
        return fail_at(p, n, QS_EINVAL,
                       "unknown isolation mode '%s' (expected component, block, layer, "
                       "leave_one_out or cumulative)",
                       s ? s : "(not a scalar)");
    for (size_t i = 0; i < g->n_modes; i++)
        if (g->modes[i] == (qc_mode)m)
            return fail_at(p, n, QS_EINVAL, "mode '%s' is listed twice", s);
    g->modes[g->n_modes++] = (qc_mode)m;
    return QS_OK;
}

static qs_status add_metric(parser *p, struct fy_node *n, void *ctx) {
    unsigned *mask = ctx;
    const char *s = scalar(n);
    size_t i = 0, nm = sizeof metric_names / sizeof metric_names[0];
    while (s && i < nm && strcmp(s, metric_names[i]))
        i++;
    if (!s || i == nm)
        return fail_at(p, n, QS_EINVAL, "unknown metric '%s' (expected ppl, kl, top1 or sqnr)",
                       s ? s : "(not a scalar)");
    if (*mask & (1u << i)) return fail_at(p, n, QS_EINVAL, "metric '%s' is listed twice", s);
    *mask |= 1u << i;
    return QS_OK;
}

static qs_status parse_sensitivity(parser *p, struct fy_node *n, qc_grid *g) {
    if (!n || !fy_node_is_mapping(n))
        return fail_at(p, n ? n : fy_document_root(p->doc), QS_EFORMAT,
                       "expected 'sensitivity' as a mapping with 'formats', 'quantize', 'modes' "
                       "and 'metrics'");
    static const char *const keys[] = {"formats", "quantize", "modes", "metrics", NULL};
    qs_status st = check_keys(p, n, "sensitivity", keys);
    if (st) return st;
    struct fy_node *f = lookup(n, "formats");
    if (!f) return fail_at(p, n, QS_EFORMAT, "expected a 'formats' list");
    if (fy_node_is_scalar(f)) {
        g->formats = calloc(1, sizeof *g->formats);
        if (!g->formats) return qs_error_set(p->err, QS_ENOMEM, "out of memory");
        g->n_formats = 1;
        if ((st = parse_format(p, f, &g->formats[0]))) return st;
    } else {
        int count = fy_node_is_sequence(f) ? fy_node_sequence_item_count(f) : 0;
        if (count <= 0) return fail_at(p, f, QS_EFORMAT, "expected a non-empty list of formats");
        g->formats = calloc((size_t)count, sizeof *g->formats);
        if (!g->formats) return qs_error_set(p->err, QS_ENOMEM, "out of memory");
        void *it = NULL;
        struct fy_node *item;
        while ((item = fy_node_sequence_iterate(f, &it))) {
            qc_grid_format *fmt = &g->formats[g->n_formats++];
            if ((st = parse_format(p, item, fmt))) return st;
            for (size_t i = 0; i + 1 < g->n_formats; i++)
                if (!strcmp(g->formats[i].name, fmt->name) &&
                    !strcmp(g->formats[i].options_json, fmt->options_json))
                    return fail_at(p, item, QS_EINVAL, "format %s with options %s is listed twice",
                                   fmt->name, fmt->options_json);
        }
    }
    struct fy_node *q = lookup(n, "quantize");
    if (q) {
        if ((st = each_item(p, q, "quantize", add_quantize, g))) return st;
    } else {
        g->quantize_acts[g->n_quantize++] = 0;
    }
    struct fy_node *m = lookup(n, "modes");
    if (m) {
        if ((st = each_item(p, m, "modes", add_mode, g))) return st;
    } else {
        g->modes[g->n_modes++] = QC_MODE_COMPONENT;
    }
    unsigned mask = 0;
    struct fy_node *mt = lookup(n, "metrics");
    if (mt) {
        if ((st = each_item(p, mt, "metrics", add_metric, &mask))) return st;
    } else {
        mask = (1u << (sizeof metric_names / sizeof metric_names[0])) - 1;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < sizeof metric_names / sizeof metric_names[0]; i++)
        if (mask & (1u << i)) json_array_append_new(arr, json_string(metric_names[i]));
    g->metrics_json = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return g->metrics_json ? QS_OK : qs_error_set(p->err, QS_ENOMEM, "out of memory");
}

/* Applies one override "[+]a.b.c=value" to the document (Hydra's override grammar, reduced
 * to dotted keys and sequence indexes). Records the new value node for error locations. */
static qs_status apply_set(parser *p, size_t idx) {
    const char *arg = p->sets[idx];
    const char *eq = strchr(arg, '=');
    int add = arg[0] == '+';
    const char *key = arg + add;
    if (!eq || eq == key)
        return qs_error_set(p->err, QS_EINVAL,
                            "--set %s: expected key=value (e.g. dataset.ctx=512)", arg);
    struct fy_node *node = fy_document_root(p->doc);
    const char *seg = key;
    for (;;) {
        const char *dot = memchr(seg, '.', (size_t)(eq - seg));
        const char *seg_end = dot ? dot : eq;
        size_t seg_len = (size_t)(seg_end - seg);
        if (seg_len == 0)
            return qs_error_set(p->err, QS_EINVAL, "--set %s: empty key segment", arg);
        if (node && fy_node_is_sequence(node)) {
            char *end;
            long i = strtol(seg, &end, 10);
            int count = fy_node_sequence_item_count(node);
            if (end != seg_end || i < 0 || i >= count)
                return qs_error_set(p->err, QS_EINVAL,
                                    "--set %s: '%.*s' is not an index of a list of %d items", arg,
                                    (int)seg_len, seg, count);
            struct fy_node *item = fy_node_sequence_get_by_index(node, (int)i);
            if (dot) {
                node = item;
                seg = dot + 1;
                continue;
            }
            if (add)
                return qs_error_set(p->err, QS_EINVAL,
                                    "--set %s: item '%.*s' exists ('+' adds a key; write %s to "
                                    "replace the item)",
                                    arg, (int)(seg_end - key), key, key);
            struct fy_node *v = fy_node_build_from_string(p->doc, eq + 1, FY_NT);
            if (!v || fy_node_sequence_insert_before(node, item, v) != 0)
                return qs_error_set(p->err, QS_EINVAL, "--set %s: the value is not valid YAML",
                                    arg);
            fy_node_free(fy_node_sequence_remove(node, item));
            p->set_nodes[idx] = v;
            return QS_OK;
        }
        if (!node || !fy_node_is_mapping(node))
            return qs_error_set(p->err, QS_EINVAL, "--set %s: '%.*s' is not inside a mapping", arg,
                                (int)(seg_end - key), key);
        struct fy_node_pair *pair = fy_node_mapping_lookup_pair_by_string(node, seg, seg_len);
        if (dot) {
            if (!pair)
                return qs_error_set(p->err, QS_EINVAL, "--set %s: the grid has no key '%.*s'", arg,
                                    (int)(seg_end - key), key);
            node = fy_node_pair_value(pair);
            seg = dot + 1;
            continue;
        }
        if (!pair && !add)
            return qs_error_set(p->err, QS_EINVAL,
                                "--set %s: the grid has no key '%.*s' (write +%s to add it)", arg,
                                (int)(seg_end - key), key, arg);
        if (pair && add)
            return qs_error_set(p->err, QS_EINVAL,
                                "--set %s: the grid already has key '%.*s' ('+' adds a key; write "
                                "%s to replace its value)",
                                arg, (int)(seg_end - key), key, key);
        struct fy_node *v = eq[1] ? fy_node_build_from_string(p->doc, eq + 1, FY_NT)
                                  : fy_node_create_scalar_copy(p->doc, "", 0);
        if (!v)
            return qs_error_set(p->err, QS_EINVAL, "--set %s: the value is not valid YAML", arg);
        struct fy_node *k = pair ? NULL : fy_node_create_scalar_copy(p->doc, seg, seg_len);
        int rc = pair ? fy_node_pair_set_value(pair, v) : fy_node_mapping_append(node, k, v);
        if (rc != 0)
            return qs_error_set(p->err, QS_EINVAL, "--set %s: cannot apply the override", arg);
        p->set_nodes[idx] = v;
        p->set_keys[idx] = k;
        return QS_OK;
    }
}

static qs_status parse_root(parser *p, qc_grid *g) {
    struct fy_node *root = fy_document_root(p->doc);
    if (!root || !fy_node_is_mapping(root))
        return fail_at(p, root, QS_EFORMAT,
                       "expected a mapping (name, models, dataset, sensitivity) at the top");
    static const char *const keys[] = {"name",     "description",  "kind",
                                       "models",   "dataset",      "sensitivity",
                                       "priority", "max_attempts", NULL};
    qs_status st = check_keys(p, root, "the grid", keys);
    if (st) return st;
    const char *s = NULL;
    struct fy_node *n = lookup(root, "name");
    if (!n) return fail_at(p, root, QS_EFORMAT, "expected a 'name' key (the experiment name)");
    if ((st = get_string(p, n, "the experiment name", &s))) return st;
    g->name = strdup(s);
    n = lookup(root, "description");
    if (n && !fy_node_is_scalar(n))
        return fail_at(p, n, QS_EFORMAT, "expected a string for the description");
    g->description = strdup(n ? scalar(n) : "");
    if (!g->name || !g->description) return qs_error_set(p->err, QS_ENOMEM, "out of memory");
    n = lookup(root, "kind");
    if (n && (!scalar(n) || strcmp(scalar(n), "sensitivity")))
        return fail_at(p, n, QS_EINVAL, "unknown kind '%s' (expected sensitivity)",
                       scalar(n) ? scalar(n) : "(not a scalar)");
    g->max_attempts = 3;
    if ((n = lookup(root, "priority")) &&
        (st = get_int(p, n, "priority", -1000000, 1000000, &g->priority)))
        return st;
    if ((n = lookup(root, "max_attempts")) &&
        (st = get_int(p, n, "max_attempts", 1, 100, &g->max_attempts)))
        return st;

    struct fy_node *models = lookup(root, "models");
    int count = models && fy_node_is_sequence(models) ? fy_node_sequence_item_count(models) : 0;
    if (count <= 0)
        return fail_at(p, models ? models : root, QS_EFORMAT,
                       "expected 'models' as a non-empty list");
    g->models = calloc((size_t)count, sizeof *g->models);
    if (!g->models) return qs_error_set(p->err, QS_ENOMEM, "out of memory");
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(models, &it))) {
        qc_grid_model *m = &g->models[g->n_models++];
        if ((st = parse_model(p, item, m))) return st;
        for (size_t i = 0; i + 1 < g->n_models; i++)
            if (!strcmp(g->models[i].facts.digest, m->facts.digest))
                return fail_at(p, item, QS_EINVAL,
                               "model %s is the same model as %s (equal digests)", m->name,
                               g->models[i].name);
    }
    struct fy_node *tokens_n = NULL, *ctx_n = NULL;
    if ((st = parse_dataset(p, lookup(root, "dataset"), g, &tokens_n, &ctx_n))) return st;
    for (size_t i = 0; i < g->n_models; i++) {
        const qc_model_facts *f = &g->models[i].facts;
        if (g->dataset.max_token >= (uint32_t)f->vocab_size)
            return fail_at(p, tokens_n, QS_EINVAL,
                           "token id %u in %s is beyond the vocabulary of model %s (vocab_size %d)",
                           g->dataset.max_token, g->dataset_path, g->models[i].name, f->vocab_size);
        /* The worker's rule (worker/engine/eval.c): the header's vocabulary must fit the
           model's, whatever ids the file holds. */
        if (g->dataset.vocab_size > (uint32_t)f->vocab_size)
            return fail_at(p, tokens_n, QS_EINVAL,
                           "the token file %s declares vocab_size %u in its header, larger than "
                           "the vocabulary of model %s (vocab_size %d)",
                           g->dataset_path, g->dataset.vocab_size, g->models[i].name,
                           f->vocab_size);
        if (f->max_position_embeddings > 0 && g->ctx > f->max_position_embeddings)
            return fail_at(p, ctx_n, QS_EINVAL,
                           "dataset.ctx %d is longer than the context model %s was trained for "
                           "(max_position_embeddings %d)",
                           g->ctx, g->models[i].name, f->max_position_embeddings);
    }
    return parse_sensitivity(p, lookup(root, "sensitivity"), g);
}

/* Largest grid file accepted: grids are a few kilobytes; this bounds what a mistaken path
 * (a model file given as the grid) costs to read. */
#define GRID_MAX_BYTES ((size_t)4 << 20)

/* Length of the UTF-8 sequence starting at s (at most n bytes), 0 when it is not valid UTF-8
 * (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF) or is a control
 * character YAML does not allow (YAML 1.2 section 5.1: printable characters, tab, LF, CR). */
static size_t utf8_char(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return (c >= 0x20 && c != 0x7f) || c == '\t' || c == '\n' || c == '\r';
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
    if (!len || len > n || c > 0xf4) return 0;
    unsigned cp = c & (0x3f >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const unsigned min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

/* Reads the grid file and checks that it is UTF-8 text before libfyaml sees it: YAML requires
 * Unicode, and libfyaml 0.7 loops forever on a directive line ('%' at the start) holding an
 * invalid byte (found by tests/cli/fuzz_grid.c), so such input must never reach it.
 * Errors: QS_ENOTFOUND / QS_EIO (open, read), QS_EINVAL (over GRID_MAX_BYTES), QS_EFORMAT
 * naming file:line:column of the first byte that is not UTF-8 text, QS_ENOMEM. */
static qs_status read_grid_text(const char *path, char **out, size_t *out_len, qs_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return qs_error_set(err, errno == ENOENT ? QS_ENOTFOUND : QS_EIO,
                            "%s: cannot open grid file: %s", path, strerror(errno));
    char *buf = malloc(GRID_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, GRID_MAX_BYTES + 1, f) : 0;
    int failed = buf && ferror(f);
    fclose(f);
    if (!buf) return qs_error_set(err, QS_ENOMEM, "out of memory");
    if (failed || n > GRID_MAX_BYTES) {
        free(buf);
        return failed ? qs_error_set(err, QS_EIO, "%s: read error", path)
                      : qs_error_set(err, QS_EINVAL, "%s: larger than %zu bytes: not a grid file",
                                     path, GRID_MAX_BYTES);
    }
    int line = 1, column = 1;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_char((const unsigned char *)buf + i, n - i);
        if (!len) {
            qs_status st = qs_error_set(err, QS_EFORMAT,
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
    *out = buf;
    *out_len = n;
    return QS_OK;
}

/* Nodes that following YAML aliases may reach before the grid is refused: a grid is a few
 * hundred nodes, and nine levels of ten aliases each (the "billion laughs") would be 10^9. */
#define GRID_MAX_ALIAS_NODES 100000
/* Deepest nesting of mappings and sequences walked (a grid nests four levels). */
#define GRID_MAX_DEPTH 64

/* Counts the nodes of n, following aliases; every node reached through an alias adds to
 * *budget. Refuses (QS_EINVAL at the alias) once it passes GRID_MAX_ALIAS_NODES, before
 * libfyaml copies anything, and refuses nesting deeper than GRID_MAX_DEPTH. */
static qs_status count_alias_nodes(parser *p, struct fy_node *n, struct fy_node *alias, int depth,
                                   size_t *budget) {
    if (!n) return QS_OK;
    if (depth > GRID_MAX_DEPTH)
        return fail_at(p, alias ? alias : n, QS_EINVAL,
                       "nesting (with aliases expanded) deeper than %d levels", GRID_MAX_DEPTH);
    if (alias && ++*budget > GRID_MAX_ALIAS_NODES)
        return fail_at(p, alias, QS_EINVAL,
                       "YAML aliases expand to more than %d nodes (a grid needs a few hundred)",
                       GRID_MAX_ALIAS_NODES);
    qs_status st = QS_OK;
    if (fy_node_is_alias(n)) {
        struct fy_node *target = fy_node_resolve_alias(n);
        /* An unknown anchor is left to fy_document_resolve, which names it. */
        return target ? count_alias_nodes(p, target, alias ? alias : n, depth + 1, budget) : QS_OK;
    }
    if (fy_node_is_sequence(n)) {
        void *it = NULL;
        struct fy_node *item;
        while (!st && (item = fy_node_sequence_iterate(n, &it)))
            st = count_alias_nodes(p, item, alias, depth + 1, budget);
    } else if (fy_node_is_mapping(n)) {
        void *it = NULL;
        struct fy_node_pair *pair;
        while (!st && (pair = fy_node_mapping_iterate(n, &it))) {
            st = count_alias_nodes(p, fy_node_pair_key(pair), alias, depth + 1, budget);
            if (!st) st = count_alias_nodes(p, fy_node_pair_value(pair), alias, depth + 1, budget);
        }
    }
    return st;
}

/* Refuses a scalar (key or value) holding NUL or a control character (C0, DEL, C1): a name
 * or path cut at a NUL, or a newline in an experiment name, is not what the grid shows. The
 * description alone may hold tab and newline (multi-line free text). */
static qs_status check_text(parser *p, struct fy_node *n, struct fy_node *description, int depth) {
    if (!n || depth > GRID_MAX_DEPTH) return QS_OK;
    qs_status st = QS_OK;
    if (fy_node_is_scalar(n)) {
        size_t len = 0;
        const unsigned char *s = (const unsigned char *)fy_node_get_scalar(n, &len);
        for (size_t i = 0; s && i < len; i++) {
            unsigned c = s[i];
            int c1 = c == 0xc2 && i + 1 < len && s[i + 1] >= 0x80 && s[i + 1] <= 0x9f;
            if (n == description && (c == '\t' || c == '\n')) continue;
            if (c < 0x20 || c == 0x7f || c1)
                return fail_at(p, n, QS_EINVAL,
                               "control character U+%04X at byte %zu of a string (names, paths "
                               "and values are printable text; only the description may hold "
                               "tab and newline)",
                               c1 ? s[i + 1] : c, i);
        }
    } else if (fy_node_is_sequence(n)) {
        void *it = NULL;
        struct fy_node *item;
        while (!st && (item = fy_node_sequence_iterate(n, &it)))
            st = check_text(p, item, description, depth + 1);
    } else if (fy_node_is_mapping(n)) {
        void *it = NULL;
        struct fy_node_pair *pair;
        while (!st && (pair = fy_node_mapping_iterate(n, &it))) {
            st = check_text(p, fy_node_pair_key(pair), description, depth + 1);
            if (!st) st = check_text(p, fy_node_pair_value(pair), description, depth + 1);
        }
    }
    return st;
}

/* Refuses a stream of more than one document: a grid is one, and the rest would be silently
 * ignored. Walks the parser's events only (no tree, no alias expansion). */
static qs_status check_one_document(parser *p, const char *text, size_t len) {
    struct fy_parse_cfg pc = {.flags = FYPCF_QUIET, .diag = p->diag};
    struct fy_parser *fyp = fy_parser_create(&pc);
    if (!fyp || fy_parser_set_string(fyp, text, len) != 0) {
        if (fyp) fy_parser_destroy(fyp);
        return qs_error_set(p->err, QS_ENOMEM, "out of memory");
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
    return qs_error_set(p->err, QS_EFORMAT,
                        "%s:%d:%d: a second YAML document (a grid file holds one document)",
                        p->file, line, column);
}

qs_status qc_grid_load(const char *path, const char *const *sets, size_t n_sets,
                       const qc_grid_probe *probe, qc_grid **out, qs_error *err) {
    if (!out || !path || !probe || (n_sets && !sets))
        return qs_error_set(err, QS_EINVAL, "qc_grid_load: NULL argument");
    *out = NULL;
    if (sodium_init() < 0) return qs_error_set(err, QS_EINVAL, "libsodium failed to initialise");
    parser p = {.file = path, .sets = sets, .n_sets = n_sets, .probe = probe, .err = err};
    qc_grid *g = calloc(1, sizeof *g);
    p.set_nodes = calloc(n_sets ? n_sets : 1, sizeof *p.set_nodes);
    p.set_keys = calloc(n_sets ? n_sets : 1, sizeof *p.set_keys);
    char *dcopy = strdup(path);
    if (!g || !p.set_nodes || !p.set_keys || !dcopy) {
        free(g);
        free(p.set_nodes);
        free(p.set_keys);
        free(dcopy);
        return qs_error_set(err, QS_ENOMEM, "out of memory");
    }
    char *slash = strrchr(dcopy, '/');
    if (slash == dcopy)
        slash[1] = 0;
    else if (slash)
        *slash = 0;
    else
        strcpy(dcopy, ".");
    p.dir = dcopy;
    qs_status st = QS_OK;
    char *text = NULL;
    size_t text_len = 0;
    struct fy_diag_cfg dc;
    fy_diag_cfg_default(&dc);
    dc.fp = NULL;
    p.diag = fy_diag_create(&dc);
    if (!p.diag) st = qs_error_set(err, QS_ENOMEM, "out of memory");
    if (!st) {
        fy_diag_set_collect_errors(p.diag, true);
        /* Aliases are resolved below, once counting them has bounded what they expand to. */
        struct fy_parse_cfg pc = {.flags = FYPCF_QUIET, .diag = p.diag};
        g->file = strdup(path);
        st = read_grid_text(path, &text, &text_len, err);
        if (!st) {
            p.doc = fy_document_build_from_string(&pc, text, text_len);
            /* libfyaml collected the syntax error with its line and column. */
            void *it = NULL;
            struct fy_diag_error *e = p.doc ? NULL : fy_diag_errors_iterate(p.diag, &it);
            if (!p.doc && e)
                st = qs_error_set(err, QS_EFORMAT, "%s:%d:%d: YAML syntax error: %s", path, e->line,
                                  e->column, e->msg);
            else if (!p.doc)
                st = qs_error_set(err, QS_EFORMAT, "%s: not a YAML document", path);
        }
        if (!st) st = check_one_document(&p, text, text_len);
        size_t budget = 0;
        if (!st) st = count_alias_nodes(&p, fy_document_root(p.doc), NULL, 0, &budget);
        if (!st && fy_document_resolve(p.doc) != 0) {
            void *it = NULL;
            struct fy_diag_error *e, *last = NULL;
            while ((e = fy_diag_errors_iterate(p.diag, &it)))
                last = e;
            st = last ? qs_error_set(err, QS_EFORMAT, "%s:%d:%d: YAML alias error: %s", path,
                                     last->line, last->column, last->msg)
                      : qs_error_set(err, QS_EFORMAT, "%s: cannot resolve the YAML aliases", path);
        }
    }
    for (size_t i = 0; !st && i < n_sets; i++)
        st = apply_set(&p, i);
    if (!st) {
        struct fy_node *root = fy_document_root(p.doc);
        struct fy_node *desc =
            root && fy_node_is_mapping(root) ? lookup(root, "description") : NULL;
        st = check_text(&p, root, desc, 0);
    }
    if (!st) st = parse_root(&p, g);
    if (!st) {
        g->source = fy_emit_document_to_string(p.doc, FYECF_DEFAULT);
        if (!g->source || !g->file) st = qs_error_set(err, QS_ENOMEM, "out of memory");
    }
    if (p.doc) fy_document_destroy(p.doc);
    free(text); /* after the document, whose scalars point into it */
    if (p.diag) fy_diag_destroy(p.diag);
    free(p.set_nodes);
    free(p.set_keys);
    free(dcopy);
    if (st) {
        qc_grid_free(g);
        return st;
    }
    *out = g;
    return QS_OK;
}

void qc_grid_free(qc_grid *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_models; i++) {
        free(g->models[i].name);
        free(g->models[i].path);
    }
    for (size_t i = 0; i < g->n_formats; i++) {
        free(g->formats[i].name);
        free(g->formats[i].options_json);
    }
    free(g->models);
    free(g->formats);
    free(g->file);
    free(g->name);
    free(g->description);
    free(g->source);
    free(g->dataset_path);
    free(g->metrics_json);
    free(g);
}
