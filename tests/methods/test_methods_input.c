/* A method's online input transform (ops.h method_input) and the hook that calls it
 * (method_linear.h). The CPU entry is qk_smooth_apply (divide) then qk_block_hadamard, bit for
 * bit; every other backend is checked against it (tests/gpu/test_method_cuda.c). The hook's
 * device path runs here on a backend that reports an impl, as a GPU's does, over the CPU table
 * with its memory calls counted: the transform reads backend memory (s uploaded once, the
 * output buffer made once and grown), calibration fetches x and keeps the CPU's statistics, and
 * the result is the CPU backend's, bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "block_hadamard.h"
#include "method_linear.h"
#include "ops.h"
#include "smooth.h"

enum { K = 256 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* uniform in [lo, hi) from a xorshift64 stream */
static float uniform(float lo, float hi) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 40) * (1.0 / 16777216.0));
}

static float *filled(size_t n, float lo, float hi) {
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = uniform(lo, hi);
    return v;
}

/* qk_smooth_apply (divide) then qk_block_hadamard on a copy of x [T x K], one thread. */
static float *reference(const float *x, int T, const float *s, int tile) {
    const size_t n = (size_t)T * K;
    float *r = malloc(n * sizeof *r);
    assert_non_null(r);
    memcpy(r, x, n * sizeof *r);
    if (s) qk_smooth_apply(r, (size_t)T, K, s, 1);
    qs_error err = {0};
    if (tile && qk_block_hadamard(r, (size_t)T, K, (size_t)tile, 1, &err)) fail_msg("%s", err.msg);
    return r;
}

/* Tiles 16, 32, 128 and all of K, with and without s, the division alone, an odd T: the same
 * bits as the kernels, into another buffer and in place. */
static void cpu_entry_is_smooth_then_hadamard(void **state) {
    (void)state;
    qw_backend be;
    qs_error err = {0};
    assert_int_equal(qw_backend_cpu_init(&be, 2, K, &err), QS_OK);
    const int T = 7, tiles[] = {16, 32, 128, K, 0};
    float *x = filled((size_t)T * K, -4.0f, 4.0f), *s = filled(K, 0.05f, 3.0f);
    float *y = malloc((size_t)T * K * sizeof *y);
    assert_non_null(y);
    for (int ti = 0; ti < 5; ti++)
        for (int with_s = 0; with_s < 2; with_s++) {
            if (!tiles[ti] && !with_s) continue;
            const float *sc = with_s ? s : NULL;
            float *ref = reference(x, T, sc, tiles[ti]);
            assert_int_equal(be.ops->method_input(&be, y, x, T, K, sc, tiles[ti], &err), QS_OK);
            assert_memory_equal(y, ref, (size_t)T * K * sizeof *y);
            memcpy(y, x, (size_t)T * K * sizeof *y);
            assert_int_equal(be.ops->method_input(&be, y, y, T, K, sc, tiles[ti], &err), QS_OK);
            assert_memory_equal(y, ref, (size_t)T * K * sizeof *y);
            free(ref);
        }
    /* a rotation really ran: tile 16 of a row of ones is (4, 0, ..., 0) per tile (16 / sqrt 16) */
    for (int j = 0; j < K; j++)
        x[j] = 1.0f;
    assert_int_equal(be.ops->method_input(&be, y, x, 1, K, NULL, 16, &err), QS_OK);
    for (int j = 0; j < K; j++)
        assert_true(y[j] == (j % 16 ? 0.0f : 4.0f));
    free(x);
    free(s);
    free(y);
    qw_backend_release(&be);
}

/* A tile that is not a power of two, K not a multiple of the tile, no rows: QS_EINVAL. */
static void cpu_entry_refuses_bad_shapes(void **state) {
    (void)state;
    qw_backend be;
    qs_error err = {0};
    assert_int_equal(qw_backend_cpu_init(&be, 1, K, &err), QS_OK);
    float x[2 * 48] = {0}, y[2 * 48];
    assert_int_equal(be.ops->method_input(&be, y, x, 2, 48, NULL, 24, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "not a power of two"));
    assert_int_equal(be.ops->method_input(&be, y, x, 2, 48, NULL, 32, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "k=48 is not a multiple of the 32-point tile"));
    assert_int_equal(be.ops->method_input(&be, y, x, 0, 48, NULL, 16, &err), QS_EINVAL);
    qw_backend_release(&be);
}

