/* The compressed-tensors layout (vLLM, llm-compressor): NVFP4 and MXFP4 packed weights in
 * config groups (export_internal.h qw_export_ct). */
#include "export.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "export_internal.h"
#include "format.h"
#include "model.h"
#include "quant.h"
#include "st_writer.h"

/* The compressed-tensors name of a numeric-core format's packed layout, NULL when it has none:
 * compressors/nvfp4 (group 16, E4M3 scales, FP32 global scale) and compressors/mxfp4 (group
 * 32, E8M0 scales as biased exponents in uint8). nvfp4_2d's 16x16 scales are stored repeated
 * in each row (quant.h), so they are NVFP4's per-row groups of 16 with equal values. */
static const char *ct_format(const qk_format *f) {
    const char *n = qk_format_name(f);
    if (!strcmp(n, "nvfp4") || !strcmp(n, "nvfp4_2d")) return "nvfp4-pack-quantized";
    if (!strcmp(n, "mxfp4")) return "mxfp4-pack-quantized";
    return NULL;
}

static int is_nvfp4(const qk_format *f) {
    return f->rule == QK_RULE_NVFP4;
}

/* A config group: one (weight format, activation format) pair. */
typedef struct ex_group {
    const qk_format *weight, *act;
} ex_group;

/* Checks what compressed-tensors can hold of linear L; assigns its group. */
static qs_status ct_check(ex_linear *L, ex_group *groups, int *n_groups, int tied, qs_error *err) {
    const qw_quant_spec *s = L->spec;
    int wq = s->weight && strcmp(qk_format_name(s->weight), "bf16") != 0;
    if (!wq && !s->act) {
        L->group = -1;
        return QS_OK;
    }
    if (!wq)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: activations in %s without its weights: compressed-tensors "
                            "quantizes a linear's weights whenever it quantizes its input",
                            L->name, qk_format_name(s->act));
    if (!ct_format(s->weight))
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: format %s has no compressed-tensors FP4 layout (nvfp4, "
                            "nvfp4_2d, mxfp4)",
                            L->name, qk_format_name(s->weight));
    if (s->act && is_nvfp4(s->act))
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: NVFP4 activations: qsweep measures them with each "
                            "input's own per-tensor scale, which compressed-tensors stores as one "
                            "calibrated input_global_scale; export the weights (W4A16) instead",
                            L->name);
    if (s->act && strcmp(qk_format_name(s->act), "mxfp4") != 0)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: activations in %s have no compressed-tensors scheme here "
                            "(mxfp4 activations only)",
                            L->name, qk_format_name(s->act));
    if (tied && strcmp(L->name, "lm_head") == 0)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: lm_head: the model ties it to the embeddings, so a quantized "
                            "head and unquantized embeddings cannot be one stored tensor");
    for (int g = 0; g < *n_groups; g++)
        if (groups[g].weight == s->weight && groups[g].act == s->act) {
            L->group = g;
            return QS_OK;
        }
    groups[*n_groups].weight = s->weight;
    groups[*n_groups].act = s->act;
    L->group = (*n_groups)++;
    return QS_OK;
}

/* The QuantizationArgs of a compressed-tensors config group (quantization/quant_scheme.py
 * presets NVFP4A16, MXFP4A16, MXFP4). */
static json_t *ct_args(const qk_format *f, int activations) {
    int nv = is_nvfp4(f);
    return json_pack("{s:i, s:s, s:s, s:b, s:o, s:i, s:s}", "num_bits", 4, "type", "float",
                     "strategy", nv ? "tensor_group" : "group", "symmetric", 1, "dynamic",
                     activations ? json_true() : json_false(), "group_size", nv ? 16 : 32,
                     "scale_dtype", nv ? "torch.float8_e4m3fn" : "torch.uint8");
}

static json_t *ct_quant_config(const ex_linear *lin, int n_lin, const ex_group *groups,
                               int n_groups) {
    json_t *cg = json_object(), *ignore = json_array();
    for (int g = 0; g < n_groups; g++) {
        json_t *targets = json_array();
        for (int i = 0; i < n_lin; i++)
            if (lin[i].group == g) json_array_append_new(targets, json_string(lin[i].name));
        json_t *grp = json_pack(
            "{s:s, s:o, s:o, s:o, s:n}", "format", ct_format(groups[g].weight), "targets", targets,
            "weights", ct_args(groups[g].weight, 0), "input_activations",
            groups[g].act ? ct_args(groups[g].act, 1) : json_null(), "output_activations");
        char key[32];
        snprintf(key, sizeof key, "group_%d", g);
        json_object_set_new(cg, key, grp);
    }
    for (int i = 0; i < n_lin; i++)
        if (lin[i].group < 0) json_array_append_new(ignore, json_string(lin[i].name));
    const char *fmt = n_groups == 1 ? ct_format(groups[0].weight) : "mixed-precision";
    return json_pack("{s:o, s:s, s:o, s:s, s:s, s:n, s:n}", "config_groups", cg, "format", fmt,
                     "ignore", ignore, "quant_method", "compressed-tensors", "quantization_status",
                     "compressed", "kv_cache_scheme", "global_compression_ratio");
}

