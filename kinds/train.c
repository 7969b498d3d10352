/* The `train` job kind's spec (train.h) and its registry entry. */
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"

#define FAIL(field, what) qs_error_set(err, QS_EINVAL, "job spec: %s: expected %s", field, what)

qs_status qs_train_validate(const qs_train_spec *s, qs_error *err) {
    if (!s->shape[0] && !s->init.path) return FAIL("shape", "a shape name or a model");
    if (s->shape[0] && s->init.path) return FAIL("shape", "a shape name or a model, not both");
    if (strcmp(s->tokenizer, "bytes") && strcmp(s->tokenizer, "file"))
        return FAIL("tokenizer", "\"bytes\" or \"file\"");
    if (!(s->val_fraction >= 0 && s->val_fraction < 1)) return FAIL("val_fraction", "[0, 1)");
    if (!s->recipe[0]) return FAIL("recipe.name", "a recipe name");
    if (strcmp(s->format, "nvfp4") && strcmp(s->format, "mxfp4") && strcmp(s->format, "fp8_e4m3") &&
        strcmp(s->format, "none"))
        return FAIL("recipe.format", "nvfp4, mxfp4, fp8_e4m3 or none");
    if ((unsigned)s->w2d > 1 || (unsigned)s->rht > 1 || (unsigned)s->sr > 1)
        return FAIL("recipe", "w2d, rht and sr 0 or 1");
    if (s->w2d && strcmp(s->format, "nvfp4")) return FAIL("recipe.w2d", "0 unless format is nvfp4");
    if (s->rht_dim != 16 && s->rht_dim != 32) return FAIL("recipe.rht_dim", "16 or 32");
    if (s->bf16_first < 0 || s->bf16_last < 0) return FAIL("recipe.bf16_first", "counts >= 0");
    if (!(s->lr > 0 && isfinite(s->lr))) return FAIL("lr", "a number > 0");
    if (!(s->min_lr >= 0 && s->min_lr <= s->lr)) return FAIL("min_lr", "a number in [0, lr]");
    if (s->warmup < 0 || s->warmup > s->steps) return FAIL("warmup", "0..steps");
    if (strcmp(s->decay, "cosine") && strcmp(s->decay, "linear") && strcmp(s->decay, "constant"))
        return FAIL("decay", "cosine, linear or constant");
    if (!(s->weight_decay >= 0 && s->weight_decay < 1)) return FAIL("weight_decay", "[0, 1)");
    if (!(s->clip >= 0)) return FAIL("clip", "a number >= 0 (0: off)");
    if (!(s->beta1 >= 0 && s->beta1 < 1) || !(s->beta2 >= 0 && s->beta2 < 1))
        return FAIL("beta1", "betas in [0, 1)");
    if (s->steps < 1) return FAIL("steps", "an integer >= 1");
    if (s->batch < 1 || s->accum < 1) return FAIL("batch", "batch and accum >= 1");
    if (s->seed < 0) return FAIL("seed", "an integer >= 0");
    if (s->eval_every < 0 || s->eval_batches < 0 || s->log_every < 0 || s->checkpoint_every < 0)
        return FAIL("eval_every", "eval_every, eval_batches, log_every, checkpoint_every >= 0");
    if (!(s->diverge_loss > 0)) return FAIL("diverge_loss", "a number > 0");
    if (s->data_parallel < 0 || s->data_parallel > 64)
        return FAIL("data_parallel", "an integer in 1..64");
    if (s->data_parallel > 1 && s->resources.present && s->resources.gpu_count > 0 &&
        s->resources.gpu_count != s->data_parallel)
        return FAIL("data_parallel", "resources.gpu_count equal to data_parallel (one GPU a rank)");
    if (s->dataset.ctx < 2) return FAIL("dataset.ctx", "an integer >= 2");
    if (!s->dataset.path || !qs_is_digest(s->dataset.digest))
        return FAIL("dataset", "a path and a digest");
    return QS_OK;
}

