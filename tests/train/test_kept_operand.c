/* The kept operand (ops.h quant_operand, gemm_abt_quant_kept) as the weight cache
 * (worker/train/wcache.h) drives it, on CPU backends whose tables count the calls:
 * - the CPU's own form (FP32 values): quant_operand makes each kept weight once per optimizer
 *   step (fprop's W, and dgrad's W^T where its blocks run along another axis), every
 *   micro-batch of a gradient accumulation reads it, the next step makes it again, no SR
 *   operand is ever kept and no GEMM quantizes a weight itself;
 * - a packed form, as CUDA's: the table also has gemm_abt_quant (both inputs fake-quantized,
 *   then gemm_abt) and gemm_abt_quant_kept (B read from the kept operand, a 256-byte header
 *   naming its shape and format checked on every read), so the control flow of a device
 *   backend runs here: dgrad keeps its own copy even with 2D blocks, every quantized GEMM with a
 *   weight reads the kept operand, the cache's bytes are the backend's operand sizes, its one
 *   allocation is made by the backend and freed by it, and where gemm_abt_quant_kept declines
 *   the GEMM quantizes B from the source weight;
 * - in every case the training's losses and final weights are the plain CPU's without a cache,
 *   bit for bit.
 * Data: random tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm.h"
#include "data.h"
#include "format.h"
#include "optim.h"
#include "qk_gemm_path.h"
#include "quant.h"
#include "small_config.h"
#include "train_fixture.h"
#include "train_run.h"
#include "tmodel.h"
#include "trainer.h"

enum { B = 2, T = 32, STEPS = 3, ACCUM = 3, NTOK = 8192, SEED = 77, HEADER = 256 };

/* dim 64, FFN 128, 2 blocks: nvfp4 quantizes block 0, keeps block 1 in BF16 */
static qw_config small_config(void) {
    return small_config_of(64, 128, 2, 4, 2, 16, 64);
}

/* What the counting tables saw. */
static struct {
    int quant_operand;     /* kept operands made */
    int quant_operand_sr;  /* ... of them with stochastic rounding */
    int quant_operand_act; /* ... of them of an operand that is not a weight */
    int weight_quantized;  /* a weight quantized by fake_quant(_into) or gemm_abt_quant */
    int kept_gemms;        /* gemm_abt_quant_kept calls that ran */
    int decline_kept;      /* 1: gemm_abt_quant_kept declines every call */
    void *allocs[64];      /* live backend allocations */
    size_t sizes[64];      /* the bytes of every allocation made */
    int n_sizes;
} seen;

static int is_weight(const qk_quant_options *o) {
    unsigned op = o->tensor_id % QW_N_OPERANDS;
    return op == QW_FPROP_W || op == QW_DGRAD_W;
}

static void *t_alloc(qw_backend *b, size_t bytes) {
    void *p = qw_ops_cpu()->alloc(b, bytes);
    if (p && seen.n_sizes < 64) seen.sizes[seen.n_sizes++] = bytes;
    for (int i = 0; p && i < 64; i++)
        if (!seen.allocs[i]) {
            seen.allocs[i] = p;
            break;
        }
    return p;
}

static void t_free(qw_backend *b, void *p) {
    for (int i = 0; p && i < 64; i++)
        if (seen.allocs[i] == p) seen.allocs[i] = NULL;
    qw_ops_cpu()->free(b, p);
}

static qs_status t_fake_quant(qw_backend *b, const qk_format *fmt, const qk_quant_options *opt,
                              float *x, size_t rows, size_t k, qs_error *err) {
    seen.weight_quantized += is_weight(opt);
    return qw_ops_cpu()->fake_quant(b, fmt, opt, x, rows, k, err);
}

static qs_status t_fake_quant_into(qw_backend *b, const qk_format *fmt, const qk_quant_options *opt,
                                   float *dst, const float *src, size_t rows, size_t k,
                                   qs_error *err) {
    seen.weight_quantized += is_weight(opt);
    return qw_ops_cpu()->fake_quant_into(b, fmt, opt, dst, src, rows, k, err);
}

static void note_kept(const qk_quant_options *opt) {
    seen.quant_operand++;
    seen.quant_operand_sr += opt->rounding == QK_ROUND_SR;
    seen.quant_operand_act += !is_weight(opt);
}

