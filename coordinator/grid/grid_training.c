/* The training grid kind (grid_kind.h): shapes x recipes x learning rates x
 * seeds, one `train` job (kinds/train.h) per cell. The grid's only kind key is `training`:
 *
 *   kind: training
 *   training:
 *     shapes: [tiny]                 # named shapes: the engine's table (worker/engine/
 *                                    # synthetic.h: tiny, mini, small, ..., llama3-8b), or
 *                                    # {init: path} to fine-tune a checkpoint (HF dir or .gguf)
 *     dataset: {text: path, tokenizer: bytes, ctx: 128, val_fraction: 0.05,
 *               made_by: command}  # made_by: named when the text is missing
 *                                    # or {tokens: token file, ctx, val_fraction}
 *     recipes: [bf16, nvfp4, {name: nvfp4-last2, base: nvfp4, bf16_last: 2}]
 *                                    # named recipes, or a base with explicit ingredients
 *                                    # (format, w2d, rht, rht_dim, sr, bf16_first, bf16_last)
 *     lrs: [0.003]                   # peak learning rates
 *     seeds: [1, 2, 3]
 *     steps: 300                     # optimizer steps; the rest have defaults:
 *     batch: 8, accum: 1, warmup: 10% of steps, decay: cosine, min_lr_ratio: 0.1,
 *     weight_decay: 0.1, clip: 1.0, beta1: 0.9, beta2: 0.95, eval_every: 50, eval_batches: 8,
 *     log_every: 10, checkpoint_every: 100, diverge_loss: 12, data_parallel: 1,
 *     checkpoint_dir: ${XDG_CACHE_HOME:-~/.cache}/qsweep/train
 *
 * data_parallel: N > 1 trains each job on N ranks (kinds/train.h), and the job's resources ask
 * for N GPUs (resources.gpu_count, when the grid gives it, must be N).
 *
 * Named recipes are kinds/recipes.h's table, the one the worker's recipe.c reads too.
 * Checked here, at submit time, so that no job fails (and is retried) for what the file says:
 * shapes (the engine's table, through the probe), ctx within each shape's
 * max_position_embeddings, the text a regular file, token ids within each shape's vocabulary,
 * diverge_loss above ln(vocab) (a run from scratch starts there), learning rates and seeds
 * listed once, checkpoint_dir a writable or creatable folder (made absolute and canonical:
 * it is part of the job key, kinds/train.h), and, when the grid gives `resources` with GPUs,
 * room for 16 bytes per parameter of FP32 training state. Each job's label names its shape's
 * parameter count. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "grid_kind.h"
#include "recipes.h"
#include "train.h"

typedef struct tr_recipe {
    qs_train_spec r; /* only the recipe fields are used */
} tr_recipe;

typedef struct tr_data {
    char shapes[16][32];
    char *inits[16];
    qc_model_facts facts[16]; /* of each shape: the engine's table's, or the init checkpoint's */
    struct fy_node *shape_nodes[16];
    size_t n_shapes;
    tr_recipe recipes[32];
    size_t n_recipes;
    double lrs[32];
    size_t n_lrs;
    long seeds[64];
    size_t n_seeds;
    char *data_path;
    char data_digest[65];
    char tokenizer[8];
    int ctx;
    double val_fraction;
    qs_train_spec defaults; /* the scalar settings */
    char *checkpoint_dir;
} tr_data;

static void free_data(qc_grid *g) {
    tr_data *d = g->kind_data;
    if (!d) return;
    for (size_t i = 0; i < d->n_shapes; i++)
        free(d->inits[i]);
    free(d->data_path);
    free(d->checkpoint_dir);
    free(d);
    g->kind_data = NULL;
}