qs_status qs_train_encode(const qs_train_spec *s, json_t **out, qs_error *err) {
    *out = NULL;
    qs_status st = qs_train_validate(s, err);
    if (st) return st;
    json_t *o = json_object(), *r = json_object();
    if (!o || !r) {
        json_decref(o);
        json_decref(r);
        return qs_error_set(err, QS_ENOMEM, "out of memory");
    }
    json_object_set_new(o, "kind", json_string("train"));
    json_object_set_new(o, "numerics_version", json_string(s->numerics_version));
    if (s->shape[0]) {
        json_t *sh = json_object();
        json_object_set_new(sh, "name", json_string(s->shape));
        json_object_set_new(o, "shape", sh);
    } else {
        json_object_set_new(o, "model", qs_model_ref_json(&s->init));
    }
    json_object_set_new(o, "dataset", qs_dataset_ref_json(&s->dataset));
    json_object_set_new(o, "tokenizer", json_string(s->tokenizer));
    json_object_set_new(o, "val_fraction", json_real(s->val_fraction));
    json_object_set_new(r, "name", json_string(s->recipe));
    json_object_set_new(r, "version", json_integer(s->recipe_version));
    json_object_set_new(r, "format", json_string(s->format));
    json_object_set_new(r, "w2d", json_integer(s->w2d));
    json_object_set_new(r, "rht", json_integer(s->rht));
    json_object_set_new(r, "rht_dim", json_integer(s->rht_dim));
    json_object_set_new(r, "sr", json_integer(s->sr));
    json_object_set_new(r, "bf16_first", json_integer(s->bf16_first));
    json_object_set_new(r, "bf16_last", json_integer(s->bf16_last));
    json_object_set_new(o, "recipe", r);
    json_object_set_new(o, "lr", json_real(s->lr));
    json_object_set_new(o, "min_lr", json_real(s->min_lr));
    json_object_set_new(o, "warmup", json_integer(s->warmup));
    json_object_set_new(o, "decay", json_string(s->decay));
    json_object_set_new(o, "weight_decay", json_real(s->weight_decay));
    json_object_set_new(o, "clip", json_real(s->clip));
    json_object_set_new(o, "beta1", json_real(s->beta1));
    json_object_set_new(o, "beta2", json_real(s->beta2));
    json_object_set_new(o, "steps", json_integer(s->steps));
    json_object_set_new(o, "batch", json_integer(s->batch));
    json_object_set_new(o, "accum", json_integer(s->accum));
    json_object_set_new(o, "seed", json_integer(s->seed));
    json_object_set_new(o, "eval_every", json_integer(s->eval_every));
    json_object_set_new(o, "eval_batches", json_integer(s->eval_batches));
    json_object_set_new(o, "log_every", json_integer(s->log_every));
    json_object_set_new(o, "checkpoint_every", json_integer(s->checkpoint_every));
    json_object_set_new(o, "diverge_loss", json_real(s->diverge_loss));
    json_object_set_new(o, "checkpoint_dir",
                        json_string(s->checkpoint_dir ? s->checkpoint_dir : ""));
    if (s->data_parallel > 1)
        json_object_set_new(o, "data_parallel", json_integer(s->data_parallel));
    if (s->resources.present) json_object_set_new(o, "resources", qs_resources_json(&s->resources));
    *out = o;
    return QS_OK;
}

static qs_status get_num(const json_t *o, const char *k, double *v, qs_error *err) {
    const json_t *x = json_object_get(o, k);
    if (!json_is_number(x)) return FAIL(k, "a number");
    *v = json_number_value(x);
    return QS_OK;
}

static qs_status get_int(const json_t *o, const char *k, long *v, qs_error *err) {
    const json_t *x = json_object_get(o, k);
    if (!json_is_integer(x)) return FAIL(k, "an integer");
    *v = (long)json_integer_value(x);
    return QS_OK;
}

static qs_status get_str(const json_t *o, const char *k, char *buf, size_t cap, qs_error *err) {
    const json_t *x = json_object_get(o, k);
    if (!json_is_string(x) || strlen(json_string_value(x)) >= cap)
        return FAIL(k, "a (short) string");
    snprintf(buf, cap, "%s", json_string_value(x));
    return QS_OK;
}

