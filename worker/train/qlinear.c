/* Quantized linears in training (qlinear.h). */
#include "qlinear.h"

#include <string.h>

#include "bf16_exact.h"
#include "clock.h"
#include "element.h"
#include "format.h"
#include "hadamard.h"
#include "ops.h"
#include "qk_gemm_path.h"

size_t qw_qlinear_scratch_floats(int N, int in, int out) {
    size_t a = (size_t)N * in, b = (size_t)N * out, c = (size_t)out * in;
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

/* The RHT's tile d of spec (16 unless it names one) for an operand whose rows have k elements;
 * QS_EINVAL naming the linear and operand when d does not divide k. */
static qs_status rht_dim(const qw_operand_spec *spec, int linear, qw_gemm_operand op, int k, int *d,
                         qs_error *err) {
    *d = spec->rht_dim ? spec->rht_dim : 16;
    if (k % *d)
        return qs_error_set(err, QS_EINVAL,
                            "linear %d %s: RHT%d needs k %% %d == 0, k is %d (tokens per "
                            "micro-batch for wgrad)",
                            linear, qw_gemm_operand_name(op), *d, *d, k);
    return QS_OK;
}

/* The GEMM input before its quantization: transposed or copied, rounded to BF16, or passed
 * through the RHT (QW_MODE_QUANT), into dst. */
static qs_status stage(const qw_qlinear_env *env, const qw_operand_spec *spec, int linear,
                       qw_gemm_operand op, float *dst, const float *src, int rows, int cols,
                       int transpose, qs_error *err) {
    int r = transpose ? cols : rows, k = transpose ? rows : cols;
    qw_backend *be = env->be;
    const qw_ops *ops = be->ops;
    double t0 = qs_clock_s();
    qs_status st = transpose ? ops->transpose(be, dst, src, rows, cols, err)
                             : ops->copy(be, dst, src, (size_t)rows * cols * sizeof *dst, err);
    qw_tprofile_add_since(env->prof, QW_TPHASE_PREP_COPY, t0);
    if (st != QS_OK) return st;
    if (spec->mode == QW_MODE_FP32) return QS_OK;
    if (spec->mode == QW_MODE_BF16) {
        t0 = qs_clock_s();
        st = ops->round_bf16(be, dst, (size_t)r * k, err);
        qw_tprofile_add_since(env->prof, QW_TPHASE_PREP_BF16, t0);
        return st;
    }
    if (spec->rht) {
        int d;
        if ((st = rht_dim(spec, linear, op, k, &d, err)) != QS_OK) return st;
        t0 = qs_clock_s();
        st = ops->rht(be, dst, (size_t)r, (size_t)k, d, env->seed, err);
        qw_tprofile_add_since(env->prof, QW_TPHASE_PREP_RHT, t0);
        if (st != QS_OK)
            return qs_error_wrap(err, "linear %d %s", linear, qw_gemm_operand_name(op));
    }
    return QS_OK;
}

/* The quantizer's options for GEMM input op of linear `linear`: the recipe's rounding and the
 * SR stream (seed, tensor id, step). */
static qk_quant_options quant_options(const qw_qlinear_env *env, const qw_operand_spec *spec,
                                      int linear, qw_gemm_operand op) {
    qk_quant_options opt = {0};
    opt.rounding = spec->rounding;
    opt.seed = env->seed;
    opt.tensor_id = (uint32_t)linear * QW_N_OPERANDS + (uint32_t)op;
    opt.step = env->step;
    opt.threads = env->be->threads;
    return opt;
}

/* Fake-quantizes the staged input dst [r x k] in place (QW_MODE_QUANT only); amax, when not
 * NULL, is dst's tensor amax already known (rht_from's), given to a format with a tensor scale
 * so that the quantizer need not read dst once more for it (the same value, so the same bits). */
static qs_status fake_quant_amax(const qw_qlinear_env *env, const qw_operand_spec *spec, int linear,
                                 qw_gemm_operand op, float *dst, int r, int k, const float *amax,
                                 qs_error *err) {
    if (spec->mode != QW_MODE_QUANT) return QS_OK;
    qk_quant_options opt = quant_options(env, spec, linear, op);
    if (amax && spec->fmt->tensor_scale) {
        opt.tensor_amax_given = 1;
        opt.tensor_amax = *amax;
    }
    double t0 = qs_clock_s();
    qs_status st =
        env->be->ops->fake_quant(env->be, spec->fmt, &opt, dst, (size_t)r, (size_t)k, err);
    qw_tprofile_add_since(env->prof, QW_TPHASE_PREP_QUANT, t0);
    if (st != QS_OK) return qs_error_wrap(err, "linear %d %s", linear, qw_gemm_operand_name(op));
    return QS_OK;
}

static qs_status fake_quant(const qw_qlinear_env *env, const qw_operand_spec *spec, int linear,
                            qw_gemm_operand op, float *dst, int r, int k, qs_error *err) {
    return fake_quant_amax(env, spec, linear, op, dst, r, k, NULL, err);
}

/* stage() of an input the recipe passes through the RHT, on a backend with rht_from (the
 * CPU): the transpose or copy and the transform in one pass over the source, which also
 * gives the tensor amax; the same bits as stage(). */
static qs_status stage_rht_from(const qw_qlinear_env *env, const qw_operand_spec *spec, int linear,
                                qw_gemm_operand op, float *dst, const float *src, int rows,
                                int cols, int transpose, float *amax, qs_error *err) {
    int r = transpose ? cols : rows, k = transpose ? rows : cols;
    int d;
    qs_status st = rht_dim(spec, linear, op, k, &d, err);
    if (st != QS_OK) return st;
    double t0 = qs_clock_s();
    st = env->be->ops->rht_from(env->be, dst, src, (size_t)r, (size_t)k, transpose, d, env->seed,
                                amax, err);
    qw_tprofile_add_since(env->prof, QW_TPHASE_PREP_RHT, t0);
    if (st != QS_OK) return qs_error_wrap(err, "linear %d %s", linear, qw_gemm_operand_name(op));
    return QS_OK;
}

qs_status qw_qlinear_prepare(const qw_qlinear_env *env, const qw_operand_spec *spec, int linear,
                             qw_gemm_operand op, float *dst, const float *src, int rows, int cols,
                             int transpose, qs_error *err) {
    qs_status st = stage(env, spec, linear, op, dst, src, rows, cols, transpose, err);
    if (st != QS_OK) return st;
    return fake_quant(env, spec, linear, op, dst, transpose ? cols : rows, transpose ? rows : cols,
                      err);
}

/* Notes that GEMM kind g ran on path p (qk_gemm_path) in env->ran. */
static void note(const qw_qlinear_env *env, qw_linear_gemm g, int p) {
    if (env->ran && (unsigned)g < QW_N_LINEAR_GEMMS && p >= 0 && p < 31) env->ran[g] |= 1u << p;
}

/* The profile's phase of GEMM g of linear `linear` of block `layer` (-1: lm_head). */
static qw_tphase gemm_phase(int layer, int linear, qw_linear_gemm g) {
    int kinds = QW_TPROFILE_LINEARS - 1;
    return qw_tphase_gemm(layer < 0 ? kinds : linear % kinds, g);
}

/* 1 when GEMM g of a linear of block `layer` runs on BF16 operands: both inputs BF16-exact
 * under the recipe (bf16_exact.h) and no FP32 asked for (env->gemm_fp32). */
static int gemm_bf16(const qw_qlinear_env *env, int layer, qw_linear_gemm g) {
    return !env->gemm_fp32 && qw_recipe_gemm_bf16(env->recipe, layer, env->n_layers, g);
}

/* C = A B^T + beta C for GEMM g of a linear of block `layer`: with BF16 operands
 * (gemm_abt_bf16) where gemm_bf16 says, else FP32 (gemm_abt). */
static qs_status gemm(const qw_qlinear_env *env, int layer, int linear, qw_linear_gemm g, float *C,
                      const float *A, const float *Bm, int M, int Ncol, int K, float beta,
                      qs_error *err) {
    qw_backend *be = env->be;
    int bf16 = gemm_bf16(env, layer, g);
    note(env, g, bf16 ? QK_GEMM_PATH_BF16 : QK_GEMM_PATH_FP32);
    double t0 = qs_clock_s();
    qs_status st = bf16 ? be->ops->gemm_abt_bf16(be, C, A, Bm, M, Ncol, K, beta, err)
                        : be->ops->gemm_abt(be, C, A, Bm, M, Ncol, K, beta, err);
    qw_tprofile_add_since(env->prof, gemm_phase(layer, linear, g), t0);
    return st;
}

/* One GEMM input: which operand, its high-precision source [rows x cols], transposed or not;
 * bf16, when not NULL, src already rounded to BF16 in its own layout (the previous GEMM's input
 * made from the same source, which the in-layout path reads rather than rounding it again). */
typedef struct gemm_input {
    qw_gemm_operand op;
    const float *src;
    int rows, cols, transpose;
    const float *bf16;
} gemm_input;

/* Input in of a gemm_tt (ops.h) made as spec says into buf: a quantized one staged [r x K] and
 * fake-quantized (blocks run along K), a BF16 one rounded in one pass in its source's layout, an
 * FP32 one its source itself; *out, *t (gemm_tt's transpose flag of operand A, or of B when
 * is_b) and *ld say where and how it lies. */
static qs_status prepare_in_layout(const qw_qlinear_env *env, const qw_operand_spec *spec,
                                   int linear, const gemm_input *in, float *buf, int K, int is_b,
                                   const float **out, int *t, int *ld, qs_error *err) {
    qw_backend *be = env->be;
    if (spec->mode == QW_MODE_QUANT && !spec->rht && !in->transpose && be->ops->fake_quant_into &&
        !env->unfused_prep) {
        /* the copy and the quantization in one pass: the source is read where it lies */
        qk_quant_options opt = quant_options(env, spec, linear, in->op);
        double t0 = qs_clock_s();
        qs_status st = be->ops->fake_quant_into(be, spec->fmt, &opt, buf, in->src, (size_t)in->rows,
                                                (size_t)K, err);
        qw_tprofile_add_since(env->prof, QW_TPHASE_PREP_QUANT, t0);
        *out = buf;
        *t = is_b;
        *ld = K;
        if (st != QS_OK)
            return qs_error_wrap(err, "linear %d %s", linear, qw_gemm_operand_name(in->op));
        return QS_OK;
    }
    if (spec->mode == QW_MODE_QUANT) {
        float amax;
        int fused = spec->rht && be->ops->rht_from && !env->unfused_prep;
        qs_status st = fused ? stage_rht_from(env, spec, linear, in->op, buf, in->src, in->rows,
                                              in->cols, in->transpose, &amax, err)
                             : stage(env, spec, linear, in->op, buf, in->src, in->rows, in->cols,
                                     in->transpose, err);
        if (st == QS_OK)
            st = fake_quant_amax(env, spec, linear, in->op, buf,
                                 in->transpose ? in->cols : in->rows, K, fused ? &amax : NULL, err);
        *out = buf;
        *t = is_b;
        *ld = K;
        return st;
    }
    /* A [M x K] is the source, or its transpose; B [Ncol x K] the same the other way round */
    *t = is_b ? !in->transpose : in->transpose;
    *ld = in->cols;
    *out = in->src;
    if (spec->mode == QW_MODE_FP32) return QS_OK;
    if (in->bf16) {
        *out = in->bf16;
        if (env->shared) env->shared->dy_reused++;
        return QS_OK;
    }
    size_t n = (size_t)in->rows * in->cols;
    double t0 = qs_clock_s();
    qs_status st = be->ops->round_bf16_copy ? be->ops->round_bf16_copy(be, buf, in->src, n, err)
                                            : be->ops->copy(be, buf, in->src, n * sizeof *buf, err);
    if (st == QS_OK && !be->ops->round_bf16_copy) st = be->ops->round_bf16(be, buf, n, err);
    qw_tprofile_add_since(env->prof, QW_TPHASE_PREP_BF16, t0);
    *out = buf;
    return st;
}

/* 1 when input in under spec goes through env->shared: an X input of a grouped linear, made
 * deterministically (RNE, RZ or BF16; an FP32 input is read where it lies), that fits. */
static int shareable(const qw_qlinear_env *env, const qw_operand_spec *spec, const gemm_input *in) {
    const qw_shared_input *s = env->shared;
    if (!s || !s->buf || env->group < 0 || env->hook) return 0;
    if (in->op != QW_FPROP_X && in->op != QW_WGRAD_X) return 0;
    if (spec->mode == QW_MODE_FP32) return 0;
    if (spec->mode == QW_MODE_QUANT && spec->rounding == QK_ROUND_SR) return 0;
    return (size_t)in->rows * in->cols <= s->cap;
}

static int same_spec(const qw_operand_spec *a, const qw_operand_spec *b) {
    return a->mode == b->mode && a->fmt == b->fmt && a->rounding == b->rounding &&
           a->rht == b->rht && a->rht_dim == b->rht_dim;
}

/* 1 when env->shared holds input in made under spec for this group. */
static int shared_holds(const qw_qlinear_env *env, const qw_operand_spec *spec,
                        const gemm_input *in) {
    const qw_shared_input *s = env->shared;
    return s->valid && s->group == env->group && s->op == in->op && s->src == in->src &&
           s->rows == in->rows && s->cols == in->cols && s->transpose == in->transpose &&
           s->seed == env->seed && same_spec(&s->spec, spec);
}

/* Records that env->shared now holds input in made under spec, read as gemm_tt's t and ld. */
static void shared_keep(const qw_qlinear_env *env, const qw_operand_spec *spec,
                        const gemm_input *in, int t, int ld) {
    qw_shared_input *s = env->shared;
    s->valid = 1;
    s->group = env->group;
    s->op = in->op;
    s->src = in->src;
    s->rows = in->rows;
    s->cols = in->cols;
    s->transpose = in->transpose;
    s->spec = *spec;
    s->seed = env->seed;
    s->t = t;
    s->ld = ld;
    s->made++;
}

/* prepare_in_layout through env->shared: a shareable input read from there when the group made
 * it already, else made there; any other input made into buf. */
static qs_status prepare_or_share(const qw_qlinear_env *env, const qw_operand_spec *spec,
                                  int linear, const gemm_input *in, float *buf, int K, int is_b,
                                  const float **out, int *t, int *ld, qs_error *err) {
    if (!shareable(env, spec, in))
        return prepare_in_layout(env, spec, linear, in, buf, K, is_b, out, t, ld, err);
    qw_shared_input *s = env->shared;
    if (shared_holds(env, spec, in)) {
        *out = s->buf;
        *t = s->t;
        *ld = s->ld;
        s->reused++;
        return QS_OK;
    }
    s->valid = 0;
    qs_status st = prepare_in_layout(env, spec, linear, in, s->buf, K, is_b, out, t, ld, err);
    if (st == QS_OK) shared_keep(env, spec, in, *t, *ld);
    return st;
}

/* Input in of the staged path (stage, then fake_quant: [r x K] row-major) through
 * env->shared: *done 1 and *p the shared buffer when it holds the input that way or has just
 * made it; *done 0 (the caller stages it) when in is not shareable. */
static qs_status staged_shared(const qw_qlinear_env *env, const qw_operand_spec *spec, int linear,
                               const gemm_input *in, int K, int is_b, const float **p, int *done,
                               qs_error *err) {
    *done = 0;
    if (!shareable(env, spec, in)) return QS_OK;
    qw_shared_input *s = env->shared;
    *p = s->buf;
    *done = 1;
    if (shared_holds(env, spec, in) && s->t == is_b && s->ld == K) {
        s->reused++;
        return QS_OK;
    }
    s->valid = 0;
    qs_status st =
        stage(env, spec, linear, in->op, s->buf, in->src, in->rows, in->cols, in->transpose, err);
    if (st == QS_OK)
        st = fake_quant(env, spec, linear, in->op, s->buf, in->transpose ? in->cols : in->rows, K,
                        err);
    if (st == QS_OK) shared_keep(env, spec, in, is_b, K);
    return st;
}

/* Weight input `in` quantized under spec by the backend's quant_operand (ops.h) into its kept
 * slot: W as it lies for fprop; W^T for dgrad, transposed into buf_b first (free at this
 * point of every GEMM: B is staged there only where nothing is kept). */
static qs_status make_kept(const qw_qlinear_env *env, const qw_operand_spec *spec, int linear,
                           const gemm_input *in, void *slot, qs_error *err) {
    qw_backend *be = env->be;
    const float *src = in->src;
    int r = in->transpose ? in->cols : in->rows, k = in->transpose ? in->rows : in->cols;
    qs_status st = QS_OK;
    double t0 = qs_clock_s();
    if (in->transpose) {
        st = be->ops->transpose(be, env->buf_b, in->src, in->rows, in->cols, err);
        src = env->buf_b;
        qw_tprofile_add_since(env->prof, QW_TPHASE_PREP_COPY, t0);
        t0 = qs_clock_s();
    }
    if (st != QS_OK) return st;
    qk_quant_options opt = quant_options(env, spec, linear, in->op);
    st = be->ops->quant_operand(be, spec->fmt, &opt, slot, src, (size_t)r, (size_t)k, err);
    qw_tprofile_add_since(env->prof, QW_TPHASE_PREP_QUANT, t0);
    if (st != QS_OK)
        return qs_error_wrap(err, "linear %d %s", linear, qw_gemm_operand_name(in->op));
    return QS_OK;
}

/* The weight input in (fprop's W or dgrad's W^T, quantized under spec) kept in env->wcache as
 * FP32 values (a backend without gemm_abt_quant_kept: the CPU), made there first when this step
 * has not made it yet: *kept 1 and *out, *t, *ld as prepare_in_layout's for operand B; *kept 0
 * (nothing else set) when the cache does not keep it. Dgrad's input whose values are fprop's
 * transposed (wcache.h) is fprop's slot read as B^T. */
static qs_status kept_weight(const qw_qlinear_env *env, int layer, int linear,
                             const qw_operand_spec *spec, const gemm_input *in, int *kept,
                             const float **out, int *t, int *ld, qs_error *err) {
    *kept = 0;
    qw_wcache *c = env->wcache;
    if (!c || c->packed || (in->op != QW_FPROP_W && in->op != QW_DGRAD_W) || !qw_wcache_keeps(spec))
        return QS_OK;
    gemm_input made = *in;
    qw_operand_spec fw = *spec;
    int transposed = 0;
    if (!qw_wcache_slot(c, linear, in->op) && in->op == QW_DGRAD_W) {
        qw_recipe_operand(env->recipe, layer, env->n_layers, QW_FPROP_W, &fw);
        if (!qw_wcache_dgrad_is_transpose(&fw, spec)) return QS_OK;
        made = (gemm_input){QW_FPROP_W, in->src, in->rows, in->cols, 0, NULL};
        transposed = 1;
    }
    float *slot = qw_wcache_slot(c, linear, made.op);
    unsigned char *valid = qw_wcache_valid(c, linear, made.op);
    if (!slot) return QS_OK;
    if (!*valid) {
        qs_status st = make_kept(env, &fw, linear, &made, slot, err);
        if (st != QS_OK) return st;
        *valid = 1;
    }
    *kept = 1;
    *out = slot;
    /* fprop's Wq [out x in] is B^T of dgrad's B [in x out] */
    *t = !transposed;
    *ld = made.transpose ? made.rows : made.cols; /* the slot's row length */
    return QS_OK;
}

/* Weight input `in` of a GEMM that gemm_abt_quant_kept runs, kept in env->wcache in the
 * backend's packed form, made there first when this step has not made it yet: *bq the kept
 * operand, NULL when the cache does not keep it. */
static qs_status kept_packed(const qw_qlinear_env *env, int linear, const qw_operand_spec *spec,
                             const gemm_input *in, const void **bq, qs_error *err) {
    *bq = NULL;
    qw_wcache *c = env->wcache;
    if (!c || !c->packed || !qw_wcache_keeps(spec)) return QS_OK;
    void *slot = qw_wcache_slot(c, linear, in->op);
    unsigned char *valid = qw_wcache_valid(c, linear, in->op);
    if (!slot) return QS_OK;
    if (!*valid) {
        qs_status st = make_kept(env, spec, linear, in, slot, err);
        if (st != QS_OK) return st;
        *valid = 1;
    }
    *bq = slot;
    return QS_OK;
}

/* linear_gemm on a backend with gemm_tt (the CPU): no operand is copied or transposed that
 * need not be (prepare_in_layout), the same bits as the staged path on the fixed-order GEMM.
 * *bf16_a (unless bf16_a is NULL): buf_a when A is rounded to BF16 there in its source's layout
 * (what a later GEMM of the same source may read as its gemm_input.bf16), else NULL. */
static qs_status linear_gemm_in_layout(const qw_qlinear_env *env, int layer, int linear,
                                       qw_linear_gemm g, float *C, const gemm_input *a,
                                       const qw_operand_spec *sa, const gemm_input *b,
                                       const qw_operand_spec *sb, int M, int Ncol, int K,
                                       float beta, const float **bf16_a, qs_error *err) {
    qw_backend *be = env->be;
    const float *pa, *pb;
    int ta, tb, lda, ldb;
    int kept = 0;
    qs_status st = prepare_or_share(env, sa, linear, a, env->buf_a, K, 0, &pa, &ta, &lda, err);
    if (bf16_a && st == QS_OK && sa->mode == QW_MODE_BF16 && pa == env->buf_a) *bf16_a = pa;
    if (st == QS_OK) st = kept_weight(env, layer, linear, sb, b, &kept, &pb, &tb, &ldb, err);
    if (st == QS_OK && !kept)
        st = prepare_or_share(env, sb, linear, b, env->buf_b, K, 1, &pb, &tb, &ldb, err);
    if (st != QS_OK) return st;
    int bf16 = gemm_bf16(env, layer, g);
    note(env, g, bf16 ? QK_GEMM_PATH_BF16 : QK_GEMM_PATH_FP32);
    double t0 = qs_clock_s();
    st = be->ops->gemm_tt(be, bf16, C, ta, pa, lda, tb, pb, ldb, M, Ncol, K, beta, err);
    qw_tprofile_add_since(env->prof, gemm_phase(layer, linear, g), t0);
    return st;
}

/* C[M x Ncol] = A B^T + beta C, GEMM g of linear `linear` of block `layer`, its inputs a (into
 * buf_a) and b (into buf_b) made as the recipe says. Where both are quantized and the backend
 * quantizes along K itself (ops.h gemm_abt_quant: a block-scaled GEMM, native or emulated in
 * BF16) and no hook watches the inputs, the staged inputs go to it, or A with the weight the
 * cache keeps in the backend's packed form to gemm_abt_quant_kept; where it declines
 * (QS_EUNSUPPORTED: a format or shape it does not run) or is absent (the CPU), the staged
 * inputs are fake-quantized and multiplied by gemm. A backend with gemm_tt (the CPU) takes
 * linear_gemm_in_layout instead unless a hook watches the staged inputs. bf16_a, unless NULL:
 * linear_gemm_in_layout's, else NULL. */
static qs_status linear_gemm(const qw_qlinear_env *env, int layer, int linear, qw_linear_gemm g,
                             float *C, const gemm_input *a, const gemm_input *b, int M, int Ncol,
                             int K, float beta, const float **bf16_a, qs_error *err) {
    qw_backend *be = env->be;
    if (bf16_a) *bf16_a = NULL;
    qw_operand_spec sa, sb;
    qw_recipe_operand(env->recipe, layer, env->n_layers, a->op, &sa);
    qw_recipe_operand(env->recipe, layer, env->n_layers, b->op, &sb);
    int both_quant = sa.mode == QW_MODE_QUANT && sb.mode == QW_MODE_QUANT;
    /* the block-scaled GEMM is not FP32: under gemm_fp32 the inputs are fake-quantized */
    int qgemm = be->ops->gemm_abt_quant && !env->hook && both_quant && !env->gemm_fp32;
    /* gemm_tt of nothing: whether the backend runs it now (ops.h) */
    if (be->ops->gemm_tt && !env->hook && !qgemm &&
        be->ops->gemm_tt(be, 0, C, 0, a->src, 1, 0, b->src, 1, 0, 0, 0, beta, NULL) == QS_OK)
        return linear_gemm_in_layout(env, layer, linear, g, C, a, &sa, b, &sb, M, Ncol, K, beta,
                                     bf16_a, err);
    float *ba = env->buf_a, *bb = env->buf_b;
    const float *pb = bb;
    int kept = 0;
    const void *packed = NULL;
    qs_status st = QS_OK;
    if (qgemm && be->ops->gemm_abt_quant_kept)
        st = kept_packed(env, linear, &sb, b, &packed, err);
    if (st == QS_OK && !env->hook && !qgemm) {
        const float *kb;
        int tb, ldb;
        st = kept_weight(env, layer, linear, &sb, b, &kept, &kb, &tb, &ldb, err);
        if (st == QS_OK && kept && !tb) {
            /* dgrad's input is fprop's kept Wq [K x Ncol] transposed */
            double t0 = qs_clock_s();
            st = be->ops->transpose(be, bb, kb, K, Ncol, err);
            qw_tprofile_add_since(env->prof, QW_TPHASE_PREP_COPY, t0);
        } else if (kept) {
            pb = kb;
        }
    }
    if (st != QS_OK) return st;
    const float *pa = ba;
    int a_shared = 0, b_shared = 0;
    if (!qgemm) {
        st = staged_shared(env, &sa, linear, a, K, 0, &pa, &a_shared, err);
        if (st == QS_OK && !kept)
            st = staged_shared(env, &sb, linear, b, K, 1, &pb, &b_shared, err);
        if (st != QS_OK) return st;
    }
    if (!a_shared)
        st = stage(env, &sa, linear, a->op, ba, a->src, a->rows, a->cols, a->transpose, err);
    if (st == QS_OK && !kept && !packed && !b_shared)
        st = stage(env, &sb, linear, b->op, bb, b->src, b->rows, b->cols, b->transpose, err);
    if (st != QS_OK) return st;
    if (qgemm) {
        qk_quant_options oa = quant_options(env, &sa, linear, a->op);
        qk_quant_options ob = quant_options(env, &sb, linear, b->op);
        int path = -1;
        qs_error declined = {0};
        double t0 = qs_clock_s();
        st = packed ? be->ops->gemm_abt_quant_kept(be, C, ba, sa.fmt, &oa, packed, sb.fmt, M, Ncol,
                                                   K, beta, &path, &declined)
                    : be->ops->gemm_abt_quant(be, C, ba, sa.fmt, &oa, bb, sb.fmt, &ob, M, Ncol, K,
                                              beta, &path, &declined);
        qw_tprofile_add_since(env->prof, gemm_phase(layer, linear, g), t0);
        if (st == QS_OK) {
            note(env, g, path);
            return QS_OK;
        }
        if (st != QS_EUNSUPPORTED) {
            if (err) *err = declined;
            return qs_error_wrap(err, "linear %d %s", linear, qw_linear_gemm_name(g));
        }
        /* declined: B is made from its source as on a backend without the op */
        if (packed) {
            st = stage(env, &sb, linear, b->op, bb, b->src, b->rows, b->cols, b->transpose, err);
            if (st != QS_OK) return st;
        }
    }
    int ra = a->transpose ? a->cols : a->rows, rb = b->transpose ? b->cols : b->rows;
    if (!a_shared) st = fake_quant(env, &sa, linear, a->op, ba, ra, K, err);
    if (st == QS_OK && !kept && !b_shared) st = fake_quant(env, &sb, linear, b->op, bb, rb, K, err);
    if (st == QS_OK && env->hook) {
        env->hook(env->hook_user, linear, a->op, a->src, a->rows, a->cols, ba, ra, K);
        env->hook(env->hook_user, linear, b->op, b->src, b->rows, b->cols, bb, rb, K);
    }
    if (st != QS_OK) return st;
    return gemm(env, layer, linear, g, C, pa, pb, M, Ncol, K, beta, err);
}

int qw_qlinear_layer_fp32(const qw_recipe *r, int layer, int n_layers) {
    qw_operand_spec s;
    qw_recipe_operand(r, layer, n_layers, QW_FPROP_X, &s);
    return s.mode == QW_MODE_FP32;
}

static int all_fp32(const qw_qlinear_env *env, int layer) {
    return qw_qlinear_layer_fp32(env->recipe, layer, env->n_layers);
}

qs_status qw_qlinear_forward(const qw_qlinear_env *env, int layer, int linear, float *y,
                             const float *x, const float *W, int N, int in, int out,
                             qs_error *err) {
    qw_backend *be = env->be;
    if (all_fp32(env, layer)) {
        note(env, QW_GEMM_FPROP, QK_GEMM_PATH_FP32);
        double t0 = qs_clock_s();
        qs_status st = be->ops->gemm_abt(be, y, x, W, N, out, in, 0.0f, err);
        qw_tprofile_add_since(env->prof, gemm_phase(layer, linear, QW_GEMM_FPROP), t0);
        return st;
    }
    gemm_input a = {QW_FPROP_X, x, N, in, 0, NULL}, b = {QW_FPROP_W, W, out, in, 0, NULL};
    return linear_gemm(env, layer, linear, QW_GEMM_FPROP, y, &a, &b, N, out, in, 0.0f, NULL, err);
}

qs_status qw_qlinear_backward(const qw_qlinear_env *env, int layer, int linear, float *dx,
                              int dx_accumulate, float *dW, const float *dy, const float *x,
                              const float *W, int N, int in, int out, qs_error *err) {
    qw_backend *be = env->be;
    if (all_fp32(env, layer)) {
        if (dx) note(env, QW_GEMM_DGRAD, QK_GEMM_PATH_FP32);
        note(env, QW_GEMM_WGRAD, QK_GEMM_PATH_FP32);
        double t0 = qs_clock_s();
        qs_status st = be->ops->linear_bwd(be, dx, dx_accumulate, dW, dy, x, W, N, in, out, err);
        /* one table call for both GEMMs: their time split evenly (the same FLOPs) when both ran */
        double dt = qs_clock_s() - t0;
        if (env->prof) {
            if (dx) {
                env->prof->s[gemm_phase(layer, linear, QW_GEMM_DGRAD)] += dt / 2;
                dt /= 2;
            }
            env->prof->s[gemm_phase(layer, linear, QW_GEMM_WGRAD)] += dt;
        }
        return st;
    }
    qs_status st = QS_OK;
    /* dgrad's dY, where it rounded it to BF16 in its own layout (buf_a, which nothing writes
     * before wgrad), is wgrad's too when wgrad takes dY in BF16 (BF16 rounding has no options):
     * rounded once, not twice, with the sharing of made inputs on (env->shared; the in-layout
     * path reads it and counts it in dy_reused, the staged path rounds its own) */
    const float *dy_bf16 = NULL;
    if (dx) {
        gemm_input a = {QW_DGRAD_DY, dy, N, out, 0, NULL}, b = {QW_DGRAD_W, W, out, in, 1, NULL};
        st = linear_gemm(env, layer, linear, QW_GEMM_DGRAD, dx, &a, &b, N, in, out,
                         dx_accumulate ? 1.0f : 0.0f, env->shared ? &dy_bf16 : NULL, err);
        if (st != QS_OK) return st;
        qw_operand_spec wa;
        qw_recipe_operand(env->recipe, layer, env->n_layers, QW_WGRAD_DY, &wa);
        if (wa.mode != QW_MODE_BF16) dy_bf16 = NULL;
    }
    gemm_input a = {QW_WGRAD_DY, dy, N, out, 1, dy_bf16}, b = {QW_WGRAD_X, x, N, in, 1, NULL};
    return linear_gemm(env, layer, linear, QW_GEMM_WGRAD, dW, &a, &b, out, in, N, 1.0f, NULL, err);
}
