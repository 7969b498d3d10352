/* FP4 checkpoints in the compressed-tensors layout (the format vLLM loads; PyPI package
 * compressed-tensors, compressors/nvfp4 and compressors/mxfp4): each quantized linear stored as
 * <module>.weight_packed (uint8 [N, K/2], two E2M1 codes a byte, the even column in the low
 * nibble), <module>.weight_scale (E4M3 [N, K/16] for nvfp4-pack-quantized; E8M0 biased
 * exponents, uint8 [N, K/32], for mxfp4-pack-quantized) and, for NVFP4,
 * <module>.weight_global_scale (FP32 [1], the encode scale: the reference divides the block
 * scale by it). The config.json quantization_config names the format of each config group.
 *
 * Each such linear is served as <module>.weight in FP32, decoded once at open by the numeric
 * core's own decoder (qk_dequantize) from the codes and scales as stored, nothing re-quantized:
 * x = (e2m1(code) * e4m3(scale)) * (1 / global_scale) for NVFP4 (the engine's order for its own
 * packed NVFP4 weights, so a checkpoint qsweep exported reads back to the values its sweep
 * used), x = e2m1(code) * 2^(e - 127) for MXFP4 (exact). The reference computes NVFP4 as
 * code * (scale / global_scale): the two orders round once each and can differ in the last
 * bit (docs/export.md). */
#include <jansson.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint_internal.h"
#include "format.h"
#include "quant.h"

/* One config group: its format and targets. */
typedef struct fp4_group {
    const char *name;
    const qk_format *fmt;
    json_t *targets;
} fp4_group;

/* Whether module `name` matches target t: "re:<regex>" (Python re.match: anchored at the start),
 * "Linear" (every linear: only linears are packed), or the exact module name. */
static int target_match(const char *t, const char *name) {
    if (strcmp(t, "Linear") == 0) return 1;
    if (strncmp(t, "re:", 3) == 0) {
        char *pat = NULL;
        if (asprintf(&pat, "^(%s)", t + 3) < 0) return 0;
        regex_t re;
        int ok = regcomp(&re, pat, REG_EXTENDED | REG_NOSUB) == 0;
        free(pat);
        if (!ok) return 0;
        int m = regexec(&re, name, 0, NULL, 0) == 0;
        regfree(&re);
        return m;
    }
    return strcmp(t, name) == 0;
}

static qs_status read_groups(const char *file, json_t *qc, fp4_group *g, int *n, qs_error *err) {
    json_t *cg = json_object_get(qc, "config_groups");
    const char *top = json_string_value(json_object_get(qc, "format"));
    if (!json_is_object(cg))
        return qs_error_set(err, QS_EFORMAT,
                            "%s: field \"quantization_config.config_groups\" is missing or not an "
                            "object",
                            file);
    const char *key;
    json_t *v;
    *n = 0;
    json_object_foreach(cg, key, v) {
        if (*n == 16)
            return qs_error_set(err, QS_EUNSUPPORTED, "%s: more than 16 config groups", file);
        const char *f = json_string_value(json_object_get(v, "format"));
        if (!f) f = top;
        const qk_format *fmt = NULL;
        if (f && !strcmp(f, "nvfp4-pack-quantized"))
            fmt = qk_format_by_name("nvfp4");
        else if (f && !strcmp(f, "mxfp4-pack-quantized"))
            fmt = qk_format_by_name("mxfp4");
        else
            return qs_error_set(err, QS_EUNSUPPORTED,
                                "%s: quantization_config.config_groups.%s: format \"%s\" is not "
                                "read (nvfp4-pack-quantized, mxfp4-pack-quantized)",
                                file, key, f ? f : "(none)");
        json_t *w = json_object_get(v, "weights");
        json_t *gs = json_object_get(w, "group_size");
        if (!json_is_integer(gs) || json_integer_value(gs) != fmt->block ||
            json_integer_value(json_object_get(w, "num_bits")) != 4)
            return qs_error_set(err, QS_EFORMAT,
                                "%s: quantization_config.config_groups.%s.weights: %s needs "
                                "num_bits 4 and group_size %d",
                                file, key, f, fmt->block);
        json_t *t = json_object_get(v, "targets");
        if (!json_is_array(t))
            return qs_error_set(err, QS_EFORMAT,
                                "%s: quantization_config.config_groups.%s.targets is not a list",
                                file, key);
        g[*n].name = key;
        g[*n].fmt = fmt;
        g[*n].targets = t;
        (*n)++;
    }
    return QS_OK;
}