static qs_status t_quant_operand(qw_backend *b, const qk_format *fmt, const qk_quant_options *opt,
                                 void *mem, const float *x, size_t rows, size_t k, qs_error *err) {
    note_kept(opt);
    return qw_ops_cpu()->quant_operand(b, fmt, opt, mem, x, rows, k, err);
}

/* The packed form: a header (rows, k, the format) then the fake-quantized FP32 values. */
typedef struct packed_header {
    size_t rows, k;
    const qk_format *fmt;
} packed_header;

static size_t p_quant_operand_bytes(qw_backend *b, const qk_format *fmt, size_t rows, size_t k) {
    (void)b, (void)fmt;
    return HEADER + rows * k * sizeof(float);
}

static qs_status p_quant_operand(qw_backend *b, const qk_format *fmt, const qk_quant_options *opt,
                                 void *mem, const float *x, size_t rows, size_t k, qs_error *err) {
    (void)b;
    note_kept(opt);
    *(packed_header *)mem = (packed_header){rows, k, fmt};
    return qk_fake_quant_into(fmt, opt, x, (float *)(void *)((char *)mem + HEADER), rows, k, NULL,
                              err);
}

/* C = Aq Bq^T + beta C: A [M x K] quantized under (fa, oa), Bq [Ncol x K] already quantized. */
static qs_status quant_a_gemm(qw_backend *b, float *C, const float *A, const qk_format *fa,
                              const qk_quant_options *oa, const float *bq, int M, int Ncol, int K,
                              float beta, int *path, qs_error *err) {
    float *aq = malloc((size_t)M * K * sizeof *aq);
    assert_non_null(aq);
    qs_status st = qk_fake_quant_into(fa, oa, A, aq, (size_t)M, (size_t)K, NULL, err);
    if (st == QS_OK) st = qw_ops_cpu()->gemm_abt(b, C, aq, bq, M, Ncol, K, beta, err);
    free(aq);
    if (path) *path = QK_GEMM_PATH_EMULATED_BF16;
    return st;
}

static qs_status p_gemm_abt_quant(qw_backend *b, float *C, const float *A, const qk_format *fa,
                                  const qk_quant_options *oa, const float *Bm, const qk_format *fb,
                                  const qk_quant_options *ob, int M, int Ncol, int K, float beta,
                                  int *path, qs_error *err) {
    seen.weight_quantized += is_weight(ob);
    float *bq = malloc((size_t)Ncol * K * sizeof *bq);
    assert_non_null(bq);
    qs_status st = qk_fake_quant_into(fb, ob, Bm, bq, (size_t)Ncol, (size_t)K, NULL, err);
    if (st == QS_OK) st = quant_a_gemm(b, C, A, fa, oa, bq, M, Ncol, K, beta, path, err);
    free(bq);
    return st;
}

static qs_status p_gemm_abt_quant_kept(qw_backend *b, float *C, const float *A, const qk_format *fa,
                                       const qk_quant_options *oa, const void *bq,
                                       const qk_format *fb, int M, int Ncol, int K, float beta,
                                       int *path, qs_error *err) {
    if (seen.decline_kept)
        return qs_error_set(err, QS_EUNSUPPORTED, "gemm_abt_quant_kept: declined by the test");
    const packed_header *h = bq;
    if (h->rows != (size_t)Ncol || h->k != (size_t)K || h->fmt != fb)
        fail_msg("kept operand [%zu x %zu] %s read as [%d x %d] %s", h->rows, h->k,
                 qk_format_name(h->fmt), Ncol, K, qk_format_name(fb));
    seen.kept_gemms++;
    return quant_a_gemm(b, C, A, fa, oa, (const float *)(const void *)((const char *)bq + HEADER),
                        M, Ncol, K, beta, path, err);
}

static qw_ops counted, packed;

static void tables(void) {
    counted = *qw_ops_cpu();
    counted.alloc = t_alloc;
    counted.free = t_free;
    counted.fake_quant = t_fake_quant;
    counted.fake_quant_into = t_fake_quant_into;
    counted.quant_operand = t_quant_operand;
    packed = counted;
    packed.quant_operand_bytes = p_quant_operand_bytes;
    packed.quant_operand = p_quant_operand;
    packed.gemm_abt_quant = p_gemm_abt_quant;
    packed.gemm_abt_quant_kept = p_gemm_abt_quant_kept;
}