/* Adds linear L's packed tensors (compressed-tensors names). */
static qs_status add_packed(qw_st_writer *w, const ex_linear *L, const qk_packed *p,
                            qs_error *err) {
    char n[160];
    if (p->k % p->block != 0)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: rows of %zu are not whole blocks of %zu, which "
                            "compressed-tensors requires",
                            L->name, p->k, p->block);
    int nv = is_nvfp4(p->fmt);
    if (nv && p->tensor_scale_exp2 != 0)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: its amax %g is tiny and was quantized under tiny_amax "
                            "exact, whose decode scale is no FP32 number a global scale can hold",
                            L->name, (double)p->tensor_amax);
    int64_t sh[2] = {(int64_t)p->rows, (int64_t)p->row_bytes};
    snprintf(n, sizeof n, "%s.weight_packed", L->name);
    qs_status st = qw_st_writer_add(w, n, "U8", 2, sh, p->codes, p->rows * p->row_bytes, err);
    int64_t ss[2] = {(int64_t)p->rows, (int64_t)p->blocks_per_row};
    snprintf(n, sizeof n, "%s.weight_scale", L->name);
    if (!st)
        st = qw_st_writer_add(w, n, nv ? "F8_E4M3" : "U8", 2, ss, p->scales,
                              p->rows * p->blocks_per_row, err);
    if (!st && nv) {
        /* the encode scale S_enc = 2688/amax_t; its reciprocal is the engine's decode scale */
        float s_enc, s_dec;
        qk_nvfp4_global_scales(p->tensor_amax, &s_enc, &s_dec);
        if (s_dec != p->tensor_scale)
            return qs_error_set(err, QS_EUNSUPPORTED,
                                "export: %s: decode scale %a is not 1/S_enc of amax %a", L->name,
                                (double)p->tensor_scale, (double)p->tensor_amax);
        int64_t one[2] = {1, 0};
        snprintf(n, sizeof n, "%s.weight_global_scale", L->name);
        st = qw_st_writer_add(w, n, "F32", 1, one, &s_enc, sizeof s_enc, err);
    }
    return st;
}

qs_status qw_export_ct(const qw_export_request *r, qw_checkpoint *ck, qw_model *m,
                       const qw_method_state *ms, const char *tmp, qs_error *err) {
    const qw_config *cfg = qw_checkpoint_config(ck);
    const qw_policy *p = r->policy;
    if (p->embed.weight || p->embed.act)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: model.embed_tokens: compressed-tensors quantizes linears, "
                            "not the embedding lookup");
    ex_linear *lin = NULL;
    int n_lin = 0, n_groups = 0;
    ex_group groups[8];
    qs_status st = qw_export_list_linears(m, p, &lin, &n_lin, err);
    for (int i = 0; i < n_lin && !st; i++) {
        if (n_groups == 8) {
            st = qs_error_set(err, QS_EUNSUPPORTED, "export: more than 8 format combinations");
            break;
        }
        st = ct_check(&lin[i], groups, &n_groups, cfg->tied_embeddings, err);
    }
    if (!st && n_groups == 0)
        st = qs_error_set(err, QS_EINVAL,
                          "export: the policy quantizes no linear: the source checkpoint is the "
                          "export");
    qw_st_writer w = {0};
    size_t total = (size_t)n_lin + 3, done = 0;
    /* the quantized linears first (the slow part), then every other tensor as stored */
    for (int i = 0; i < n_lin && !st; i++) {
        if (lin[i].group >= 0) {
            const qk_packed *pk = qw_export_packed(m, ms, lin[i].index);
            if (!pk)
                st = qs_error_set(err, QS_EINVAL, "export: %s: the engine holds no packed form",
                                  lin[i].name);
            else
                st = add_packed(&w, &lin[i], pk, err);
        }
        if (r->progress) r->progress(r->progress_ctx, ++done, total);
    }
    if (!st) st = qw_export_finish(r, ck, &w, lin, n_lin, tmp,
                                   ct_quant_config(lin, n_lin, groups, n_groups), &done, total,
                                   err);
    qw_st_writer_free(&w);
    free(lin);
    return st;
}
