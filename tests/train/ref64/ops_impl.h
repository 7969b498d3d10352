/* Body of the FP64 reference ops (ops64.h), included by ops_f64.c with R (the element type),
 * QW_OPS_NAME(x) (the public name of op x), EXP, SQRT and GEMM (cblas_sgemm or cblas_dgemm)
 * defined. Shapes: N = B*T rows (sequence b's token t is row b*T + t), D = dim, F = hidden_dim, H =
 * heads, G = kv heads, E = head_dim, V = vocab.
 *
 * Determinism: every parallel loop gives each output element to one thread and sums in a
 * fixed order, and GEMMs are cut into pieces fixed by the shape (never by the thread count),
 * each a single-threaded BLAS call, so results are bit-identical for any thread count. */

/* ---------------------------------------------------------------- GEMM */

void QW_OPS_NAME(gemm_abt)(R *C, const R *A, const R *Bm, int M, int Ncol, int K, R beta, int nt) {
    int pieces = (Ncol + QW_TRAIN64_GEMM_COLS - 1) / QW_TRAIN64_GEMM_COLS;
    if (nt > pieces) nt = pieces;
    if (nt < 1) nt = 1;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int p = 0; p < pieces; p++) {
        int c0 = p * QW_TRAIN64_GEMM_COLS;
        int c1 = c0 + QW_TRAIN64_GEMM_COLS < Ncol ? c0 + QW_TRAIN64_GEMM_COLS : Ncol;
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, M, c1 - c0, K, (R)1, A, K,
             Bm + (size_t)c0 * K, K, beta, C + c0, Ncol);
    }
}

void QW_OPS_NAME(transpose)(R *dst, const R *src, int rows, int cols, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows; r++)
            dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

/* ---------------------------------------------------------------- embedding */

void QW_OPS_NAME(embedding_forward)(R *out, const uint32_t *tokens, const R *emb, int N, int D) {
    for (int i = 0; i < N; i++)
        memcpy(out + (size_t)i * D, emb + (size_t)tokens[i] * D, (size_t)D * sizeof(R));
}

void QW_OPS_NAME(embedding_backward)(R *demb, const R *dout, const uint32_t *tokens, int N, int D) {
    /* Serial over tokens: two positions with the same token add into one row, in token
     * order, so the sum does not depend on a thread schedule. */
    for (int i = 0; i < N; i++) {
        R *row = demb + (size_t)tokens[i] * D;
        const R *g = dout + (size_t)i * D;
        for (int j = 0; j < D; j++)
            row[j] += g[j];
    }
}

/* ---------------------------------------------------------------- RMSNorm */

void QW_OPS_NAME(rmsnorm_forward)(R *out, R *rstd, const R *x, const R *w, int N, int D, R eps,
                                  int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < N; t++) {
        const R *xr = x + (size_t)t * D;
        R *o = out + (size_t)t * D;
        double ss = 0.0;
        for (int i = 0; i < D; i++)
            ss += (double)xr[i] * xr[i];
        R r = (R)(1.0 / sqrt(ss / D + (double)eps));
        rstd[t] = r;
        for (int i = 0; i < D; i++)
            o[i] = w[i] * (xr[i] * r);
    }
}

void QW_OPS_NAME(rmsnorm_backward)(R *dx, R *dw, const R *dout, const R *x, const R *w,
                                   const R *rstd, int N, int D, int nt) {
    /* y_i = w_i x_i r, r = (mean(x^2) + eps)^-1/2; dr/dx_j = -r^3 x_j / D, so
     * dx_j = r w_j dy_j - x_j r^3 / D * sum_i(w_i dy_i x_i). */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < N; t++) {
        const R *xr = x + (size_t)t * D, *g = dout + (size_t)t * D;
        R *d = dx + (size_t)t * D;
        R r = rstd[t];
        double dot = 0.0;
        for (int i = 0; i < D; i++)
            dot += (double)w[i] * g[i] * xr[i];
        R c = (R)(dot * (double)r * r * r / D);
        for (int i = 0; i < D; i++)
            d[i] += r * w[i] * g[i] - xr[i] * c;
    }
    /* dw_i = sum_t dy_ti x_ti r_t: columns split across threads, rows summed in order. */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < D; i++) {
        R s = 0;
        for (int t = 0; t < N; t++)
            s += dout[(size_t)t * D + i] * (x[(size_t)t * D + i] * rstd[t]);
        dw[i] += s;
    }
}

/* ---------------------------------------------------------------- RoPE */

void QW_OPS_NAME(rope_forward)(R *x, const R *cosb, const R *sinb, int B, int T, int nh, int E,
                               int nt) {
    int h2 = E / 2, N = B * T;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        int t = i % T;
        const R *c = cosb + (size_t)t * h2, *s = sinb + (size_t)t * h2;
        for (int h = 0; h < nh; h++) {
            R *v = x + ((size_t)i * nh + h) * E;
            for (int j = 0; j < h2; j++) {
                R x1 = v[j], x2 = v[j + h2];
                v[j] = x1 * c[j] - x2 * s[j];
                v[j + h2] = x2 * c[j] + x1 * s[j];
            }
        }
    }
}