/* The group whose targets name module `name`, NULL when none. */
static const fp4_group *group_of(const fp4_group *g, int n, const char *name) {
    for (int i = 0; i < n; i++) {
        size_t j;
        json_t *t;
        json_array_foreach(g[i].targets, j, t) {
            if (json_is_string(t) && target_match(json_string_value(t), name)) return &g[i];
        }
    }
    return NULL;
}

/* The table entry `<module>.<suffix>` with the given safetensors element type and shape. */
static qs_status part(const char *file, qw_tensor_table *t, const char *module, const char *suffix,
                      const char *st_dtype, int raw, int ndim, int64_t d0, int64_t d1,
                      const qw_tensor_entry **out, qs_error *err) {
    char name[320];
    snprintf(name, sizeof name, "%s.%s", module, suffix);
    const qw_tensor_entry *e = qw_table_find(t, name);
    if (!e)
        return qs_error_set(err, QS_ENOTFOUND, "%s: tensor \"%s\" is missing (packed FP4 linear)",
                            file, name);
    int ok =
        e->raw == raw && e->ndim == ndim && e->shape[0] == d0 && (ndim == 1 || e->shape[1] == d1);
    if (!ok)
        return qs_error_set(err, QS_EFORMAT, "%s: tensor \"%s\": expected %s of shape [%lld%s%lld]",
                            file, name, st_dtype, (long long)d0, ndim == 2 ? ", " : "",
                            ndim == 2 ? (long long)d1 : 0LL);
    *out = e;
    return QS_OK;
}

/* The FP32 values of packed codes pe [rows x cols/2] with block scales se in format fmt and
 * decode scale s_dec (1 for MX), by the numeric core's decoder, into a new buffer *out. */
static qs_status decode(const char *file, const qw_tensor_entry *pe, const qw_tensor_entry *se,
                        const qk_format *fmt, float s_dec, float **out, qs_error *err) {
    int nv = fmt->rule == QK_RULE_NVFP4;
    for (size_t i = 0; i < se->nbytes; i++) {
        uint8_t b = se->src[i];
        if (nv ? (b & 0x80) || b == 0x7f : b == 0xff)
            return qs_error_set(err, QS_EFORMAT,
                                "%s: tensor \"%s\": scale byte 0x%02x at element %zu (file offset "
                                "%zu) is %s",
                                file, se->name, b, i, se->offset + i,
                                nv ? "negative or NaN" : "the E8M0 NaN");
    }
    size_t rows = (size_t)pe->shape[0], k = 2 * (size_t)pe->shape[1];
    qk_packed p;
    qs_status st = qk_packed_init(&p, fmt, NULL, rows, k, err);
    if (st) return st;
    memcpy(p.codes, pe->src, p.rows * p.row_bytes);
    memcpy(p.scales, se->src, p.rows * p.blocks_per_row);
    p.tensor_scale = s_dec;
    float *y = malloc(rows * k * sizeof *y);
    if (!y) {
        qk_packed_release(&p);
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory decoding \"%s\"", file, pe->name);
    }
    st = qk_dequantize(&p, y, 0, err);
    qk_packed_release(&p);
    if (st) {
        free(y);
        return st;
    }
    *out = y;
    return QS_OK;
}