typedef struct kept_run {
    int cache;
    int *made; /* [STEPS] or NULL */
    int before;
} kept_run;

static void kept_setup(qw_tmodel *m, void *ctx) {
    qw_tmodel_set_weight_cache(m, ((kept_run *)ctx)->cache);
}

static void kept_before_step(int step, void *ctx) {
    (void)step;
    ((kept_run *)ctx)->before = seen.quant_operand;
}

static void kept_after_step(int step, void *ctx) {
    kept_run *k = ctx;
    if (k->made) k->made[step - 1] = seen.quant_operand - k->before;
}

/* One training run of STEPS steps of ACCUM micro-batches under recipe name on a CPU backend
 * with table ops (NULL: the plain CPU), the cache on or off: each step's loss into loss, the
 * kept operands made during each step into made[STEPS] (may be NULL), the final parameters into
 * p, the cache's bytes into *bytes. */

static void run(const char *name, const qw_ops *ops, int cache, const uint32_t *stream,
                double *loss, int *made, float *p, size_t *bytes) {
    kept_run k = {cache, made, 0};
    fixture_run r = {.recipe = name,
                     .cfg = small_config(),
                     .B = B,
                     .T = T,
                     .steps = STEPS,
                     .accum = ACCUM,
                     .threads = 1,
                     .ranks = 1,
                     .seed = SEED,
                     .stream = stream,
                     .ntok = NTOK,
                     .ops = ops,
                     .setup = kept_setup,
                     .before_step = kept_before_step,
                     .after_step = kept_after_step,
                     .ctx = &k};
    fixture_outcome o;
    fixture_train(&r, p, &o);
    memcpy(loss, o.loss, STEPS * sizeof *loss);
    *bytes = o.cache_bytes;
}

/* Blocks whose linears recipe name quantizes. */
static int quantized_blocks(const char *name) {
    qw_recipe r;
    assert_int_equal(qw_recipe_by_name(name, &r, NULL), QS_OK);
    return small_config().n_layers - r.bf16_first - r.bf16_last;
}

/* The block linears' [in, out]: q, k, v, o, gate, up, down. */
static void linear_shapes(int ins[7], int outs[7]) {
    qw_config c = small_config();
    int D = c.dim, F = c.hidden_dim, HE = c.n_heads * c.head_dim, GE = c.n_kv_heads * c.head_dim;
    int i[7] = {D, D, D, HE, D, D, F}, o[7] = {HE, GE, GE, D, F, F, D};
    memcpy(ins, i, sizeof i);
    memcpy(outs, o, sizeof o);
}

/* Trains name on table ops with the cache and on the plain CPU without: asserts the same bits,
 * `per_step` kept operands made in every step, none with SR, and no weight quantized by a GEMM
 * unless declined; returns the cache's bytes. */
