/* GPTQ with a format's group scales (gptq.h). */
#include "gptq.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "element.h"
#include "group_scale.h"
#include "scale_search.h"

void qk_gptq_hessian_add(double *h, size_t k, const float *x, size_t t, int threads) {
    /* rows of h in blocks of 32, each block reading x once; every element sums the tokens in
     * order, so the bits do not depend on the threads */
    const size_t nb = (k + 31) / 32;
    const int nt = threads > 0 ? threads : omp_get_max_threads();
#pragma omp parallel for schedule(static, 1) num_threads(nt) if (t * k * k >= ((size_t)1 << 22))
    for (size_t b = 0; b < nb; b++) {
        const size_t i0 = b * 32, i1 = i0 + 32 < k ? i0 + 32 : k;
        for (size_t s = 0; s < t; s++) {
            const float *v = x + s * k;
            for (size_t i = i0; i < i1; i++) {
                double a = 2.0 * v[i];
                if (a == 0.0) continue;
                double *hi = h + i * k;
                for (size_t j = 0; j <= i; j++)
                    hi[j] += a * v[j];
            }
        }
    }
    for (size_t i = 0; i < k; i++)
        for (size_t j = 0; j < i; j++)
            h[j * k + i] = h[i * k + j];
}

/* Lower Cholesky factor of a [n x n] in place (upper triangle left as is); -1 - i when the
 * pivot of row i is not positive, else 0. */
static long cholesky(double *a, size_t n) {
    for (size_t j = 0; j < n; j++) {
        double d = a[j * n + j];
        for (size_t m = 0; m < j; m++)
            d -= a[j * n + m] * a[j * n + m];
        if (!(d > 0.0)) return -1 - (long)j;
        d = sqrt(d);
        a[j * n + j] = d;
        for (size_t i = j + 1; i < n; i++) {
            double s = a[i * n + j];
            for (size_t m = 0; m < j; m++)
                s -= a[i * n + m] * a[j * n + m];
            a[i * n + j] = s / d;
        }
    }
    return 0;
}