void QW_OPS_NAME(rope_backward)(R *dx, const R *cosb, const R *sinb, int B, int T, int nh, int E,
                                int nt) {
    /* The rotation's transpose: rotate by -angle. */
    int h2 = E / 2, N = B * T;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        int t = i % T;
        const R *c = cosb + (size_t)t * h2, *s = sinb + (size_t)t * h2;
        for (int h = 0; h < nh; h++) {
            R *v = dx + ((size_t)i * nh + h) * E;
            for (int j = 0; j < h2; j++) {
                R d1 = v[j], d2 = v[j + h2];
                v[j] = d1 * c[j] + d2 * s[j];
                v[j + h2] = d2 * c[j] - d1 * s[j];
            }
        }
    }
}

/* ---------------------------------------------------------------- attention */

void QW_OPS_NAME(attention_forward)(R *out, R *probs, const R *q, const R *k, const R *v, int B,
                                    int T, int H, int G, int E, int nt) {
    int rep = H / G, HE = H * E, GE = G * E;
    R scale = (R)(1.0 / sqrt((double)E));
    /* One (sequence, head) per task, each a pair of single-threaded GEMMs over strided head
     * slices: S = scale * Q_h K_g^T [T x T], causal softmax of each row, O_h = P V_g. The masked
     * upper triangle is computed and then zeroed (simpler than tiles; at most 2x the work). */
#pragma omp parallel for num_threads(nt) schedule(static) collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int g = h / rep;
            R *P = probs + ((size_t)b * H + h) * T * T;
            const R *qh = q + (size_t)b * T * HE + (size_t)h * E;
            const R *kg = k + (size_t)b * T * GE + (size_t)g * E;
            const R *vg = v + (size_t)b * T * GE + (size_t)g * E;
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, E, scale, qh, HE, kg, GE, (R)0, P,
                 T);
            for (int t = 0; t < T; t++) {
                R *row = P + (size_t)t * T;
                R mx = row[0];
                for (int s2 = 1; s2 <= t; s2++)
                    mx = row[s2] > mx ? row[s2] : mx;
                R sum = 0;
                for (int s2 = 0; s2 <= t; s2++) {
                    row[s2] = EXP(row[s2] - mx);
                    sum += row[s2];
                }
                R inv = (R)1 / sum;
                for (int s2 = 0; s2 <= t; s2++)
                    row[s2] *= inv;
                for (int s2 = t + 1; s2 < T; s2++)
                    row[s2] = 0;
            }
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, E, T, (R)1, P, T, vg, GE, (R)0,
                 out + (size_t)b * T * HE + (size_t)h * E, HE);
        }
}

void QW_OPS_NAME(attention_backward)(R *dq, R *dk, R *dv, R *dscratch, const R *dout, const R *q,
                                     const R *k, const R *v, const R *probs, int B, int T, int H,
                                     int G, int E, int nt) {
    int rep = H / G, HE = H * E, GE = G * E;
    R scale = (R)(1.0 / sqrt((double)E));
    /* One (sequence, kv head) per task: the query heads of a group add into the same dk/dv
     * rows, in head order, inside one task. Per head: dP = dO_h V_g^T; dS = P (dP - rowsum(P dP))
     * * scale (zero above the diagonal, where P is); dQ_h = dS K_g; dK_g += dS^T Q_h;
     * dV_g += P^T dO_h. */
#pragma omp parallel for num_threads(nt) schedule(static) collapse(2)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++) {
            R *dS = dscratch + (size_t)omp_get_thread_num() * T * T;
            R *dkg = dk + (size_t)b * T * GE + (size_t)g * E;
            R *dvg = dv + (size_t)b * T * GE + (size_t)g * E;
            const R *kg = k + (size_t)b * T * GE + (size_t)g * E;
            const R *vg = v + (size_t)b * T * GE + (size_t)g * E;
            for (int s2 = 0; s2 < T; s2++) {
                memset(dkg + (size_t)s2 * GE, 0, (size_t)E * sizeof(R));
                memset(dvg + (size_t)s2 * GE, 0, (size_t)E * sizeof(R));
            }
            for (int h = g * rep; h < (g + 1) * rep; h++) {
                const R *P = probs + ((size_t)b * H + h) * T * T;
                const R *doh = dout + (size_t)b * T * HE + (size_t)h * E;
                const R *qh = q + (size_t)b * T * HE + (size_t)h * E;
                R *dqh = dq + (size_t)b * T * HE + (size_t)h * E;
                GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, E, (R)1, doh, HE, vg, GE, (R)0,
                     dS, T);
                for (int t = 0; t < T; t++) {
                    const R *prow = P + (size_t)t * T;
                    R *drow = dS + (size_t)t * T;
                    R acc = 0;
                    for (int s2 = 0; s2 <= t; s2++)
                        acc += drow[s2] * prow[s2];
                    for (int s2 = 0; s2 <= t; s2++)
                        drow[s2] = prow[s2] * (drow[s2] - acc) * scale;
                    for (int s2 = t + 1; s2 < T; s2++)
                        drow[s2] = 0;
                }
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, E, T, (R)1, dS, T, kg, GE, (R)0,
                     dqh, HE);
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, T, E, T, (R)1, dS, T, qh, HE, (R)1,
                     dkg, GE);
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, T, E, T, (R)1, P, T, doh, HE, (R)1,
                     dvg, GE);
            }
        }
}