static size_t check(const char *name, const qw_ops *ops, int per_step, int declined) {
    uint32_t *stream = fixture_tokens(NTOK, 64);
    assert_non_null(stream);
    qw_config c = small_config();
    size_t n = 0, model_bytes = 0, bytes = 0, ref_bytes = 0;
    qw_tmodel_plan(&c, B, T, 1, &n, &model_bytes);
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
    assert_non_null(pa);
    assert_non_null(pb);
    double la[STEPS], lb[STEPS];
    int made[STEPS];
    memset(&seen, 0, sizeof seen);
    seen.decline_kept = declined;
    run(name, ops, 1, stream, la, made, pa, &bytes);
    size_t bad = 0;
    int quant_operand = seen.quant_operand, sr = seen.quant_operand_sr,
        act = seen.quant_operand_act, weight_quantized = seen.weight_quantized,
        kept_gemms = seen.kept_gemms, live = 0;
    for (int i = 0; i < 64; i++)
        live += seen.allocs[i] != NULL;
    int cache_allocated = 0;
    for (int i = 0; i < seen.n_sizes; i++)
        cache_allocated += bytes && seen.sizes[i] == bytes;
    run(name, NULL, 0, stream, lb, NULL, pb, &ref_bytes);
    for (size_t i = 0; i < n; i++)
        bad += memcmp(&pa[i], &pb[i], sizeof *pa) != 0;
    int loss_same = !memcmp(la, lb, sizeof la);
    printf("%s %-12s %s%s: kept operands made per step %d %d %d (expected %d), SR %d, "
           "activations %d, weights quantized by a GEMM %d, kept GEMMs %d, cache %zu bytes, "
           "%d allocations left, %d of the cache's size; %zu of %zu weights differ, losses %s\n",
           bad || !loss_same ? "NOT OK" : "OK", name, ops == &packed ? "packed" : "fp32",
           declined ? " (kept GEMM declined)" : "", made[0], made[1], made[2], per_step, sr, act,
           weight_quantized, kept_gemms, bytes, live, cache_allocated, bad, n,
           loss_same ? "equal" : "DIFFER");
    assert_int_equal(bad, 0);
    assert_true(loss_same);
    for (int s = 0; s < STEPS; s++)
        assert_int_equal(made[s], per_step);
    assert_int_equal(quant_operand, STEPS * per_step);
    assert_int_equal(sr, 0);
    assert_int_equal(act, 0);
    assert_int_equal(live, 0);
    assert_int_equal(cache_allocated, bytes ? 1 : 0);
    if (ops == &packed && !declined) /* each kept operand read once by every micro-batch */
        assert_int_equal(kept_gemms, STEPS * ACCUM * per_step);
    if (declined) {
        assert_int_equal(kept_gemms, 0);
        assert_true(weight_quantized > 0);
    } else {
        assert_int_equal(weight_quantized, 0);
    }
    free(pa);
    free(pb);
    free(stream);
    return bytes;
}

/* CPU form: nvfp4's 2D weights keep fprop's copy only (dgrad reads it transposed), 7 per
 * quantized block; nvfp4-no-2d's 1D blocks keep dgrad's too. */
static void cpu_form_made_once_per_step_and_reused(void **s) {
    (void)s;
    int ins[7], outs[7];
    linear_shapes(ins, outs);
    size_t w = 0;
    for (int k = 0; k < 7; k++)
        w += (size_t)ins[k] * outs[k];
    int nb = quantized_blocks("nvfp4"), nd = quantized_blocks("nvfp4-no-2d"),
        na = quantized_blocks("nvfp4-all-blocks");
    assert_int_equal(check("nvfp4", &counted, 7 * nb, 0), nb * w * 4);
    assert_int_equal(check("nvfp4-no-2d", &counted, 14 * nd, 0), 2 * nd * w * 4);
    assert_int_equal(check("nvfp4-all-blocks", &counted, 7 * na, 0), na * w * 4);
}

/* Packed form: dgrad's W^T has its own copy under every recipe (a packed operand lies along
 * its k), each the backend's bytes (header and values), so 2 x 7 per quantized block. */
static void packed_form_made_once_per_step_and_reused(void **s) {
    (void)s;
    int ins[7], outs[7];
    linear_shapes(ins, outs);
    size_t per_block = 0;
    for (int k = 0; k < 7; k++)
        per_block += 2 * (HEADER + (size_t)ins[k] * outs[k] * 4);
    static const char *const names[] = {"nvfp4", "mxfp4", "nvfp4-all-blocks"};
    for (int i = 0; i < 3; i++) {
        int nb = quantized_blocks(names[i]);
        assert_int_equal(check(names[i], &packed, 14 * nb, 0), nb * per_block);
    }
}

/* Where the kept GEMM declines, the GEMM quantizes B from the source weight: the same bits. */
static void packed_form_declined_falls_back(void **s) {
    (void)s;
    check("nvfp4", &packed, 14 * quantized_blocks("nvfp4"), 1);
}

/* Recipes that quantize no weight, or only with SR or the RHT, keep nothing. */
static void nothing_kept_without_deterministic_weights(void **s) {
    (void)s;
    assert_int_equal(check("bf16", &counted, 0, 0), 0);
    assert_int_equal(check("bf16", &packed, 0, 0), 0);
}

int main(void) {
    tables();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cpu_form_made_once_per_step_and_reused),
        cmocka_unit_test(packed_form_made_once_per_step_and_reused),
        cmocka_unit_test(packed_form_declined_falls_back),
        cmocka_unit_test(nothing_kept_without_deterministic_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