/* Decodes one packed linear into a new FP32 entry <module>.weight. */
static qs_status decode_linear(const char *file, qw_tensor_table *t, size_t packed_index,
                               const fp4_group *g, qs_error *err) {
    const qw_tensor_entry *pe = &t->v[packed_index];
    char module[256];
    size_t len = strlen(pe->name) - strlen(".weight_packed");
    if (len >= sizeof module)
        return qs_error_set(err, QS_EFORMAT, "%s: tensor \"%s\": name too long", file, pe->name);
    memcpy(module, pe->name, len);
    module[len] = '\0';
    if (pe->raw != QW_RAW_U8 || pe->ndim != 2)
        return qs_error_set(err, QS_EFORMAT, "%s: tensor \"%s\": expected U8 [rows, cols/2]", file,
                            pe->name);
    int nv = g->fmt->rule == QK_RULE_NVFP4;
    int64_t rows = pe->shape[0], k = 2 * pe->shape[1], blk = g->fmt->block;
    if (rows < 1 || k < 1 || k % blk != 0)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: tensor \"%s\": %lld columns are not whole %s groups of %lld", file,
                            pe->name, (long long)k, qk_format_name(g->fmt), (long long)blk);
    const qw_tensor_entry *se = NULL, *ge = NULL;
    qs_status st = part(file, t, module, "weight_scale", nv ? "F8_E4M3" : "U8",
                        nv ? QW_RAW_F8_E4M3 : QW_RAW_U8, 2, rows, k / blk, &se, err);
    float gs = 1.0f;
    if (!st && nv) {
        st = part(file, t, module, "weight_global_scale", "F32", 0, 1, 1, 0, &ge, err);
        if (!st && ge->dtype != QW_DT_F32)
            st = qs_error_set(err, QS_EFORMAT, "%s: tensor \"%s\": expected F32", file, ge->name);
        if (!st) {
            memcpy(&gs, ge->src, sizeof gs);
            if (!(gs > 0.0f) || gs > 3.0e38f)
                st = qs_error_set(err, QS_EFORMAT,
                                  "%s: tensor \"%s\": global scale %g is not a finite positive "
                                  "number",
                                  file, ge->name, (double)gs);
        }
    }
    if (st) return st;
    char wname[300];
    snprintf(wname, sizeof wname, "%s.weight", module);
    if (qw_table_find(t, wname))
        return qs_error_set(err, QS_EFORMAT, "%s: tensor \"%s\" is stored beside its packed form",
                            file, wname);
    float *y = NULL;
    st = decode(file, pe, se, g->fmt, nv ? 1.0f / gs : 1.0f, &y, err);
    int file_index = pe->file_index;
    size_t offset = pe->offset;
    qw_tensor_entry *e = st ? NULL : qw_table_add(t, wname); /* may move pe */
    if (!st && !e) st = qs_error_set(err, QS_ENOMEM, "%s: out of memory", file);
    if (st) {
        free(y);
        return st;
    }
    size_t n = (size_t)rows * (size_t)k;
    e->dtype = QW_DT_F32;
    e->ndim = 2;
    e->shape[0] = rows;
    e->shape[1] = k;
    e->numel = (int64_t)n;
    e->src = (const uint8_t *)y;
    e->nbytes = n * sizeof *y;
    e->offset = offset;
    e->file_index = file_index;
    e->owned = y;
    return QS_OK;
}

/* ModelOpt's Hugging Face export (TensorRT Model Optimizer, modelopt/torch/export;
 * qtensor/nvfp4_tensor.py): quant_algo NVFP4 in hf_quant_config.json's "quantization" (or
 * config.json's quantization_config with quant_method modelopt); per linear `weight` (uint8
 * [N, K/2], the even column in the low nibble), `weight_scale` (E4M3 [N, K/16]) and
 * `weight_scale_2` (FP32, the decode scale amax/(6*448): it multiplies). Each such `weight` is
 * replaced by its FP32 values, (e2m1(code) * e4m3(scale)) * weight_scale_2. input_scale, the
 * calibrated activation scale, is not read: which activations a job quantizes is the grid's. */
