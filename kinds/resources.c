/* Job resources per kind (resources.h). */
#include "resources.h"

#include <stdio.h>
#include <string.h>

#include "names.h"
#include "sensitivity.h"
#include "spec.h"

int64_t qs_part_shape(const qs_model_shape *s, int p, int64_t *rows, int64_t *cols) {
    int64_t d = s->dim, f = s->hidden_dim, he = (int64_t)s->n_heads * s->head_dim,
            ge = (int64_t)s->n_kv_heads * s->head_dim, v = s->vocab_size;
    const int64_t shape[QS_PARTS][2] = {{he, d}, {ge, d}, {ge, d}, {d, he}, {f, d},
                                        {f, d},  {d, f},  {v, d},  {v, d}};
    if (p < 0 || p >= QS_PARTS) return -1;
    if (rows) *rows = shape[p][0];
    if (cols) *cols = shape[p][1];
    return shape[p][0] * shape[p][1];
}

/* Elements of the seven linears of one block. */
static int64_t block_linear_elements(const qs_model_shape *s) {
    int64_t n = 0;
    for (int p = 0; p < QS_LINEAR_KINDS; p++)
        n += qs_part_shape(s, p, NULL, NULL);
    return n;
}

int64_t qs_model_elements(const qs_model_shape *s) {
    int64_t emb = qs_part_shape(s, QS_PART_EMBEDDINGS, NULL, NULL);
    int64_t per_block = block_linear_elements(s) + 2 * (int64_t)s->dim;
    return emb + (s->tied_embeddings ? 0 : emb) + s->n_layers * per_block + s->dim;
}

/* One row per format of kernels/format.c: element bits (4: two codes per byte, else one byte),
 * elements per block (0: one scale per row, -1: no block scales), bytes per scale. */
typedef struct packed_layout {
    const char *name;
    int elem_bits;
    int block;
    int scale_bytes;
} packed_layout;

static const packed_layout layouts[] = {
    {"nvfp4", 4, 16, 1},       {"nvfp4_2d", 4, 16, 1},   {"mxfp4", 4, 32, 1},
    {"mxfp6_e2m3", 8, 32, 1},  {"mxfp6_e3m2", 8, 32, 1}, {"mxfp8_e4m3", 8, 32, 1},
    {"mxfp8_e5m2", 8, 32, 1},  {"fp8_e4m3", 8, -1, 0},   {"int8_channel", 8, 0, 4},
    {"int4_group", 4, 128, 4},
};

int64_t qs_packed_bytes(const char *format, int group_size, int64_t rows, int64_t cols) {
    if (!format) return -1;
    if (!strcmp(format, "bf16")) return 0;
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        const packed_layout *l = &layouts[i];
        if (strcmp(format, l->name)) continue;
        int64_t row_bytes = l->elem_bits == 4 ? (cols + 1) / 2 : cols;
        int block = l->block;
        if (!strcmp(format, "int4_group") && group_size > 0) block = group_size;
        int64_t scales = block < 0 ? 0 : block == 0 ? 1 : (cols + block - 1) / block;
        return rows * (row_bytes + scales * l->scale_bytes);
    }
    return -1;
}

int64_t qs_gpu_need_mib(const qs_mem_estimate *e) {
    return (e->total + (1 << 20) - 1) >> 20;
}

/* Bytes packed for the quantized tensors of eval job s: block linears and the rest. */
static qs_status sensitivity_packed(const qs_sensitivity_spec *s, const qs_model_shape *shape,
                                    int64_t *blocks, int64_t *other, qs_error *err) {
    *blocks = *other = 0;
    if (!s->eval) return QS_OK;
    if (s->mode == QS_MODE_POLICY) {
        /* each linear of the map in its own format (sensitivity.h, mode policy) */
        const char *key;
        json_t *v;
        json_object_foreach(s->policy, key, v) {
            int block, part;
            int64_t rows, cols;
            const char *f = json_string_value(v);
            const json_t *g = json_object_get(json_object_get(s->format_options, f), "group_size");
            qs_policy_key_parse(key, &block, &part);
            qs_part_shape(shape, part, &rows, &cols);
            int64_t b = qs_packed_bytes(f, json_is_integer(g) ? (int)json_integer_value(g) : 0,
                                        rows, cols);
            if (b < 0)
                return qs_error_set(err, QS_EINVAL,
                                    "job spec: policy.%s: '%s' has no packed size in "
                                    "kinds/resources.c",
                                    key, f);
            *(part < QS_LINEAR_KINDS ? blocks : other) += b;
        }
        return QS_OK;
    }
    const json_t *gs = json_object_get(s->format_options, "group_size");
    int group = json_is_integer(gs) ? (int)json_integer_value(gs) : 0;
    int64_t bytes[QS_PARTS];
    for (int p = 0; p < QS_PARTS; p++) {
        int64_t rows, cols;
        qs_part_shape(shape, p, &rows, &cols);
        bytes[p] = qs_packed_bytes(s->format, group, rows, cols);
        if (bytes[p] < 0)
            return qs_error_set(err, QS_EINVAL,
                                "job spec: format: '%s' has no packed size in kinds/resources.c",
                                s->format);
    }
    int64_t block_all = 0;
    for (int p = 0; p < QS_LINEAR_KINDS; p++)
        block_all += bytes[p];
    int64_t layers = shape->n_layers;
    switch (s->mode) {
    case QS_MODE_COMPONENT:
        if (s->part < QS_LINEAR_KINDS) *blocks = layers * bytes[s->part];
        break;
    case QS_MODE_BLOCK:
        *blocks = block_all;
        break;
    case QS_MODE_LAYER:
        *blocks = bytes[s->part];
        break;
    case QS_MODE_CUMULATIVE:
        *blocks = (int64_t)(s->block + 1) * block_all;
        break;
    case QS_MODE_LEAVE_ONE_OUT:
        for (int p = 0; p < QS_LINEAR_KINDS; p++)
            if ((s->loo_of & (1u << p)) && p != s->part) *blocks += layers * bytes[p];
        break;
    case QS_MODE_LEAVE_ONE_OUT_BLOCK:
        *blocks = (layers - 1) * block_all;
        break;
    case QS_MODE_LEAVE_ONE_OUT_LAYER:
        *blocks = layers * block_all - bytes[s->part];
        break;
    default:
        break;
    }
    unsigned extra = qs_sensitivity_extra_parts(s);
    /* a quantized lm_head or embeddings gets its own packed copy, tied or not (sensitivity.h) */
    if (extra & (1u << QS_PART_LM_HEAD)) *other += bytes[QS_PART_LM_HEAD];
    if (extra & (1u << QS_PART_EMBEDDINGS)) *other += bytes[QS_PART_EMBEDDINGS];
    return QS_OK;
}