static qs_status add_shape(qc_config *c, struct fy_node *n, void *ctx) {
    tr_data *d = ((void **)ctx)[0];
    const qc_grid_probe *probe = ((void **)ctx)[1];
    if (d->n_shapes == 16) return qc_config_fail(c, n, QS_EINVAL, "at most 16 shapes");
    size_t i = d->n_shapes;
    qs_error e = {0};
    qs_status st;
    d->shape_nodes[i] = n;
    if (fy_node_is_mapping(n)) {
        static const char *const keys[] = {"init", NULL};
        if ((st = qc_config_check_keys(c, n, "a shape", keys))) return st;
        if (!qc_config_lookup(n, "init"))
            return qc_config_fail(c, n, QS_EINVAL,
                                  "expected {init: path} (a checkpoint to "
                                  "fine-tune) or a shape name");
        st = qc_config_path(c, qc_config_lookup(n, "init"), "initial checkpoint", &d->inits[i]);
        if (st) return st;
        if ((st = probe->model(probe->user, d->inits[i], &d->facts[i], &e)))
            return qc_config_fail(c, n, st, "%s", e.msg);
        d->n_shapes++;
        return QS_OK;
    }
    /* Named shapes are the engine's table (worker/engine/synthetic.h), through the probe: the
     * grid accepts exactly what a worker can build. */
    const char *s = qc_config_scalar(n);
    if (!s || !*s) return qc_config_fail(c, n, QS_EINVAL, "expected a shape name or {init: path}");
    if (!probe->synthetic)
        return qc_config_fail(c, n, QS_EUNSUPPORTED, "shape '%s': this reader knows no shapes", s);
    if ((st = probe->synthetic(probe->user, s, &d->facts[i], &e))) {
        const char *list = strstr(e.msg, "expected one of: ");
        return qc_config_fail(c, n, QS_EINVAL, "unknown shape '%s' (expected {init: path} or %s", s,
                              list ? list + 9 : "a named shape)");
    }
    for (size_t k = 0; k < i; k++)
        if (!d->inits[k] && !strcmp(d->shapes[k], s))
            return qc_config_fail(c, n, QS_EINVAL, "shape '%s' is listed twice", s);
    if (strlen(s) >= sizeof d->shapes[i])
        return qc_config_fail(c, n, QS_EINVAL, "shape name '%s' too long", s);
    snprintf(d->shapes[i], sizeof d->shapes[i], "%s", s);
    d->n_shapes++;
    return QS_OK;
}

/* Named recipes: a row of kinds/recipes.h's table, its ingredients copied into r. */
static int named_recipe(const char *name, qs_train_spec *r) {
    const qs_recipe_row *t = qs_recipe_find(name);
    if (!t) return 0;
    snprintf(r->recipe, sizeof r->recipe, "%s", name);
    snprintf(r->format, sizeof r->format, "%s", t->format);
    r->recipe_version = QS_TRAIN_RECIPE_VERSION;
    r->w2d = t->w2d;
    r->rht = t->rht;
    r->rht_dim = t->rht_dim;
    r->sr = t->sr;
    r->bf16_first = t->bf16_first;
    r->bf16_last = t->bf16_last;
    return 1;
}