/* ---------------------------------------------------------------- SwiGLU */

void QW_OPS_NAME(swiglu_forward)(R *h, const R *g, const R *u, size_t n, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++)
        h[i] = g[i] / ((R)1 + EXP(-g[i])) * u[i];
}

void QW_OPS_NAME(swiglu_backward)(R *dg, R *du, const R *dh, const R *g, const R *u, size_t n,
                                  int nt) {
    /* silu(g) = g s, s = 1/(1+e^-g); silu'(g) = s (1 + g (1 - s)). */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) {
        R s = (R)1 / ((R)1 + EXP(-g[i]));
        R si = g[i] * s;
        du[i] = dh[i] * si;
        dg[i] = dh[i] * u[i] * (s * ((R)1 + g[i] * ((R)1 - s)));
    }
}

/* ---------------------------------------------------------------- cross-entropy */

void QW_OPS_NAME(crossentropy_forward)(R *logits, R *losses, const uint32_t *targets, int N, int V,
                                       int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        R *row = logits + (size_t)i * V;
        R mx = row[0];
        for (int j = 1; j < V; j++)
            mx = row[j] > mx ? row[j] : mx;
        /* -log p_target = log(sum_j e^(l_j - mx)) - (l_target - mx), from the logits, not the
         * rounded probability, so a confident model's loss does not flush to -log(0). */
        double lt = (double)row[targets[i]] - (double)mx;
        double sum = 0.0;
        for (int j = 0; j < V; j++) {
            row[j] = EXP(row[j] - mx);
            sum += row[j];
        }
        R inv = (R)(1.0 / sum);
        for (int j = 0; j < V; j++)
            row[j] *= inv;
        /* sum >= 1: the maximum's term is e^0 (V >= 1) */
        // cppcheck-suppress invalidFunctionArg
        losses[i] = (R)(log(sum) - lt);
    }
}

void QW_OPS_NAME(crossentropy_backward)(R *probs, const uint32_t *targets, int N, int V, R scale,
                                        int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        R *row = probs + (size_t)i * V;
        row[targets[i]] -= (R)1;
        for (int j = 0; j < V; j++)
            row[j] *= scale;
    }
}

/* ---------------------------------------------------------------- linear (unquantized) */

void QW_OPS_NAME(linear_forward)(R *y, const R *x, const R *W, int N, int in, int out, int nt) {
    QW_OPS_NAME(gemm_abt)(y, x, W, N, out, in, (R)0, nt);
}

void QW_OPS_NAME(linear_backward)(R *dx, int dx_accumulate, R *dW, const R *dy, const R *x,
                                  const R *W, int N, int in, int out, int nt) {
    /* dx[N x in] (+)= dy[N x out] W[out x in]; pieces over dx's columns. */
    int pieces = (in + QW_TRAIN64_GEMM_COLS - 1) / QW_TRAIN64_GEMM_COLS;
    int ntp = nt > pieces ? pieces : nt;
    if (dx) {
#pragma omp parallel for num_threads(ntp) schedule(dynamic, 1)
        for (int p = 0; p < pieces; p++) {
            int c0 = p * QW_TRAIN64_GEMM_COLS;
            int c1 = c0 + QW_TRAIN64_GEMM_COLS < in ? c0 + QW_TRAIN64_GEMM_COLS : in;
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, c1 - c0, out, (R)1, dy, out, W + c0,
                 in, dx_accumulate ? (R)1 : (R)0, dx + c0, in);
        }
    }
    /* dW[out x in] += dy^T[out x N] x[N x in]; pieces over dW's columns. */
#pragma omp parallel for num_threads(ntp) schedule(dynamic, 1)
    for (int p = 0; p < pieces; p++) {
        int c0 = p * QW_TRAIN64_GEMM_COLS;
        int c1 = c0 + QW_TRAIN64_GEMM_COLS < in ? c0 + QW_TRAIN64_GEMM_COLS : in;
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, out, c1 - c0, N, (R)1, dy, out, x + c0, in,
             (R)1, dW + c0, in);
    }
}
