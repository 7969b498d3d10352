/* A policy's NVFP4 linears written in ModelOpt's Hugging Face layout (TensorRT Model Optimizer,
 * modelopt/torch/export unified_export_hf.py, quant_utils.py, convert_hf_config.py;
 * qtensor/nvfp4_tensor.py), the NVFP4 checkpoint TensorRT-LLM, vLLM (modelopt_fp4) and SGLang
 * load. Per quantized linear, in model.safetensors:
 *   <m>.weight          U8 [N, K/2]   two E2M1 codes a byte, the even column in the low nibble
 *   <m>.weight_scale    F8_E4M3 [N, K/16]  the block scales
 *   <m>.weight_scale_2  F32 []        the per-tensor decode scale amax/(6*448): it multiplies
 *   <m>.input_scale     F32 []        the static activation scale amax_x/(6*448), amax_x the
 *                                     largest |x| of the linear's input over the calibration
 *                                     chunks, on the unquantized model (ModelOpt's "max"
 *                                     calibration: its quantizers only observe while calibrating)
 * hf_quant_config.json {"producer", "quantization": {"quant_algo": "NVFP4", "group_size": 16,
 * "kv_cache_quant_algo": null, "exclude_modules": [...]}} and config.json's quantization_config
 * in convert_hf_quant_config_format's form (quant_method "modelopt"). The codes, block scales and
 * decode scales are the engine's packed form of the policy, as the sweep measured them. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "export_internal.h"
#include "format.h"
#include "forward.h"
#include "quant.h"

#define MO_FP4_MAX 6.0f   /* the largest E2M1 magnitude */
#define MO_E4M3_MAX 448.f /* the largest E4M3 magnitude */

static int mo_nvfp4(const qw_quant_spec *s) {
    return s->weight && s->weight->rule == QK_RULE_NVFP4;
}

/* One observed linear: its input width and the largest |x| seen. */
typedef struct mo_obs {
    int in;
    float amax;
} mo_obs;

/* The in_hook of an observed linear (forward.h): records max |x| of x [T x in], passes x on. */
static qs_status mo_observe(void *ctx, const struct qw_backend *be, const float *x, int T,
                            const float **out, qs_error *err) {
    (void)be;
    (void)err;
    mo_obs *o = ctx;
    size_t n = (size_t)T * (size_t)o->in;
    float a = o->amax;
    for (size_t i = 0; i < n; i++) {
        float v = fabsf(x[i]);
        if (v > a) a = v;
    }
    o->amax = a;
    *out = x;
    return QS_OK;
}

qs_status qw_export_modelopt_calibrate(const qw_export_request *r, qw_model *m, float **amax,
                                       qs_error *err) {
    *amax = NULL;
    if (!r->calib || r->calib_chunks == 0 || r->calib_ctx < 1)
        return qs_error_set(err, QS_EINVAL,
                            "export: ModelOpt's NVFP4 stores a calibrated input_scale per linear: "
                            "give calibration chunks");
    const int nl = qw_model_config(m)->n_layers, n = nl * QW_LINEAR_KINDS + 1;
    mo_obs *obs = calloc((size_t)n, sizeof *obs);
    float *out = calloc((size_t)n, sizeof *out);
    if (!obs || !out) {
        free(obs);
        free(out);
        return qs_error_set(err, QS_ENOMEM, "export: out of memory (calibration)");
    }
    for (int i = 0; i < n; i++) {
        const qw_quant_spec *s = i < nl * QW_LINEAR_KINDS ? &r->policy->linears[i]
                                                          : &r->policy->lm_head;
        if (!mo_nvfp4(s)) continue;
        qw_linear *L = qw_model_linear(m, i);
        obs[i].in = L->in;
        L->in_hook = mo_observe;
        L->in_hook_ctx = &obs[i];
    }
    qs_status st = QS_OK;
    for (size_t c = 0; c < r->calib_chunks && !st; c++) {
        const float *logits;
        /* every position's logits: lm_head observes every row, as a full forward does */
        st = qw_model_forward_rows(m, r->calib + c * (size_t)r->calib_ctx, r->calib_ctx, 0,
                                   &logits, err);
        if (st) qs_error_wrap(err, "export: calibration chunk %zu", c);
    }
    for (int i = 0; i < n; i++) {
        if (!obs[i].in) continue;
        qw_linear *L = qw_model_linear(m, i);
        L->in_hook = NULL;
        L->in_hook_ctx = NULL;
        out[i] = obs[i].amax;
    }
    free(obs);
    if (st) {
        free(out);
        return st;
    }
    *amax = out;
    return QS_OK;
}