static qs_status add_recipe(qc_config *c, struct fy_node *n, void *ctx) {
    tr_data *d = ctx;
    if (d->n_recipes == 32) return qc_config_fail(c, n, QS_EINVAL, "at most 32 recipes");
    qs_train_spec *r = &d->recipes[d->n_recipes].r;
    memset(r, 0, sizeof *r);
    qs_status st;
    char names[256];
    qs_recipe_names(names, sizeof names);
    if (fy_node_is_mapping(n)) {
        static const char *const keys[] = {"name",    "base", "format",     "w2d",       "rht",
                                           "rht_dim", "sr",   "bf16_first", "bf16_last", NULL};
        if ((st = qc_config_check_keys(c, n, "a recipe", keys))) return st;
        const char *name, *base;
        if (!qc_config_lookup(n, "name") || !qc_config_lookup(n, "base"))
            return qc_config_fail(c, n, QS_EINVAL,
                                  "expected a recipe with 'name' and 'base' (a named recipe) and "
                                  "the ingredients that differ");
        if ((st = qc_config_string(c, qc_config_lookup(n, "name"), "recipe name", &name)))
            return st;
        if ((st = qc_config_string(c, qc_config_lookup(n, "base"), "recipe base", &base)))
            return st;
        if (strlen(name) >= sizeof r->recipe)
            return qc_config_fail(c, qc_config_lookup(n, "name"), QS_EINVAL,
                                  "recipe name '%s' longer than %zu bytes", name,
                                  sizeof r->recipe - 1);
        /* A custom recipe under a built-in name would be taken for the built-in (bf16 is
         * the reference of every gap), so built-in names are reserved. */
        if (named_recipe(name, r))
            return qc_config_fail(c, qc_config_lookup(n, "name"), QS_EINVAL,
                                  "recipe name '%s' is a built-in recipe's; give the custom "
                                  "recipe a name of its own",
                                  name);
        if (!named_recipe(base, r))
            return qc_config_fail(c, qc_config_lookup(n, "base"), QS_EINVAL,
                                  "unknown recipe '%s' (expected %s)", base, names);
        snprintf(r->recipe, sizeof r->recipe, "%s", name);
        struct fy_node *f = qc_config_lookup(n, "format");
        if (f) {
            const char *fs = qc_config_scalar(f);
            if (!fs || (strcmp(fs, "nvfp4") && strcmp(fs, "mxfp4") && strcmp(fs, "fp8_e4m3") &&
                        strcmp(fs, "none")))
                return qc_config_fail(c, f, QS_EINVAL,
                                      "expected format nvfp4, mxfp4, fp8_e4m3 or none");
            snprintf(r->format, sizeof r->format, "%s", fs);
        }
        struct {
            const char *k;
            int *v;
            int hi;
        } ints[] = {{"w2d", &r->w2d, 1},
                    {"rht", &r->rht, 1},
                    {"sr", &r->sr, 1},
                    {"bf16_first", &r->bf16_first, 1000},
                    {"bf16_last", &r->bf16_last, 1000}};
        for (size_t i = 0; i < 5; i++) {
            struct fy_node *v = qc_config_lookup(n, ints[i].k);
            if (v && (st = qc_config_int(c, v, ints[i].k, 0, ints[i].hi, ints[i].v))) return st;
        }
        struct fy_node *rd = qc_config_lookup(n, "rht_dim");
        if (rd) {
            if ((st = qc_config_int(c, rd, "rht_dim", 16, 32, &r->rht_dim))) return st;
            if (r->rht_dim != 16 && r->rht_dim != 32)
                return qc_config_fail(c, rd, QS_EINVAL, "expected rht_dim 16 or 32");
        }
        if (r->w2d && strcmp(r->format, "nvfp4"))
            return qc_config_fail(c, n, QS_EINVAL,
                                  "w2d: 1 needs format nvfp4 (2D 16x16 weight blocks)");
    } else {
        const char *s = qc_config_scalar(n);
        if (!s || !named_recipe(s, r))
            return qc_config_fail(c, n, QS_EINVAL,
                                  "unknown recipe '%s' (expected %s or {name, base, ingredients})",
                                  s ? s : "(not a scalar)", names);
    }
    for (size_t k = 0; k < d->n_recipes; k++)
        if (!strcmp(d->recipes[k].r.recipe, r->recipe))
            return qc_config_fail(c, n, QS_EINVAL, "recipe '%s' is listed twice", r->recipe);
    d->n_recipes++;
    return QS_OK;
}

static qs_status add_lr(qc_config *c, struct fy_node *n, void *ctx) {
    tr_data *d = ctx;
    if (d->n_lrs == 32) return qc_config_fail(c, n, QS_EINVAL, "at most 32 learning rates");
    double v;
    qs_status st = qc_config_number(c, n, "a learning rate", 1e-12, 100.0, &v);
    if (st) return st;
    /* the same value written two ways (0.001, 1e-3) is the same runs twice */
    for (size_t k = 0; k < d->n_lrs; k++)
        if (d->lrs[k] == v)
            return qc_config_fail(c, n, QS_EINVAL, "learning rate %g is listed twice", v);
    d->lrs[d->n_lrs++] = v;
    return QS_OK;
}

static qs_status add_seed(qc_config *c, struct fy_node *n, void *ctx) {
    tr_data *d = ctx;
    if (d->n_seeds == 64) return qc_config_fail(c, n, QS_EINVAL, "at most 64 seeds");
    int v;
    qs_status st = qc_config_int(c, n, "a seed", 0, 2147483647, &v);
    for (size_t k = 0; !st && k < d->n_seeds; k++)
        if (d->seeds[k] == v) return qc_config_fail(c, n, QS_EINVAL, "seed %d is listed twice", v);
    if (!st) d->seeds[d->n_seeds++] = v;
    return st;
}

static qs_status file_digest(const char *path, char hex[65], qs_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return qs_error_set(err, QS_EIO, "%s: %s", path, strerror(errno));
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 32);
    unsigned char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        crypto_generichash_update(&h, buf, n);
    fclose(f);
    unsigned char d[32];
    crypto_generichash_final(&h, d, 32);
    sodium_bin2hex(hex, 65, d, 32);
    return QS_OK;
}