/* U [n x n] (upper) with U^T U = h^-1: chol(J h J) = L, U = J L^-1 J (gptq.h). h is consumed. */
static qs_status inverse_upper_factor(double *h, size_t n, float *u, qs_error *err) {
    double *r = malloc(n * n * sizeof *r), *x = malloc(n * n * sizeof *x);
    if (!r || !x) {
        free(r);
        free(x);
        return qs_error_set(err, QS_ENOMEM, "methods: gptq: %zu x %zu Hessian", n, n);
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            r[i * n + j] = h[(n - 1 - i) * n + (n - 1 - j)];
    long bad = cholesky(r, n);
    if (bad) {
        free(r);
        free(x);
        return qs_error_set(err, QS_EINVAL,
                            "methods: gptq: the Hessian is not positive definite after dampening "
                            "(column %ld)",
                            (long)n + bad);
    }
    /* x = L^-1, lower triangular, a row at a time (rows are contiguous):
     * x_i = (e_i - sum_{m<i} L_im x_m) / L_ii */
    memset(x, 0, n * n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        double *xi = x + i * n;
        for (size_t m = 0; m < i; m++) {
            const double a = r[i * n + m], *xm = x + m * n;
            for (size_t j = 0; j <= m; j++)
                xi[j] -= a * xm[j];
        }
        xi[i] = 1.0;
        const double d = r[i * n + i];
        for (size_t j = 0; j <= i; j++)
            xi[j] /= d;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            u[i * n + j] = (float)x[(n - 1 - i) * n + (n - 1 - j)];
    free(r);
    free(x);
    return QS_OK;
}

/* perm[0..n) ordered by decreasing d, equal values keeping their order (stable insertion:
 * thread-safe, and k is at most a few thousand). */
static void sort_by_diag_desc(size_t *perm, size_t n, const double *d) {
    for (size_t i = 1; i < n; i++) {
        size_t v = perm[i], j = i;
        while (j > 0 && d[perm[j - 1]] < d[v]) {
            perm[j] = perm[j - 1];
            j--;
        }
        perm[j] = v;
    }
}

/* The packed form's byte of a frozen scale: NVFP4's E4M3 block scale, MX's E8M0 exponent (bias
 * 127). dec was decoded from that byte (group_scale.c), so encoding it again is exact. */
static uint8_t scale_byte(const qk_format *fmt, const qk_group_scale *s) {
    if (fmt->rule == QK_RULE_NVFP4)
        return (uint8_t)qk_codec_encode(&qk_codec_e4m3, s->dec, QK_ROUND_RNE, 0);
    return isnan(s->dec) ? 0xFF : (uint8_t)(127 + ilogbf(s->dec));
}

/* Code c of row r, column j into p's zeroed codes: 4-bit codes two a byte, the even column in
 * the low nibble (quant.h). */
static void put_code(qk_packed *p, size_t r, size_t j, uint32_t c) {
    uint8_t *row = p->codes + r * p->row_bytes;
    if (p->fmt->elem->bits == 4)
        row[j / 2] |= (uint8_t)((c & 0xFu) << (j & 1) * 4);
    else
        row[j] = (uint8_t)c;
}

/* A group's scales: the amax rule, or MR-GPTQ's search when g asks for it (scale_search.h). */
static qs_status group_scales(const qk_format *fmt, const qk_quant_options *opt,
                              const qk_gptq_options *g, const float *x, size_t rows, size_t cols,
                              size_t ld, float amax, qk_group_scale *out, float *s_dec,
                              qs_error *err) {
    if (g && g->scale_search)
        return qk_scale_search(fmt, opt, x, rows, cols, ld, amax, out, s_dec, err);
    return qk_group_scales(fmt, opt, x, rows, cols, ld, amax, out, s_dec, err);
}

qs_status qk_gptq(const qk_format *fmt, const qk_quant_options *opt, float *w, size_t rows,
                  size_t k, const double *h, const qk_gptq_options *g, qs_error *err) {
    if (!w || !h || !rows || !k)
        return qs_error_set(err, QS_EINVAL, "methods: gptq: empty weight or Hessian");
    const double damp = g && g->damp > 0.0 ? g->damp : 0.01;
    const size_t gc = qk_group_cols(fmt, opt, k); /* columns per group */
    size_t blk = g && g->block ? g->block : 128;
    if (gc < k) blk = (blk + gc - 1) / gc * gc; /* a group never straddles a lazy batch */
    const int act_order = g && g->act_order;
    const int nt = g && g->threads > 0 ? g->threads : omp_get_max_threads();
    const size_t ngroups = (k + gc - 1) / gc;
    qk_packed *pk = g ? g->packed : NULL; /* the codes and scales, when asked for */
    if (pk) memset(pk, 0, sizeof *pk);
    double *hd = malloc(k * k * sizeof *hd);
    float *u = malloc(k * k * sizeof *u), *wp = malloc(rows * k * sizeof *wp);
    float *e = malloc(rows * blk * sizeof *e);
    size_t *perm = malloc(k * sizeof *perm);
    qk_group_scale *sc = malloc(rows * ngroups * sizeof *sc);
    double *diag = malloc(k * sizeof *diag);
    qs_status st = QS_OK;
    if (!hd || !u || !wp || !e || !perm || !sc || !diag) {
        st = qs_error_set(err, QS_ENOMEM, "methods: gptq: %zu x %zu weight", rows, k);
        goto done;
    }
    if (pk) {
        if (fmt->rule != QK_RULE_NVFP4 && fmt->rule != QK_RULE_MX) {
            st = qs_error_set(err, QS_EUNSUPPORTED,
                              "methods: gptq: %s: packed output for NVFP4 and MX formats only",
                              qk_format_name(fmt));
            goto done;
        }
        if ((st = qk_packed_init(pk, fmt, opt, rows, k, err))) goto done;
        if (pk->blocks_per_row != ngroups) {
            st = qs_error_set(err, QS_EUNSUPPORTED,
                              "methods: gptq: %s: %zu groups a row, the packed form has %zu",
                              qk_format_name(fmt), ngroups, pk->blocks_per_row);
            goto done;
        }
    }
    float amax = 0.0f; /* the per-tensor scale's amax: the unquantized weight's */
    for (size_t i = 0; i < rows * k; i++)
        if (isfinite(w[i])) amax = fmaxf(amax, fabsf(w[i]));
    memcpy(hd, h, k * k * sizeof *hd);
    for (size_t j = 0; j < k; j++) {
        if (hd[j * k + j] == 0.0) { /* a dead input: nothing reaches column j */
            hd[j * k + j] = 1.0;
            for (size_t r = 0; r < rows; r++)
                w[r * k + j] = 0.0f;
        }
        diag[j] = hd[j * k + j];
        perm[j] = j;
    }
    float s_dec = 1.0f, s_dec_out = 1.0f; /* s_dec_out: the tensor scale the rows used */
    if (act_order) { /* static groups: every scale from the unquantized weight, up front */
        for (size_t gi = 0; gi < ngroups && !st; gi++) {
            size_t c0 = gi * gc, n = k - c0 < gc ? k - c0 : gc;
            qk_group_scale *col = malloc(rows * sizeof *col);
            if (!col) {
                st = qs_error_set(err, QS_ENOMEM, "methods: gptq: scales");
                break;
            }
            st = group_scales(fmt, opt, g, w + c0, rows, n, k, amax, col, &s_dec, err);
            for (size_t r = 0; r < rows; r++)
                sc[r * ngroups + gi] = col[r];
            free(col);
        }
        if (st) goto done;
        sort_by_diag_desc(perm, k, diag);
    }
    /* the permuted problem: wp = w[:, perm], hp = h[perm][:, perm] */
    double mean = 0.0;
    for (size_t j = 0; j < k; j++)
        mean += diag[j];
    mean = damp * mean / (double)k;
    {
        double *hp = malloc(k * k * sizeof *hp);
        if (!hp) {
            st = qs_error_set(err, QS_ENOMEM, "methods: gptq: Hessian");
            goto done;
        }
        for (size_t i = 0; i < k; i++)
            for (size_t j = 0; j < k; j++)
                hp[i * k + j] = hd[perm[i] * k + perm[j]] + (i == j ? mean : 0.0);
        st = inverse_upper_factor(hp, k, u, err);
        free(hp);
        if (st) goto done;
    }
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < k; j++)
            wp[r * k + j] = w[r * k + perm[j]];
    /* Rows are independent given U, except that a 2D format's scale spans 16 rows: slabs of 16
     * rows run in parallel, each through every column (the same bits for any thread count). */
    const size_t slabs = (rows + 15) / 16;
    const int par = rows * k * k >= ((size_t)1 << 24); /* a small layer: threads cost more */
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (size_t sl = 0; sl < slabs; sl++) {
        const size_t r0 = sl * 16, nr = rows - r0 < 16 ? rows - r0 : 16;
        qk_group_scale col[16];
        float sd = s_dec;
        float *es = e + r0 * blk;
        qs_status ls = QS_OK;
        qs_error le = {0};
        for (size_t i1 = 0; i1 < k && !ls; i1 += blk) {
            size_t i2 = i1 + blk < k ? i1 + blk : k;
            for (size_t i = i1; i < i2 && !ls; i++) {
                size_t gi = perm[i] / gc;
                if (!act_order && i % gc == 0) { /* the group starts: scales from wp as it is */
                    size_t n = k - i < gc ? k - i : gc;
                    ls = group_scales(fmt, opt, g, wp + r0 * k + i, nr, n, k, amax, col, &sd, &le);
                    if (ls) break;
                    for (size_t r = 0; r < nr; r++)
                        sc[(r0 + r) * ngroups + gi] = col[r];
                }
                const float d = u[i * k + i];
                const float *ui = u + i * k;
                for (size_t r = r0; r < r0 + nr; r++) {
                    float *row = wp + r * k;
                    float x = row[i];
                    const qk_group_scale *gs = &sc[r * ngroups + gi];
                    float q = qk_group_scale_apply(fmt, opt, gs, sd, x);
                    if (pk) /* the code that value came from (group_scale_apply's operands) */
                        put_code(pk, r, perm[i],
                                 qk_codec_encode(fmt->elem, x * gs->enc, opt->rounding, 0));
                    float er = (x - q) / d;
                    row[i] = q;
                    for (size_t j = i + 1; j < i2; j++)
                        row[j] -= er * ui[j];
                    es[(r - r0) * blk + (i - i1)] = er;
                }
            }
            for (size_t r = r0; r < r0 + nr && !ls; r++) { /* the lazy update of later columns */
                float *row = wp + r * k;
                const float *er = es + (r - r0) * blk;
                for (size_t i = i1; i < i2; i++) {
                    const float *ui = u + i * k;
                    float a = er[i - i1];
                    for (size_t j = i2; j < k; j++)
                        row[j] -= a * ui[j];
                }
            }
        }
        if (sl == 0) s_dec_out = sd; /* every slab's: one amax */
        if (ls) {
#pragma omp critical(qk_gptq_err)
            if (!st) {
                st = ls;
                if (err) *err = le;
            }
        }
    }
    if (!st)
        for (size_t r = 0; r < rows; r++)
            for (size_t j = 0; j < k; j++)
                w[r * k + perm[j]] = wp[r * k + j];
    if (!st && pk) {
        for (size_t r = 0; r < rows; r++)
            for (size_t gi = 0; gi < ngroups; gi++)
                pk->scales[r * ngroups + gi] = scale_byte(fmt, &sc[r * ngroups + gi]);
        if (fmt->tensor_scale) {
            pk->tensor_scale = s_dec_out;
            pk->tensor_amax = amax;
        }
    }
done:
    if (st && pk) qk_packed_release(pk);
    free(hd);
    free(u);
    free(wp);
    free(e);
    free(perm);
    free(sc);
    free(diag);
    return st;
}

double qk_gptq_layer_error(const float *x, size_t t, const float *w, const float *q, size_t rows,
                           size_t k) {
    double sum = 0.0;
    for (size_t s = 0; s < t; s++)
        for (size_t r = 0; r < rows; r++) {
            double a = 0.0;
            for (size_t j = 0; j < k; j++)
                a += (double)x[s * k + j] * ((double)w[r * k + j] - (double)q[r * k + j]);
            sum += a * a;
        }
    return sum;
}