/* What the layout cannot hold of linear L (block b's fused groups checked by the caller). */
static qs_status mo_check(const ex_linear *L, int tied, qs_error *err) {
    const qw_quant_spec *s = L->spec;
    int wq = s->weight && strcmp(qk_format_name(s->weight), "bf16") != 0;
    if (!wq && !s->act) return QS_OK;
    if (!wq || !mo_nvfp4(s))
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: %s%s: ModelOpt's NVFP4 layout holds NVFP4 linears only "
                            "(export it as compressed-tensors)",
                            L->name, wq ? "format " : "activations in ",
                            qk_format_name(wq ? s->weight : s->act));
    if (!s->act || s->act->rule != QK_RULE_NVFP4)
        return qs_error_set(
            err, QS_EUNSUPPORTED,
            "export: %s: NVFP4 weights with %s activations: ModelOpt's NVFP4 always quantizes "
            "the input (W4A4, a static input_scale), so the served model would not be the "
            "measured one; quantize weights+activations, or export W4A16 as compressed-tensors",
            L->name, s->act ? qk_format_name(s->act) : "unquantized");
    if (tied && !strcmp(L->name, "lm_head"))
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: lm_head: the model ties it to the embeddings, so a quantized "
                            "head and unquantized embeddings cannot be one stored tensor");
    return QS_OK;
}

/* Serving engines run q/k/v (and gate/up) as one GEMM with one weight_scale_2 (vLLM keeps
 * the largest of the members', ModelOpt's export makes them share one amax): the members of a
 * group must all be NVFP4 with one decode scale, or all be left as stored. */
static qs_status mo_check_fused(const ex_linear *lin, qw_model *m, const qw_method_state *ms, int b,
                                const int *kinds, int nk, const char *group, qs_error *err) {
    const ex_linear *first = &lin[b * QW_LINEAR_KINDS + kinds[0]];
    float s0 = 0.f;
    for (int j = 0; j < nk; j++) {
        const ex_linear *L = &lin[b * QW_LINEAR_KINDS + kinds[j]];
        if ((L->group >= 0) != (first->group >= 0))
            return qs_error_set(err, QS_EUNSUPPORTED,
                                "export: %s and %s: serving engines run %s as one GEMM with one "
                                "scheme: quantize all of it or none",
                                first->name, L->name, group);
        if (L->group < 0) continue;
        const qk_packed *p = qw_export_packed(m, ms, L->index);
        if (!p) return qs_error_set(err, QS_EINVAL, "export: %s: no packed form", L->name);
        if (j == 0) s0 = p->tensor_scale;
        /* a method's job (ms) cannot take fuse (kinds/method.h): name what it can do */
        if (p->tensor_scale != s0)
            return qs_error_set(err, QS_EUNSUPPORTED,
                                "export: %s and %s: decode scales %g and %g, but serving engines "
                                "run %s as one GEMM with one weight_scale_2: %s%s%s",
                                first->name, L->name, (double)s0, (double)p->tensor_scale, group,
                                ms ? "the job's method gives each linear its own scale and "
                                     "does not combine with sensitivity.fuse: leave "
                                   : "quantize with sensitivity.fuse (one amax for the group)",
                                ms ? group : "",
                                ms ? " unquantized in the policy, or export as compressed-tensors"
                                   : "");
    }
    return QS_OK;
}

/* Adds linear L's ModelOpt tensors. */
static qs_status mo_add(qw_st_writer *w, const ex_linear *L, const qk_packed *p, float amax_x,
                        qs_error *err) {
    if (p->k % p->block != 0)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: rows of %zu are not whole blocks of %zu", L->name, p->k,
                            p->block);
    if (p->tensor_scale_exp2 != 0)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: its amax %g is tiny and was quantized under tiny_amax "
                            "exact, whose decode scale is no FP32 number weight_scale_2 can hold",
                            L->name, (double)p->tensor_amax);
    if (!(amax_x > 0.f) || !isfinite(amax_x))
        return qs_error_set(err, QS_EINVAL,
                            "export: %s: its input's calibration amax is %g: no input_scale",
                            L->name, (double)amax_x);
    char n[160];
    int64_t sh[2] = {(int64_t)p->rows, (int64_t)p->row_bytes};
    snprintf(n, sizeof n, "%s.weight", L->name);
    qs_status st = qw_st_writer_add(w, n, "U8", 2, sh, p->codes, p->rows * p->row_bytes, err);
    int64_t ss[2] = {(int64_t)p->rows, (int64_t)p->blocks_per_row};
    snprintf(n, sizeof n, "%s.weight_scale", L->name);
    if (!st)
        st = qw_st_writer_add(w, n, "F8_E4M3", 2, ss, p->scales, p->rows * p->blocks_per_row,
                              err);
    /* the engine's decode scale: what its codes were made with, and what ModelOpt multiplies by */
    float s2 = p->tensor_scale, in_scale = amax_x / (MO_FP4_MAX * MO_E4M3_MAX);
    int64_t none[2] = {0, 0};
    snprintf(n, sizeof n, "%s.weight_scale_2", L->name);
    if (!st) st = qw_st_writer_add(w, n, "F32", 0, none, &s2, sizeof s2, err);
    snprintf(n, sizeof n, "%s.input_scale", L->name);
    if (!st) st = qw_st_writer_add(w, n, "F32", 0, none, &in_scale, sizeof in_scale, err);
    return st;
}