qs_status qs_train_decode(const json_t *spec, qs_train_spec *out, qs_error *err) {
    memset(out, 0, sizeof *out);
    static const char *const keys[] = {"kind",         "numerics_version",
                                       "shape",        "model",
                                       "dataset",      "tokenizer",
                                       "val_fraction", "recipe",
                                       "lr",           "min_lr",
                                       "warmup",       "decay",
                                       "weight_decay", "clip",
                                       "beta1",        "beta2",
                                       "steps",        "batch",
                                       "accum",        "seed",
                                       "eval_every",   "eval_batches",
                                       "log_every",    "checkpoint_every",
                                       "diverge_loss", "checkpoint_dir",
                                       "resources",    "data_parallel",
                                       "numerics",     NULL};
    if (!json_is_object(spec)) return FAIL("(root)", "an object");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)spec, key, val) {
        int known = 0;
        for (int i = 0; keys[i]; i++)
            known |= !strcmp(keys[i], key);
        if (!known) return qs_error_set(err, QS_EINVAL, "job spec: %s: unknown key", key);
    }
    qs_status st = QS_OK;
    const json_t *kind = json_object_get(spec, "kind");
    if (!json_is_string(kind) || strcmp(json_string_value(kind), "train"))
        st = FAIL("kind", "\"train\"");
    if (!st)
        st = get_str(spec, "numerics_version", out->numerics_version, sizeof out->numerics_version,
                     err);
    const json_t *shape = json_object_get(spec, "shape");
    if (!st && shape) {
        if (!json_is_object(shape) || json_object_size(shape) != 1)
            st = FAIL("shape", "{\"name\": ...}");
        else
            st = get_str(shape, "name", out->shape, sizeof out->shape, err);
    }
    if (!st && json_object_get(spec, "model")) st = qs_model_ref_read(spec, &out->init, err);
    if (!st) st = qs_dataset_ref_read(spec, &out->dataset, err);
    if (!st) st = get_str(spec, "tokenizer", out->tokenizer, sizeof out->tokenizer, err);
    if (!st) st = get_num(spec, "val_fraction", &out->val_fraction, err);
    const json_t *r = json_object_get(spec, "recipe");
    if (!st && !json_is_object(r)) st = FAIL("recipe", "an object");
    long v = 0;
    if (!st) st = get_str(r, "name", out->recipe, sizeof out->recipe, err);
    if (!st) st = get_str(r, "format", out->format, sizeof out->format, err);
    struct {
        const char *k;
        int *dst;
    } ints[] = {
        {"version", &out->recipe_version}, {"w2d", &out->w2d}, {"rht", &out->rht},
        {"rht_dim", &out->rht_dim},        {"sr", &out->sr},   {"bf16_first", &out->bf16_first},
        {"bf16_last", &out->bf16_last}};
    for (size_t i = 0; !st && i < sizeof ints / sizeof ints[0]; i++) {
        st = get_int(r, ints[i].k, &v, err);
        if (!st) *ints[i].dst = (int)v;
    }
    struct {
        const char *k;
        double *dst;
    } nums[] = {{"lr", &out->lr},
                {"min_lr", &out->min_lr},
                {"weight_decay", &out->weight_decay},
                {"clip", &out->clip},
                {"beta1", &out->beta1},
                {"beta2", &out->beta2},
                {"diverge_loss", &out->diverge_loss}};
    for (size_t i = 0; !st && i < sizeof nums / sizeof nums[0]; i++)
        st = get_num(spec, nums[i].k, nums[i].dst, err);
    struct {
        const char *k;
        int *dst;
    } tints[] = {{"warmup", &out->warmup},         {"steps", &out->steps},
                 {"batch", &out->batch},           {"accum", &out->accum},
                 {"eval_every", &out->eval_every}, {"eval_batches", &out->eval_batches},
                 {"log_every", &out->log_every},   {"checkpoint_every", &out->checkpoint_every}};
    for (size_t i = 0; !st && i < sizeof tints / sizeof tints[0]; i++) {
        st = get_int(spec, tints[i].k, &v, err);
        if (!st) *tints[i].dst = v > 1000000000 ? -1 : (int)v;
    }
    if (!st) st = get_int(spec, "seed", &out->seed, err);
    if (!st) st = get_str(spec, "decay", out->decay, sizeof out->decay, err);
    const json_t *cd = json_object_get(spec, "checkpoint_dir");
    if (!st && !json_is_string(cd)) st = FAIL("checkpoint_dir", "a string");
    if (!st && !(out->checkpoint_dir = strdup(json_string_value(cd))))
        st = qs_error_set(err, QS_ENOMEM, "out of memory");
    if (!st) st = qs_resources_read(spec, &out->resources, err);
    if (!st && json_object_get(spec, "data_parallel")) {
        st = get_int(spec, "data_parallel", &v, err);
        if (!st && (v < 2 || v > 64))
            st = FAIL("data_parallel", "an integer in 2..64 (a one-rank job leaves the key out)");
        if (!st) out->data_parallel = (int)v;
    }
    if (!st) st = qs_train_validate(out, err);
    if (st) qs_train_clear(out);
    return st;
}

void qs_train_clear(qs_train_spec *s) {
    if (!s) return;
    qs_model_ref_clear(&s->init);
    qs_dataset_ref_clear(&s->dataset);
    free(s->checkpoint_dir);
    memset(s, 0, sizeof *s);
}

static qs_status check_train(const json_t *spec, qs_error *err) {
    qs_train_spec s;
    qs_status st = qs_train_decode(spec, &s, err);
    qs_train_clear(&s);
    return st;
}

const qs_job_kind qs_job_kind_train = {"train", "training", check_train};