static qs_status parse_dataset(qc_config *c, struct fy_node *n, const qc_grid_probe *probe,
                               tr_data *d) {
    if (!n || !fy_node_is_mapping(n))
        return qc_config_fail(c, n, QS_EFORMAT,
                              "expected training.dataset as a mapping with "
                              "'text' or 'tokens', 'ctx', 'val_fraction'");
    static const char *const keys[] = {"text",         "tokens",  "tokenizer", "ctx",
                                       "val_fraction", "made_by", NULL};
    qs_status st = qc_config_check_keys(c, n, "training.dataset", keys);
    if (st) return st;
    struct fy_node *text = qc_config_lookup(n, "text"), *tok = qc_config_lookup(n, "tokens");
    if (!!text == !!tok)
        return qc_config_fail(c, n, QS_EINVAL, "expected one of 'text' or 'tokens'");
    struct fy_node *ctx = qc_config_lookup(n, "ctx");
    d->ctx = 128;
    if (ctx && (st = qc_config_int(c, ctx, "training.dataset.ctx", 2, 1 << 16, &d->ctx))) return st;
    d->val_fraction = 0.05;
    struct fy_node *vf = qc_config_lookup(n, "val_fraction");
    if (vf &&
        (st = qc_config_number(c, vf, "training.dataset.val_fraction", 0, 0.9, &d->val_fraction)))
        return st;
    qs_error e = {0};
    if (text) {
        struct fy_node *tz = qc_config_lookup(n, "tokenizer");
        if (tz && (!qc_config_scalar(tz) || strcmp(qc_config_scalar(tz), "bytes")))
            return qc_config_fail(c, tz, QS_EINVAL,
                                  "expected tokenizer: bytes (the only one for text)");
        /* made_by: the command that writes the text, named when the file is missing */
        struct fy_node *mb = qc_config_lookup(n, "made_by");
        char what[320] = "training text";
        if (mb && !qc_config_scalar(mb))
            return qc_config_fail(c, mb, QS_EINVAL, "expected made_by as a command (a string)");
        if (mb) snprintf(what, sizeof what, "training text (made by `%s`)", qc_config_scalar(mb));
        if ((st = qc_config_path(c, text, what, &d->data_path))) return st;
        snprintf(d->tokenizer, sizeof d->tokenizer, "bytes");
        struct stat rs;
        if (stat(d->data_path, &rs) != 0 || !S_ISREG(rs.st_mode))
            return qc_config_fail(c, text, QS_EINVAL, "%s: not a regular file", d->data_path);
        if ((st = file_digest(d->data_path, d->data_digest, &e)))
            return qc_config_fail(c, text, st, "%s", e.msg);
        struct stat sb;
        if (stat(d->data_path, &sb) == 0 && (double)sb.st_size * (1 - d->val_fraction) < d->ctx + 1)
            return qc_config_fail(c, text, QS_EINVAL, "%lld bytes: too short for ctx %d",
                                  (long long)sb.st_size, d->ctx);
    } else {
        if ((st = qc_config_path(c, tok, "token file", &d->data_path))) return st;
        snprintf(d->tokenizer, sizeof d->tokenizer, "file");
        qc_dataset_facts f;
        if ((st = probe->dataset(probe->user, d->data_path, &f, &e)))
            return qc_config_fail(c, tok, st, "%s", e.msg);
        memcpy(d->data_digest, f.digest, sizeof d->data_digest);
        for (size_t i = 0; i < d->n_shapes; i++)
            if (d->facts[i].vocab_size > 0 && (f.max_token >= (uint32_t)d->facts[i].vocab_size ||
                                               f.vocab_size > (uint32_t)d->facts[i].vocab_size))
                return qc_config_fail(c, tok, QS_EINVAL,
                                      "%s: token ids up to %u (vocabulary %u) do not fit shape "
                                      "%s's vocabulary of %d",
                                      d->data_path, f.max_token, f.vocab_size,
                                      d->inits[i] ? d->inits[i] : d->shapes[i],
                                      d->facts[i].vocab_size);
    }
    return QS_OK;
}