/* ---- a device-shaped backend: the CPU table with an impl and its memory calls counted */

static int pretend_device;
static int n_alloc, n_free, n_upload, n_fetch, n_input;
static qw_ops dev_ops;
static const float *last_s; /* the s the last method_input read */

static void *dev_alloc(qw_backend *b, size_t bytes) {
    n_alloc++;
    return qw_ops_cpu()->alloc(b, bytes);
}
static void dev_free(qw_backend *b, void *p) {
    n_free += p != NULL;
    qw_ops_cpu()->free(b, p);
}
static qs_status dev_upload(qw_backend *b, void *dst, const void *src, size_t bytes,
                            qs_error *err) {
    n_upload++;
    return qw_ops_cpu()->upload(b, dst, src, bytes, err);
}
static qs_status dev_fetch(qw_backend *b, void *dst, const void *src, size_t bytes, qs_error *err) {
    n_fetch++;
    return qw_ops_cpu()->fetch(b, dst, src, bytes, err);
}
/* refuses tiles above 64, as CUDA refuses tiles larger than its shared memory holds */
static qs_status dev_method_input(qw_backend *b, float *y, const float *x, int T, int k,
                                  const float *s, int tile, qs_error *err) {
    n_input++;
    last_s = s;
    if (tile > 64)
        return qs_error_set(err, QS_EUNSUPPORTED, "method input: a %d-point tile is over 64", tile);
    return qw_ops_cpu()->method_input(b, y, x, T, k, s, tile, err);
}

/* dev: be's copy that reports an impl and counts its memory calls */
static qw_backend device_shaped(const qw_backend *be) {
    dev_ops = *qw_ops_cpu();
    dev_ops.alloc = dev_alloc;
    dev_ops.free = dev_free;
    dev_ops.upload = dev_upload;
    dev_ops.fetch = dev_fetch;
    dev_ops.method_input = dev_method_input;
    qw_backend dev = *be;
    dev.ops = &dev_ops;
    dev.impl = &pretend_device;
    n_alloc = n_free = n_upload = n_fetch = n_input = 0;
    return dev;
}

/* Layer 1's down_proj held by a method with tile and s (NULL: none), K inputs. */
static qw_method_linear held(qw_linear *L, int tile, float *s) {
    memset(L, 0, sizeof *L);
    L->in = L->out = K;
    L->tensor_index = 1 * QW_LINEAR_KINDS + QW_LINEAR_DOWN;
    qw_method_linear ml = {.L = L, .in = K, .out = K, .tile = tile, .s = s, .threads = 1};
    ml.method = "test";
    return ml;
}

/* SmoothQuant with a 16-point rotation over three calls of T 5, 9, 3: the device path's
 * output equals the CPU backend's bit for bit; s is uploaded once and read from its copy, the
 * output buffer made for 5 rows and grown once for 9; freeing the linear frees both. */
static void device_path_transform_matches_the_cpu(void **state) {
    (void)state;
    qw_backend cpu;
    qs_error err = {0};
    assert_int_equal(qw_backend_cpu_init(&cpu, 1, K, &err), QS_OK);
    qw_backend dev = device_shaped(&cpu);
    float *s = filled(K, 0.05f, 3.0f);
    qw_linear Lc, Ld;
    qw_method_linear mc = held(&Lc, 16, malloc(K * sizeof *s)), md = held(&Ld, 16, s);
    memcpy(mc.s, s, K * sizeof *s);
    const int Ts[] = {5, 9, 3};
    for (int i = 0; i < 3; i++) {
        float *x = filled((size_t)Ts[i] * K, -8.0f, 8.0f);
        const float *yc, *yd;
        assert_int_equal(qw_method_linear_hook(&mc, &cpu, x, Ts[i], &yc, &err), QS_OK);
        assert_int_equal(qw_method_linear_hook(&md, &dev, x, Ts[i], &yd, &err), QS_OK);
        assert_ptr_equal(yd, md.dev_y);
        assert_ptr_not_equal(yc, x);
        assert_memory_equal(yd, yc, (size_t)Ts[i] * K * sizeof *yd);
        free(x);
    }
    assert_int_equal(n_input, 3);
    assert_int_equal(n_upload, 1);
    assert_ptr_equal(last_s, md.dev_s);
    assert_ptr_not_equal(last_s, s);
    assert_int_equal(n_alloc, 3); /* s, 5 rows, 9 rows */
    assert_int_equal(n_free, 1);  /* the 5-row buffer */
    assert_int_equal(n_fetch, 0); /* the transform never waits for the host */
    qw_method_linear_free(&md);
    assert_int_equal(n_free, 3);
    qw_method_linear_free(&mc);
    qw_backend_release(&cpu);
}

