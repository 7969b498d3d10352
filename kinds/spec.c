/* Shared parts of job specs, job keys and affinity keys (spec.h). */
#include "spec.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *qs_model_ref_json(const qs_model_ref *m) {
    json_t *o = json_pack("{s:s, s:s}", "path", m->path, "digest", m->digest);
    /* only for a trained model, so the specs and keys of every other model are unchanged */
    if (o && m->trained_by[0] && json_object_set_new(o, "trained_by", json_string(m->trained_by))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *qs_dataset_ref_json(const qs_dataset_ref *d) {
    json_t *o = json_pack("{s:s, s:s, s:i, s:I}", "path", d->path, "digest", d->digest, "ctx",
                          d->ctx, "max_chunks", (json_int_t)d->max_chunks);
    /* only when set, so the specs and keys of datasets without BOS are what they were */
    if (o && d->bos && json_object_set_new(o, "bos_id", json_integer(d->bos_id))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

const char *qs_dataset_text_path(const char *path) {
    size_t n = strlen(QS_DATASET_TEXT_PREFIX);
    return path && !strncmp(path, QS_DATASET_TEXT_PREFIX, n) ? path + n : NULL;
}

json_t *qs_resources_json(const qs_resources *r) {
    json_t *o = json_pack("{s:i, s:I, s:b}", "gpu_count", r->gpu_count, "gpu_memory_mib",
                          (json_int_t)r->gpu_memory_mib, "native_fp4", r->native_fp4);
    /* "gemm" only when asked, so the spec of every other grid reads as before */
    if (o && r->gemm_emulated && json_object_set_new(o, "gemm", json_string("emulated"))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A digest field: a string of 1..64 hex digits (real ones have 64; tests use short ones). */
static qs_status read_digest(const json_t *obj, const char *where, char out[65], qs_error *err) {
    const char *s = json_string_value(json_object_get(obj, "digest"));
    size_t n = s ? strlen(s) : 0;
    if (!s || !n || n > 64 || strspn(s, "0123456789abcdef") != n)
        return qs_error_set(err, QS_EINVAL, "job spec: %s.digest: expected a hex digest", where);
    memcpy(out, s, n + 1);
    return QS_OK;
}

static qs_status read_path(const json_t *obj, const char *where, char **out, qs_error *err) {
    const char *s = json_string_value(json_object_get(obj, "path"));
    if (!s || !*s) return qs_error_set(err, QS_EINVAL, "job spec: %s.path: expected a path", where);
    *out = strdup(s);
    return *out ? QS_OK : qs_error_set(err, QS_ENOMEM, "out of memory");
}

/* Every key of obj must be one of the NULL-terminated allowed: a key that is kept would count
 * in the job key, and one the decoder drops would change it on re-encoding. */
static qs_status only_keys(const json_t *obj, const char *where, const char *const *allowed,
                           qs_error *err) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        size_t i = 0;
        while (allowed[i] && strcmp(allowed[i], key))
            i++;
        if (!allowed[i])
            return qs_error_set(err, QS_EINVAL, "job spec: %s: unknown key '%s'", where, key);
    }
    return QS_OK;
}

qs_status qs_model_ref_read(const json_t *spec, qs_model_ref *out, qs_error *err) {
    return qs_model_ref_read_key(spec, "model", out, err);
}

qs_status qs_model_ref_read_key(const json_t *spec, const char *key, qs_model_ref *out,
                                qs_error *err) {
    memset(out, 0, sizeof *out);
    const json_t *m = json_object_get(spec, key);
    if (!json_is_object(m))
        return qs_error_set(err, QS_EINVAL, "job spec: %s: expected an object", key);
    static const char *const keys[] = {"digest", "path", "trained_by", NULL};
    qs_status st = only_keys(m, key, keys, err);
    if (!st) st = read_digest(m, key, out->digest, err);
    const json_t *tb = json_object_get(m, "trained_by");
    if (!st && tb) {
        if (!qs_is_digest(json_string_value(tb)))
            return qs_error_set(err, QS_EINVAL,
                                "job spec: model.trained_by: expected the train job's job_key "
                                "(64 hex digits)");
        char want[65];
        memcpy(out->trained_by, json_string_value(tb), 65);
        /* the stand-in digest is the key's: a spec pairing one with another is refused */
        if ((st = qs_trained_model_digest(out->trained_by, want, err))) return st;
        if (strcmp(want, out->digest))
            return qs_error_set(err, QS_EINVAL,
                                "job spec: model.digest: expected %s, the stand-in of the model "
                                "trained by %s",
                                want, out->trained_by);
    }
    return st ? st : read_path(m, key, &out->path, err);
}

qs_status qs_dataset_ref_read(const json_t *spec, qs_dataset_ref *out, qs_error *err) {
    memset(out, 0, sizeof *out);
    const json_t *d = json_object_get(spec, "dataset");
    if (!json_is_object(d))
        return qs_error_set(err, QS_EINVAL, "job spec: dataset: expected an object");
    static const char *const keys[] = {"bos_id", "ctx", "digest", "max_chunks", "path", NULL};
    qs_status kst = only_keys(d, "dataset", keys, err);
    if (kst) return kst;
    const json_t *bos = json_object_get(d, "bos_id");
    if (bos && (!json_is_integer(bos) || json_integer_value(bos) < 0 ||
                json_integer_value(bos) > 0x7fffffff))
        return qs_error_set(err, QS_EINVAL, "job spec: dataset.bos_id: expected an integer >= 0");
    out->bos = bos != NULL;
    out->bos_id = bos ? (int)json_integer_value(bos) : 0;
    const json_t *ctx = json_object_get(d, "ctx"), *mc = json_object_get(d, "max_chunks");
    if (!json_is_integer(ctx) || json_integer_value(ctx) < 2 || json_integer_value(ctx) > 1 << 20)
        return qs_error_set(err, QS_EINVAL,
                            "job spec: dataset.ctx: expected an integer in [2, 1048576]");
    if (!json_is_integer(mc) || json_integer_value(mc) < 0 || json_integer_value(mc) > 0x7fffffff)
        return qs_error_set(err, QS_EINVAL,
                            "job spec: dataset.max_chunks: expected an integer >= 0");
    out->ctx = (int)json_integer_value(ctx);
    out->max_chunks = (long)json_integer_value(mc);
    qs_status st = read_digest(d, "dataset", out->digest, err);
    return st ? st : read_path(d, "dataset", &out->path, err);
}

qs_status qs_resources_read(const json_t *spec, qs_resources *out, qs_error *err) {
    memset(out, 0, sizeof *out);
    const json_t *r = json_object_get(spec, "resources");
    if (!r) return QS_OK;
    const json_t *gc = json_object_get(r, "gpu_count"), *gm = json_object_get(r, "gpu_memory_mib"),
                 *nf = json_object_get(r, "native_fp4");
    const json_t *gemm = json_object_get(r, "gemm");
    bool emulated = json_is_string(gemm) && !strcmp(json_string_value(gemm), "emulated");
    if (!json_is_object(r) || !json_is_integer(gc) || !json_is_integer(gm) ||
        !json_is_boolean(nf) || (gemm && !emulated) || json_object_size(r) != 3u + (gemm != NULL))
        return qs_error_set(err, QS_EINVAL,
                            "job spec: resources: expected {\"gpu_count\": int, "
                            "\"gpu_memory_mib\": int, \"native_fp4\": bool} and optionally "
                            "\"gemm\": \"emulated\"");
    if (emulated && json_is_true(nf))
        return qs_error_set(err, QS_EINVAL,
                            "job spec: resources: gemm \"emulated\" and native_fp4 exclude each "
                            "other");
    if (json_integer_value(gc) < 0 || json_integer_value(gc) > 4096 || json_integer_value(gm) < 0)
        return qs_error_set(err, QS_EINVAL,
                            "job spec: resources: gpu_count in [0, 4096] and gpu_memory_mib >= 0");
    out->present = true;
    out->gpu_count = (int)json_integer_value(gc);
    out->gpu_memory_mib = (long)json_integer_value(gm);
    out->native_fp4 = json_is_true(nf);
    out->gemm_emulated = emulated;
    return QS_OK;
}

qs_status qs_trained_model_digest(const char *train_key, char digest[65], qs_error *err) {
    if (!qs_is_digest(train_key))
        return qs_error_set(err, QS_EINVAL, "trained model: '%s' is not a job_key",
                            train_key ? train_key : "(null)");
    char text[80];
    snprintf(text, sizeof text, "trained:%s", train_key);
    unsigned char h[32];
    if (sodium_init() < 0) return qs_error_set(err, QS_EINVAL, "libsodium failed to initialise");
    crypto_generichash(h, sizeof h, (const unsigned char *)text, strlen(text), NULL, 0);
    sodium_bin2hex(digest, 65, h, sizeof h);
    return QS_OK;
}

void qs_model_ref_clear(qs_model_ref *m) {
    if (!m) return;
    free(m->path);
    memset(m, 0, sizeof *m);
}

void qs_dataset_ref_clear(qs_dataset_ref *d) {
    if (!d) return;
    free(d->path);
    memset(d, 0, sizeof *d);
}

bool qs_is_digest(const char *text) {
    return text && strlen(text) == 64 && strspn(text, "0123456789abcdef") == 64;
}

char *qs_spec_canonical(const json_t *spec) {
    return json_dumps(spec, JSON_SORT_KEYS | JSON_COMPACT);
}

static void blake2b_hex(const void *data, size_t len, char hex[65]) {
    unsigned char h[32];
    crypto_generichash(h, sizeof h, data, len, NULL, 0);
    sodium_bin2hex(hex, 65, h, sizeof h);
}

qs_status qs_spec_key(const json_t *spec, char hex[65], qs_error *err) {
    json_t *copy = json_deep_copy(spec);
    json_t *m = json_object_get(copy, "model"), *d = json_object_get(copy, "dataset");
    if (json_is_object(m)) json_object_del(m, "path");
    if (json_is_object(d)) json_object_del(d, "path");
    json_t *ref = json_object_get(copy, "reference_model"); /* sensitivity.h: a compare job */
    if (json_is_object(ref)) json_object_del(ref, "path");
    json_t *cal = json_object_get(copy, "calibration"); /* a method's token file (method.h) */
    if (json_is_object(cal)) json_object_del(cal, "path");
    json_object_del(copy, "resources");
    /* "any" asks nothing of the path: the job computes what it computed without the key */
    const char *numerics = json_string_value(json_object_get(copy, "numerics"));
    if (numerics && !strcmp(numerics, "any")) json_object_del(copy, "numerics");
    char *canon = copy ? qs_spec_canonical(copy) : NULL;
    json_decref(copy);
    if (!canon) return qs_error_set(err, QS_ENOMEM, "out of memory");
    if (sodium_init() < 0) {
        free(canon);
        return qs_error_set(err, QS_EINVAL, "libsodium failed to initialise");
    }
    blake2b_hex(canon, strlen(canon), hex);
    free(canon);
    return QS_OK;
}

qs_status qs_spec_key_text(const char *spec_json, char hex[65], qs_error *err) {
    json_error_t je;
    json_t *spec = json_loads(spec_json, 0, &je);
    if (!spec || !json_is_object(spec)) {
        json_decref(spec);
        return qs_error_set(err, QS_EFORMAT, "job spec: line %d column %d: %s", je.line, je.column,
                            spec ? "expected a JSON object" : je.text);
    }
    qs_status st = qs_spec_key(spec, hex, err);
    json_decref(spec);
    return st;
}

void qs_affinity_key(const char *digest, char *buf, size_t cap) {
    if (!cap) return;
    size_t n = digest ? strlen(digest) : 0;
    if (!n || n > 64 || strspn(digest, "0123456789abcdef") != n || cap < 7 + n + 1) {
        buf[0] = 0;
        return;
    }
    snprintf(buf, cap, "model:%s", digest);
}

qs_status qs_synthetic_model(const char *shape, unsigned long seed, char *path, size_t cap,
                             char digest[65], qs_error *err) {
    if (!shape || !*shape || strchr(shape, ':'))
        return qs_error_set(err, QS_EINVAL, "synthetic model: bad shape name '%s'",
                            shape ? shape : "(null)");
    int n = snprintf(path, cap, "synthetic:%s:%lu", shape, seed);
    if (n < 0 || (size_t)n >= cap)
        return qs_error_set(err, QS_EINVAL, "synthetic model: path buffer too small");
    if (sodium_init() < 0) return qs_error_set(err, QS_EINVAL, "libsodium failed to initialise");
    blake2b_hex(path, (size_t)n, digest);
    return QS_OK;
}

bool qs_is_synthetic(const char *path) {
    return path && !strncmp(path, "synthetic:", 10);
}