static qs_status opt_int(qc_config *c, struct fy_node *sec, const char *k, long lo, long hi,
                         int dflt, int *out) {
    struct fy_node *n = qc_config_lookup(sec, k);
    *out = dflt;
    return n ? qc_config_int(c, n, k, lo, hi, out) : QS_OK;
}

static qs_status opt_num(qc_config *c, struct fy_node *sec, const char *k, double lo, double hi,
                         double dflt, double *out) {
    struct fy_node *n = qc_config_lookup(sec, k);
    *out = dflt;
    return n ? qc_config_number(c, n, k, lo, hi, out) : QS_OK;
}

/* checkpoint_dir as every job of the grid names it (it is part of their key: kinds/train.h):
 * absolute (a relative one is against the grid file's folder, or the current folder for a
 * --set value), with "." and ".." and repeated or trailing slashes removed, and the part that
 * exists resolved through realpath, so one folder written two ways gives the same jobs. It
 * must be a writable folder, or creatable: its deepest existing ancestor a writable folder
 * (checked here, at submit time, on this machine: workers see it as a shared folder). */
static qs_status canonical_dir(qc_config *c, struct fy_node *n, const char *raw, char **out) {
    char cwd[4096], dirbuf[4096], path[4096];
    const char *base = NULL;
    if (raw[0] != '/') {
        const char *file = qc_config_file(c);
        const char *slash = file ? strrchr(file, '/') : NULL;
        if (!getcwd(cwd, sizeof cwd))
            return qc_config_fail(c, n, QS_EIO, "checkpoint_dir: getcwd: %s", strerror(errno));
        base = cwd;
        if (!qc_config_from_set(c, n) && slash) { /* the grid file's folder */
            size_t fl = (size_t)(slash - file), cl = file[0] == '/' ? 0 : strlen(cwd) + 1;
            if (cl + fl + 1 > sizeof dirbuf)
                return qc_config_fail(c, n, QS_EINVAL, "checkpoint_dir: grid path too long");
            if (cl) {
                memcpy(dirbuf, cwd, cl - 1);
                dirbuf[cl - 1] = '/';
            }
            memcpy(dirbuf + cl, file, fl);
            dirbuf[cl + fl] = '\0';
            base = dirbuf[0] ? dirbuf : "/";
        }
    }
    if (snprintf(path, sizeof path, "%s%s%s", base ? base : "", base ? "/" : "", raw) >=
        (int)sizeof path)
        return qc_config_fail(c, n, QS_EINVAL, "checkpoint_dir: longer than %zu bytes",
                              sizeof path - 1);
    /* components, "." and ".." removed lexically */
    char *comp[512];
    int nc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(path, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
        if (!strcmp(tok, ".")) continue;
        if (!strcmp(tok, "..")) {
            if (nc) nc--;
            continue;
        }
        if (nc == 512) return qc_config_fail(c, n, QS_EINVAL, "checkpoint_dir: too deep");
        comp[nc++] = tok;
    }
    /* the deepest existing prefix */
    char prefix[4096] = "/";
    int k = 0;
    for (; k < nc; k++) {
        char next[4096];
        snprintf(next, sizeof next, "%s%s%s", prefix, strcmp(prefix, "/") ? "/" : "", comp[k]);
        struct stat sb;
        if (stat(next, &sb) != 0) break;
        snprintf(prefix, sizeof prefix, "%s", next);
    }
    char real[PATH_MAX];
    if (!realpath(prefix, real))
        return qc_config_fail(c, n, QS_EIO, "checkpoint_dir: %s: %s", prefix, strerror(errno));
    struct stat sb;
    if (stat(real, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return qc_config_fail(c, n, QS_EINVAL, "checkpoint_dir: %s is not a folder", real);
    /* Writable (the folder exists) or creatable (in its deepest existing ancestor): tried
     * with a folder made and removed at once, which also answers for root and for read-only
     * or virtual file systems, where access(2) says yes. */
    char trial[PATH_MAX + 32];
    snprintf(trial, sizeof trial, "%s/.qsweep-submit-XXXXXX", strcmp(real, "/") ? real : "");
    if (!mkdtemp(trial))
        return qc_config_fail(c, n, QS_EINVAL, "checkpoint_dir: %s%s: %s",
                              k == nc ? "" : "cannot create folders in ", real, strerror(errno));
    rmdir(trial);
    size_t len = strlen(real) + 1;
    for (int i = k; i < nc; i++)
        len += strlen(comp[i]) + 1;
    char *res = malloc(len);
    if (!res) return qc_config_error(c, QS_ENOMEM, "out of memory");
    snprintf(res, len, "%s", real);
    for (int i = k; i < nc; i++) {
        if (strcmp(res, "/")) strcat(res, "/");
        strcat(res, comp[i]);
    }
    *out = res;
    return QS_OK;
}

static qs_status parse(qc_config *c, struct fy_node *root, const qc_grid_probe *probe, qc_grid *g) {
    struct fy_node *sec = qc_config_lookup(root, "training");
    if (!sec || !fy_node_is_mapping(sec))
        return qc_config_fail(c, sec ? sec : root, QS_EFORMAT,
                              "expected 'training' as a mapping with shapes, dataset, recipes, "
                              "lrs, seeds and steps");
    static const char *const keys[] = {"shapes",
                                       "dataset",
                                       "recipes",
                                       "lrs",
                                       "seeds",
                                       "steps",
                                       "batch",
                                       "accum",
                                       "warmup",
                                       "decay",
                                       "min_lr_ratio",
                                       "weight_decay",
                                       "clip",
                                       "beta1",
                                       "beta2",
                                       "eval_every",
                                       "eval_batches",
                                       "log_every",
                                       "checkpoint_every",
                                       "diverge_loss",
                                       "checkpoint_dir",
                                       "data_parallel",
                                       NULL};
    qs_status st = qc_config_check_keys(c, sec, "training", keys);
    if (st) return st;
    tr_data *d = calloc(1, sizeof *d);
    if (!d) return qc_config_error(c, QS_ENOMEM, "out of memory");
    g->kind_data = d;
    void *sctx[2] = {d, (void *)probe};
    struct fy_node *n;
    if (!(n = qc_config_lookup(sec, "shapes")))
        return qc_config_fail(c, sec, QS_EFORMAT, "expected 'shapes'");
    if ((st = qc_config_each(c, n, "training.shapes", add_shape, sctx))) return st;
    if ((st = parse_dataset(c, qc_config_lookup(sec, "dataset"), probe, d))) return st;
    if (!(n = qc_config_lookup(sec, "recipes")))
        return qc_config_fail(c, sec, QS_EFORMAT, "expected 'recipes'");
    if ((st = qc_config_each(c, n, "training.recipes", add_recipe, d))) return st;
    if (!(n = qc_config_lookup(sec, "lrs")))
        return qc_config_fail(c, sec, QS_EFORMAT, "expected 'lrs'");
    if ((st = qc_config_each(c, n, "training.lrs", add_lr, d))) return st;
    if ((n = qc_config_lookup(sec, "seeds"))) {
        if ((st = qc_config_each(c, n, "training.seeds", add_seed, d))) return st;
    } else {
        d->seeds[d->n_seeds++] = 1;
    }
    qs_train_spec *s = &d->defaults;
    if (!(n = qc_config_lookup(sec, "steps")))
        return qc_config_fail(c, sec, QS_EFORMAT, "expected 'steps'");
    if ((st = qc_config_int(c, n, "steps", 1, 100000000, &s->steps))) return st;
    double ratio;
    if ((st = opt_int(c, sec, "batch", 1, 65536, 8, &s->batch)) ||
        (st = opt_int(c, sec, "accum", 1, 65536, 1, &s->accum)) ||
        (st = opt_int(c, sec, "data_parallel", 1, 64, 1, &s->data_parallel)) ||
        (st = opt_int(c, sec, "warmup", 0, s->steps, s->steps / 10, &s->warmup)) ||
        (st = opt_num(c, sec, "min_lr_ratio", 0, 1, 0.1, &ratio)) ||
        (st = opt_num(c, sec, "weight_decay", 0, 0.99, 0.1, &s->weight_decay)) ||
        (st = opt_num(c, sec, "clip", 0, 1e6, 1.0, &s->clip)) ||
        (st = opt_num(c, sec, "beta1", 0, 0.9999, 0.9, &s->beta1)) ||
        (st = opt_num(c, sec, "beta2", 0, 0.99999, 0.95, &s->beta2)) ||
        (st = opt_int(c, sec, "eval_every", 0, 100000000, 50, &s->eval_every)) ||
        (st = opt_int(c, sec, "eval_batches", 0, 100000000, 8, &s->eval_batches)) ||
        (st = opt_int(c, sec, "log_every", 1, 100000000, 10, &s->log_every)) ||
        (st = opt_int(c, sec, "checkpoint_every", 0, 100000000, 100, &s->checkpoint_every)) ||
        (st = opt_num(c, sec, "diverge_loss", 1e-6, 1e9, 12.0, &s->diverge_loss)))
        return st;
    s->min_lr = ratio; /* a ratio until expansion */
    snprintf(s->decay, sizeof s->decay, "cosine");
    if ((n = qc_config_lookup(sec, "decay"))) {
        const char *v = qc_config_scalar(n);
        if (!v || (strcmp(v, "cosine") && strcmp(v, "linear") && strcmp(v, "constant")))
            return qc_config_fail(c, n, QS_EINVAL, "expected decay cosine, linear or constant");
        snprintf(s->decay, sizeof s->decay, "%s", v);
    }
    char bad[128];
    char *raw = NULL;
    struct fy_node *cdn = qc_config_lookup(sec, "checkpoint_dir");
    if (cdn) {
        const char *v = NULL;
        if ((st = qc_config_string(c, cdn, "checkpoint_dir", &v))) return st;
        raw = qc_config_expand(v, bad, sizeof bad);
        if (!raw) return qc_config_fail(c, cdn, QS_EINVAL, "checkpoint_dir: %s", bad);
    } else {
        raw = qc_config_expand("${XDG_CACHE_HOME:-~/.cache}/qsweep/train", bad, sizeof bad);
        if (!raw) return qc_config_fail(c, sec, QS_EINVAL, "checkpoint_dir (default): %s", bad);
    }
    st = canonical_dir(c, cdn ? cdn : sec, raw, &d->checkpoint_dir);
    free(raw);
    if (st) return st;
    for (size_t i = 0; i < d->n_shapes; i++) {
        const char *shape = d->inits[i] ? d->inits[i] : d->shapes[i];
        int max_pos = d->facts[i].max_position_embeddings;
        if (max_pos > 0 && d->ctx > max_pos)
            return qc_config_fail(c, qc_config_lookup(sec, "dataset"), QS_EINVAL,
                                  "ctx %d > %d, shape %s's max_position_embeddings", d->ctx,
                                  max_pos, shape);
        /* A loss above diverge_loss stops a run as diverged; the loss of a uniform guess over
         * the vocabulary is ln(vocab), where every run from scratch starts. */
        double uniform = d->facts[i].vocab_size > 1 ? log((double)d->facts[i].vocab_size) : 0;
        if (!d->inits[i] && s->diverge_loss <= uniform)
            return qc_config_fail(
                c,
                qc_config_lookup(sec, "diverge_loss") ? qc_config_lookup(sec, "diverge_loss") : sec,
                QS_EINVAL,
                "diverge_loss %g is not above %.3f = ln(%d), the loss of a "
                "uniform guess over shape %s's vocabulary, where training "
                "starts: every run would stop as diverged at step 1",
                s->diverge_loss, uniform, d->facts[i].vocab_size, shape);
        /* FP32 masters, gradients and two AdamW moments: 16 bytes per parameter, before any
         * activation (worker/train/tmodel.h qw_tmodel_plan); a grid that gives its GPUs must
         * hold at least that. */
        const qs_resources *rs = &g->resources;
        double state = 16.0 * (double)d->facts[i].n_params;
        if (rs->present && rs->gpu_count > 0 && rs->gpu_memory_mib > 0 &&
            state > (double)rs->gpu_count * (double)rs->gpu_memory_mib * 1048576.0)
            return qc_config_fail(c, d->shape_nodes[i], QS_EINVAL,
                                  "shape %s: %lld parameters need %.1f GiB of FP32 training "
                                  "state (weights, gradients, AdamW moments) before "
                                  "activations; resources give %d x %ld MiB",
                                  shape, d->facts[i].n_params, state / 1073741824.0, rs->gpu_count,
                                  rs->gpu_memory_mib);
    }
    return QS_OK;
}

static qs_status expand(const qc_grid *g, qc_job_list *out, qs_error *err) {
    const tr_data *d = g->kind_data;
    qs_status st = QS_OK;
    for (size_t si = 0; !st && si < d->n_shapes; si++)
        for (size_t ri = 0; !st && ri < d->n_recipes; ri++)
            for (size_t li = 0; !st && li < d->n_lrs; li++)
                for (size_t ei = 0; !st && ei < d->n_seeds; ei++) {
                    qs_train_spec s = d->defaults;
                    const qs_train_spec *r = &d->recipes[ri].r;
                    memcpy(s.recipe, r->recipe, sizeof s.recipe);
                    memcpy(s.format, r->format, sizeof s.format);
                    s.recipe_version = r->recipe_version;
                    s.w2d = r->w2d;
                    s.rht = r->rht;
                    s.rht_dim = r->rht_dim;
                    s.sr = r->sr;
                    s.bf16_first = r->bf16_first;
                    s.bf16_last = r->bf16_last;
                    if (d->inits[si]) {
                        s.init.path = d->inits[si];
                        memcpy(s.init.digest, d->facts[si].digest, 65);
                    } else {
                        snprintf(s.shape, sizeof s.shape, "%s", d->shapes[si]);
                    }
                    s.dataset.path = d->data_path;
                    memcpy(s.dataset.digest, d->data_digest, 65);
                    s.dataset.ctx = d->ctx;
                    s.dataset.max_chunks = 0;
                    snprintf(s.tokenizer, sizeof s.tokenizer, "%s", d->tokenizer);
                    s.val_fraction = d->val_fraction;
                    s.lr = d->lrs[li];
                    s.min_lr = d->lrs[li] * d->defaults.min_lr;
                    s.seed = d->seeds[ei];
                    s.checkpoint_dir = d->checkpoint_dir;
                    snprintf(s.numerics_version, sizeof s.numerics_version, "%s",
                             QS_NUMERICS_VERSION);
                    s.resources = g->resources;
                    if (s.data_parallel > 1 && !(s.resources.present && s.resources.gpu_count)) {
                        s.resources.present = true; /* one GPU a rank */
                        s.resources.gpu_count = s.data_parallel;
                    }
                    json_t *spec = NULL;
                    st = qs_train_encode(&s, &spec, err);
                    if (st) break;
                    char label[320], params[48] = "";
                    double np = (double)d->facts[si].n_params;
                    if (np >= 1e9)
                        snprintf(params, sizeof params, " (%.2fB parameters)", np / 1e9);
                    else if (np > 0)
                        snprintf(params, sizeof params, " (%.2fM parameters)", np / 1e6);
                    snprintf(label, sizeof label, "%s%s %s lr=%g seed=%ld",
                             d->inits[si] ? d->inits[si] : d->shapes[si], params, r->recipe, s.lr,
                             s.seed);
                    st = qc_job_list_add(out, spec, "train", -1, 0, -1, label, NULL, err);
                }
    return st;
}

qs_status qc_grid_training_axes(const qc_grid *g, size_t i, qc_train_axes *out, qs_error *err) {
    extern const qc_grid_kind qc_grid_kind_training;
    const tr_data *d = g && g->kind == &qc_grid_kind_training ? g->kind_data : NULL;
    size_t per_shape = d ? d->n_recipes * d->n_lrs * d->n_seeds : 0;
    if (!d || i >= d->n_shapes * per_shape)
        return qs_error_set(err, QS_EINVAL, "training job %zu: no such job of the grid", i + 1);
    /* expand's order: shapes x recipes x lrs x seeds, seeds innermost */
    size_t si = i / per_shape, r = i % per_shape;
    size_t ri = r / (d->n_lrs * d->n_seeds), li = r / d->n_seeds % d->n_lrs, ei = r % d->n_seeds;
    *out = (qc_train_axes){.shape = d->inits[si] ? d->inits[si] : d->shapes[si],
                           .recipe = d->recipes[ri].r.recipe,
                           .lr = d->lrs[li],
                           .seed = d->seeds[ei],
                           .checkpoint_dir = d->checkpoint_dir,
                           .facts = d->facts[si]};
    out->facts.digest[0] = '\0';
    return QS_OK;
}

static const char *const training_keys[] = {"training", NULL};

const qc_grid_kind qc_grid_kind_training = {
    .name = "training",
    .keys = training_keys,
    .parse = parse,
    .expand = expand,
    .free_data = free_data,
};