qs_status qw_export_modelopt(const qw_export_request *r, qw_checkpoint *ck, qw_model *m,
                             const qw_method_state *ms, const float *amax, const char *tmp,
                             qs_error *err) {
    const qw_config *cfg = qw_checkpoint_config(ck);
    const qw_policy *p = r->policy;
    if (p->embed.weight || p->embed.act)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: model.embed_tokens: ModelOpt's NVFP4 quantizes linears, not "
                            "the embedding lookup");
    ex_linear *lin = NULL;
    int n_lin = 0, n_q = 0;
    qs_status st = qw_export_list_linears(m, p, &lin, &n_lin, err);
    for (int i = 0; i < n_lin && !st; i++) {
        st = mo_check(&lin[i], cfg->tied_embeddings, err);
        lin[i].group = lin[i].spec->weight && mo_nvfp4(lin[i].spec) ? 0 : -1;
        n_q += lin[i].group == 0;
    }
    static const int qkv[] = {QW_LINEAR_Q, QW_LINEAR_K, QW_LINEAR_V};
    static const int gate_up[] = {QW_LINEAR_GATE, QW_LINEAR_UP};
    for (int b = 0; b < cfg->n_layers && !st; b++) {
        st = mo_check_fused(lin, m, ms, b, qkv, 3, "q/k/v", err);
        if (!st) st = mo_check_fused(lin, m, ms, b, gate_up, 2, "gate/up", err);
    }
    if (!st && n_q == 0)
        st = qs_error_set(err, QS_EINVAL,
                          "export: the policy quantizes no linear: the source checkpoint is the "
                          "export");
    qw_st_writer w = {0};
    size_t total = (size_t)n_lin + 4, done = 0;
    for (int i = 0; i < n_lin && !st; i++) {
        if (lin[i].group == 0) {
            const qk_packed *pk = qw_export_packed(m, ms, lin[i].index);
            st = pk ? mo_add(&w, &lin[i], pk, amax[lin[i].index], err)
                    : qs_error_set(err, QS_EINVAL, "export: %s: the engine holds no packed form",
                                   lin[i].name);
        }
        if (r->progress) r->progress(r->progress_ctx, ++done, total);
    }
    /* hf_quant_config.json (get_quant_config) and its config.json form */
    json_t *exclude = json_array(), *ignore = json_array();
    for (int i = 0; i < n_lin; i++)
        if (lin[i].group < 0) {
            json_array_append_new(exclude, json_string(lin[i].name));
            json_array_append_new(ignore, json_string(lin[i].name));
        }
    json_t *hq = json_pack("{s:{s:s, s:s}, s:{s:s, s:n, s:i, s:o}}", "producer", "name",
                           "qsweep", "version", QW_EXPORT_PRODUCER_VERSION, "quantization",
                           "quant_algo", "NVFP4", "kv_cache_quant_algo", "group_size", 16,
                           "exclude_modules", exclude);
    json_t *args = json_pack("{s:b, s:i, s:s, s:i}", "dynamic", 0, "num_bits", 4, "type", "float",
                             "group_size", 16);
    json_t *qc = json_pack(
        "{s:{s:{s:o, s:O, s:[s]}}, s:o, s:s, s:{s:s, s:s}, s:s}", "config_groups", "group_0",
        "input_activations", args, "weights", args, "targets", "Linear", "ignore", ignore,
        "quant_algo", "NVFP4", "producer", "name", "qsweep", "version", QW_EXPORT_PRODUCER_VERSION,
        "quant_method", "modelopt");
    if (!hq || !qc) st = st ? st : qs_error_set(err, QS_ENOMEM, "export: out of memory");
    if (!st) st = qw_export_write_json(tmp, "hf_quant_config.json", hq, err);
    if (r->progress) r->progress(r->progress_ctx, ++done, total);
    json_decref(hq);
    if (!st) {
        st = qw_export_finish(r, ck, &w, lin, n_lin, tmp, qc, &done, total, err);
        qc = NULL;
    }
    json_decref(qc);
    qw_st_writer_free(&w);
    free(lin);
    return st;
}