/* GPTQ with a 16-point rotation and SmoothQuant's maxima observed over two chunks: the device
 * path fetches x once per call and collects the CPU backend's Hessian and maxima bit for bit,
 * passing x on as it is. */
static void device_path_calibration_matches_the_cpu(void **state) {
    (void)state;
    qw_backend cpu;
    qs_error err = {0};
    assert_int_equal(qw_backend_cpu_init(&cpu, 1, K, &err), QS_OK);
    qw_backend dev = device_shaped(&cpu);
    qw_linear Lc, Ld;
    qw_method_linear m[2] = {held(&Lc, 16, NULL), held(&Ld, 16, NULL)};
    for (int i = 0; i < 2; i++) {
        m[i].observing = 1;
        m[i].h = calloc((size_t)K * K, sizeof *m[i].h);
        m[i].amax = calloc(K, sizeof *m[i].amax);
        assert_true(m[i].h && m[i].amax);
    }
    for (int c = 0; c < 2; c++) {
        const int T = c ? 11 : 6;
        float *x = filled((size_t)T * K, -8.0f, 8.0f);
        const float *yc, *yd;
        assert_int_equal(qw_method_linear_hook(&m[0], &cpu, x, T, &yc, &err), QS_OK);
        assert_int_equal(qw_method_linear_hook(&m[1], &dev, x, T, &yd, &err), QS_OK);
        assert_ptr_equal(yc, x);
        assert_ptr_equal(yd, x);
        free(x);
    }
    assert_int_equal(n_fetch, 2);
    assert_int_equal(n_input, 0);
    assert_memory_equal(m[1].amax, m[0].amax, K * sizeof *m[0].amax);
    assert_memory_equal(m[1].h, m[0].h, (size_t)K * K * sizeof *m[0].h);
    float mx = 0.0f;
    for (int j = 0; j < K; j++)
        mx = m[0].amax[j] > mx ? m[0].amax[j] : mx;
    assert_true(mx > 7.0f && mx < 8.0f);
    qw_method_linear_free(&m[0]);
    qw_method_linear_free(&m[1]);
    assert_int_equal(n_alloc, n_free);
    qw_backend_release(&cpu);
}

/* A tile the backend does not hold is refused naming the method and the linear; a backend
 * without the entry is refused naming itself. */
static void device_path_refusal_names_the_linear(void **state) {
    (void)state;
    qw_backend cpu;
    qs_error err = {0};
    assert_int_equal(qw_backend_cpu_init(&cpu, 1, K, &err), QS_OK);
    qw_backend dev = device_shaped(&cpu);
    qw_linear L;
    qw_method_linear ml = held(&L, 128, NULL);
    float *x = filled((size_t)2 * K, -1.0f, 1.0f);
    const float *y;
    assert_int_equal(qw_method_linear_hook(&ml, &dev, x, 2, &y, &err), QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "method test: model.layers.1.mlp.down_proj"));
    assert_non_null(strstr(err.msg, "a 128-point tile is over 64"));
    dev_ops.method_input = NULL;
    assert_int_equal(qw_method_linear_hook(&ml, &dev, x, 2, &y, &err), QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "the cpu backend has no input transform"));
    free(x);
    qw_method_linear_free(&ml);
    assert_int_equal(n_alloc, n_free);
    qw_backend_release(&cpu);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cpu_entry_is_smooth_then_hadamard),
        cmocka_unit_test(cpu_entry_refuses_bad_shapes),
        cmocka_unit_test(device_path_transform_matches_the_cpu),
        cmocka_unit_test(device_path_calibration_matches_the_cpu),
        cmocka_unit_test(device_path_refusal_names_the_linear),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