static qs_status modelopt_resolve(const char *qfile, json_t *quant, const char *const *file_paths,
                                  qw_tensor_table *t, qs_error *err) {
    const char *algo = json_string_value(json_object_get(quant, "quant_algo"));
    if (!algo || strcmp(algo, "NVFP4") != 0)
        return qs_error_set(err, QS_EUNSUPPORTED, "%s: quant_algo \"%s\" is not read (NVFP4)",
                            qfile, algo ? algo : "(none)");
    json_t *gs = json_object_get(quant, "group_size");
    if (gs && (!json_is_integer(gs) || json_integer_value(gs) != 16))
        return qs_error_set(err, QS_EFORMAT, "%s: NVFP4 needs group_size 16", qfile);
    const qk_format *fmt = qk_format_by_name("nvfp4");
    for (size_t i = 0; i < t->n; i++) {
        qw_tensor_entry *pe = &t->v[i];
        size_t len = strlen(pe->name);
        if (!pe->raw || len <= 7 || strcmp(pe->name + len - 7, ".weight") != 0) continue;
        const char *file = file_paths[pe->file_index];
        char module[256];
        snprintf(module, sizeof module, "%.*s", (int)(len - 7), pe->name);
        if (pe->raw != QW_RAW_U8 || pe->ndim != 2 || pe->shape[0] < 1 || pe->shape[1] < 1 ||
            (2 * pe->shape[1]) % 16 != 0)
            return qs_error_set(err, QS_EFORMAT,
                                "%s: tensor \"%s\": expected U8 [rows, cols/2] with cols a "
                                "multiple of 16",
                                file, pe->name);
        const qw_tensor_entry *se = NULL, *s2 = NULL;
        qs_status st = part(file, t, module, "weight_scale", "F8_E4M3", QW_RAW_F8_E4M3, 2,
                            pe->shape[0], 2 * pe->shape[1] / 16, &se, err);
        if (st) return st;
        char n2[320];
        snprintf(n2, sizeof n2, "%s.weight_scale_2", module);
        s2 = qw_table_find(t, n2);
        if (!s2)
            return qs_error_set(err, QS_ENOTFOUND, "%s: tensor \"%s\" is missing (NVFP4 linear)",
                                file, n2);
        float d;
        if (s2->dtype != QW_DT_F32 || s2->raw || s2->numel != 1)
            return qs_error_set(err, QS_EFORMAT, "%s: tensor \"%s\": expected one F32", file, n2);
        memcpy(&d, s2->src, sizeof d);
        if (!(d > 0.0f) || d > 3.0e38f)
            return qs_error_set(err, QS_EFORMAT,
                                "%s: tensor \"%s\": decode scale %g is not a finite positive "
                                "number",
                                file, n2, (double)d);
        float *y = NULL;
        if ((st = decode(file, pe, se, fmt, d, &y, err))) return st;
        pe->dtype = QW_DT_F32;
        pe->raw = QW_RAW_NONE;
        pe->shape[1] *= 2;
        pe->numel = pe->shape[0] * pe->shape[1];
        pe->src = (const uint8_t *)y;
        pe->nbytes = (size_t)pe->numel * sizeof *y;
        pe->owned = y;
    }
    return QS_OK;
}

qs_status qw_fp4_resolve(const char *dir, const char *cfg_file, json_t *root,
                         const char *const *file_paths, qw_tensor_table *t, qs_error *err) {
    json_error_t je;
    json_t *qc = json_object_get(root, "quantization_config");
    qs_status st = QS_OK;
    char qpath[4096];
    snprintf(qpath, sizeof qpath, "%s/hf_quant_config.json", dir);
    json_t *hq = NULL;
    if (access(qpath, F_OK) == 0 && !(hq = json_load_file(qpath, 0, &je))) {
        st = qs_error_set(err, QS_EFORMAT, "%s: line %d: %s", qpath, je.line, je.text);
        goto done;
    }
    const char *method = json_string_value(json_object_get(qc, "quant_method"));
    if (hq || (method && !strcmp(method, "modelopt"))) {
        json_t *quant = hq ? json_object_get(hq, "quantization") : qc;
        if (!json_is_object(quant))
            st =
                qs_error_set(err, QS_EFORMAT, "%s: field \"quantization\" is not an object", qpath);
        else
            st = modelopt_resolve(hq ? qpath : cfg_file, quant, file_paths, t, err);
        json_decref(hq);
        goto done;
    }
    if (!qc) goto done;
    if (!method || strcmp(method, "compressed-tensors") != 0) {
        st = qs_error_set(err, QS_EUNSUPPORTED,
                          "%s: quantization_config.quant_method \"%s\" is not read "
                          "(compressed-tensors)",
                          cfg_file, method ? method : "(none)");
        goto done;
    }
    fp4_group g[16];
    int n = 0;
    if ((st = read_groups(cfg_file, qc, g, &n, err))) goto done;
    size_t count = t->n; /* entries added below are the decoded weights */
    for (size_t i = 0; i < count && !st; i++) {
        const char *name = t->v[i].name;
        size_t len = strlen(name), sl = strlen(".weight_packed");
        if (len <= sl || strcmp(name + len - sl, ".weight_packed") != 0) continue;
        char module[256];
        snprintf(module, sizeof module, "%.*s", (int)(len - sl), name);
        const char *file = file_paths[t->v[i].file_index];
        const fp4_group *grp = group_of(g, n, module);
        if (!grp)
            st =
                qs_error_set(err, QS_EFORMAT, "%s: tensor \"%s\": no config group of %s targets %s",
                             file, name, cfg_file, module);
        else
            st = decode_linear(file, t, i, grp, err);
    }
done:
    return st;
}