bool qs_tp_splits(const qs_model_shape *s, int tp, char *why, size_t cap) {
    int h = s->n_heads, g = s->n_kv_heads;
    if (tp == 1) return true;
    if (tp < 1 || tp > 64)
        snprintf(why, cap, "tensor parallel %d: ranks outside 1..64", tp);
    else if (h <= 0 || h % tp != 0)
        snprintf(why, cap,
                 "tensor parallel %d: n_heads %d is not a multiple of the ranks (each rank "
                 "holds whole heads)",
                 tp, h);
    else if (g <= 0 || (g % tp != 0 && tp % g != 0))
        snprintf(why, cap,
                 "tensor parallel %d: n_kv_heads %d neither a multiple nor a divisor of the "
                 "ranks (kv heads are split or replicated whole)",
                 tp, g);
    else if (s->hidden_dim < tp)
        snprintf(why, cap, "tensor parallel %d: hidden_dim %d < ranks", tp, s->hidden_dim);
    else if (s->vocab_size < tp)
        snprintf(why, cap, "tensor parallel %d: vocab_size %d < ranks", tp, s->vocab_size);
    else
        return true;
    return false;
}

/* The GPUs asked for by resources r (0 when none). */
static qs_job_need asked(const qs_resources *r) {
    qs_job_need n = {0};
    if (!r->present) return n;
    n.native_fp4 = r->native_fp4;
    /* gpu_memory_mib alone asks for one GPU with that memory (it used to make a CPU job) */
    n.gpus = r->gpu_count > 0 ? r->gpu_count : r->native_fp4 || r->gpu_memory_mib > 0 ? 1 : 0;
    n.gpu_mem_mb = n.gpus ? r->gpu_memory_mib : 0;
    return n;
}

qs_status qs_job_resources(const char *kind, const json_t *spec, const qs_model_size *m,
                           qs_job_need *out, qs_error *err) {
    memset(out, 0, sizeof *out);
    bool sensitivity = kind && (!strcmp(kind, "baseline") || !strcmp(kind, "eval"));
    if (!sensitivity) {
        qs_resources r;
        qs_status st = qs_resources_read(spec, &r, err);
        if (!st) *out = asked(&r);
        return st;
    }
    qs_sensitivity_spec s;
    qs_status st = qs_sensitivity_decode(spec, &s, err);
    if (st) return st;
    *out = asked(&s.resources);
    if (out->gpus > 0 && out->gpu_mem_mb == 0) {
        int64_t blocks = 0, other = 0;
        if (!m)
            st = qs_error_set(err, QS_EINVAL,
                              "job spec: resources: GPU memory of a %s job needs its model's size",
                              kind);
        if (!st) st = sensitivity_packed(&s, &m->shape, &blocks, &other, err);
        qs_mem_plan plan = {.master_bytes = m ? m->master_bytes : 0,
                            .packed_block_bytes = blocks,
                            .packed_other_bytes = other,
                            .ctx = s.dataset.ctx,
                            .batch = 1,
                            .tp = out->gpus};
        qs_mem_estimate e;
        if (!st && (st = qs_mem_estimate_of(&m->shape, &plan, &e, err)))
            qs_error_wrap(err, "job spec: resources");
        if (!st) out->gpu_mem_mb = qs_gpu_need_mib(&e);
    }
    qs_sensitivity_clear(&s);
    if (st) memset(out, 0, sizeof *out);
    return st;
}
