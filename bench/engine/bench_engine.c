/* SmolLM2-135M evaluation throughput on the CPU, the forward pass's GEMM efficiency, the core's
 * FP32 FMA peak and, with --profile, where an evaluation job's time goes.
 *
 * For 1 thread and for the default thread count (common/threads.h): tokens/s of full
 * evaluation chunks (ctx tokens, forward + logits of the scored half, as qw_eval runs them; no
 * I/O), the achieved GFLOP/s of the forward pass, and the GFLOP/s of the engine's GEMM alone on
 * the same sequence of GEMM shapes, timed in the same run (the fixed-order GEMM split between
 * the threads as the engine splits it, or under QSWEEP_CPU_GEMM=openblas cblas_sgemm with
 * OpenBLAS's threads): the ratio of the two is the engine's efficiency against the GEMM
 * ceiling it is built on (target: >= 0.95). Both are also given
 * as a ratio of the core's FP32 FMA peak at that thread count, measured in the same run by a
 * register-only FMA loop per ISA the CPU has (fma_peak.h; the best ISA is the peak).
 *
 * FLOPs counted per forward of T tokens (the GEMMs the engine executes):
 *   linears  2*T*(sum over linears of out*in) for the blocks, and 2*(T - T/2)*vocab*dim for
 *            lm_head, which the evaluation runs on the scored half of a chunk only;
 *   attention per head, block and 64-row query tile [t0, t0+r): 2 * 2*r*(t0+r)*E (Q K^T and
 *            P V against the keys up to the tile's last query, as worker/engine/model.c runs it).
 * Elementwise work (norms, RoPE, softmax, SwiGLU) is not counted: it is the overhead.
 *
 * --profile: one baseline job and one eval job (NVFP4 weights on every block linear, KL, top-1
 * and the SQNR probe) over the chunks, at the default thread count, as the worker runs them
 * (qw_eval_baseline, qw_model_apply_policy, qw_eval_compare), each with its per-phase wall
 * time (worker/engine/profile.h) against the job's own wall time.
 *
 * Then (not with --table-only) the same forwards with the engine's GEMM switched between
 * OpenBLAS and qsweep's fixed-order GEMM (QSWEEP_CPU_GEMM, worker/engine/gemm_cpu.h) chunk by
 * chunk, alternating: tokens/s of each and their ratio, and the fixed engine's GFLOP/s against
 * the fixed GEMM alone on the same shapes (in pieces of QW_GEMM_COLS columns over the team).
 *
 * Every report starts and ends with the load average (/proc/loadavg) and names the OpenBLAS
 * core and configuration, OPENBLAS_CORETYPE and QSWEEP_CPU_GEMM, which decide the GEMM kernels.
 *
 * --demo-floor (instead of all the above): the main job's baseline and 28 eval jobs shortened to
 * `chunks` chunks, their CPU seconds against the arithmetic floor (run_demo_floor);
 * --sqnr-rows=N runs their probe as a grid's sensitivity.sqnr_rows N would.
 *
 * Usage: bench_engine [--profile | --table-only | --demo-floor] [gguf-or-hf-dir |
 * synthetic:SHAPE[:SEED]] [ctx=512] [chunks=2]. --table-only prints the throughput table and nothing after it (no
 * profile, no block-wise sweep), for bench/peer/llama_cpp_peer.sh. Without the GGUF it says so and
 * exits 0. A synthetic:SHAPE model (synthetic.h, e.g. synthetic:tiny-llama3) runs on pseudo-random
 * tokens. bench_engine --synthetic DIR [ctx] [chunks] first writes, into DIR, a Hugging Face
 * checkpoint with SmolLM2-135M's exact shapes and deterministic pseudo-random BF16 weights (same
 * FLOPs and memory traffic, no download), for machines without the GGUF; its tokens are
 * pseudo-random too. */
#include <cblas.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <sys/stat.h>
#include <omp.h>
#include <stdio.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model.h"
#include "tokens.h"
#include "clock.h"
#include "convcache.h"
#include "eval.h"
#include "fma_peak.h"
#include "loadavg.h"
#include "gemm_cpu.h"
#include "gemm_fixed.h"
#include "ops.h"
#include "profile.h"
#include "threads.h"

/* ---- synthetic SmolLM2-shaped checkpoint (config.json + model.safetensors, BF16) */

enum { SYN_D = 576, SYN_F = 1536, SYN_L = 30, SYN_H = 9, SYN_G = 3, SYN_E = 64, SYN_V = 49152 };

static uint32_t xorshift(uint32_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

typedef struct syn_tensor {
    char name[96];
    long long rows, cols; /* cols 0 = a vector */
} syn_tensor;

static int syn_tensors(syn_tensor *t) {
    int n = 0;
    t[n++] = (syn_tensor){"model.embed_tokens.weight", SYN_V, SYN_D};
    const char *mods[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                           "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                           "mlp.down_proj"};
    const long long outs[7] = {SYN_H * SYN_E, SYN_G * SYN_E, SYN_G * SYN_E, SYN_D,
                               SYN_F,         SYN_F,         SYN_D};
    const long long ins[7] = {SYN_D, SYN_D, SYN_D, SYN_H * SYN_E, SYN_D, SYN_D, SYN_F};
    for (int l = 0; l < SYN_L; l++) {
        snprintf(t[n].name, sizeof t[n].name, "model.layers.%d.input_layernorm.weight", l);
        t[n].rows = SYN_D, t[n++].cols = 0;
        snprintf(t[n].name, sizeof t[n].name, "model.layers.%d.post_attention_layernorm.weight", l);
        t[n].rows = SYN_D, t[n++].cols = 0;
        for (int k = 0; k < 7; k++) {
            snprintf(t[n].name, sizeof t[n].name, "model.layers.%d.%s.weight", l, mods[k]);
            t[n].rows = outs[k], t[n++].cols = ins[k];
        }
    }
    t[n++] = (syn_tensor){"model.norm.weight", SYN_D, 0};
    return n;
}

/* Writes DIR/config.json and DIR/model.safetensors (format: u64 header length, JSON header of
 * dtype/shape/data_offsets, then the data). Returns 0, or -1 with a message on stderr. */
static int write_synthetic(const char *dir) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench_engine: mkdir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char path[1200];
    json_t *cfg =
        json_pack("{s:[s],s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:b,s:s}",
                  "architectures", "LlamaForCausalLM", "model_type", "llama", "hidden_act", "silu",
                  "hidden_size", SYN_D, "intermediate_size", SYN_F, "num_hidden_layers", SYN_L,
                  "num_attention_heads", SYN_H, "num_key_value_heads", SYN_G, "head_dim", SYN_E,
                  "vocab_size", SYN_V, "max_position_embeddings", 8192, "rms_norm_eps", 1e-5,
                  "rope_theta", 100000.0, "tie_word_embeddings", 1, "torch_dtype", "bfloat16");
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!cfg || json_dump_file(cfg, path, JSON_INDENT(2)) != 0) {
        fprintf(stderr, "bench_engine: cannot write %s\n", path);
        json_decref(cfg);
        return -1;
    }
    json_decref(cfg);
    syn_tensor *t = malloc(sizeof(syn_tensor) * (2 + 9 * SYN_L));
    int n = syn_tensors(t);
    json_t *hdr = json_object();
    long long off = 0;
    for (int i = 0; i < n; i++) {
        long long elems = t[i].rows * (t[i].cols ? t[i].cols : 1);
        json_t *shape =
            t[i].cols ? json_pack("[I,I]", t[i].rows, t[i].cols) : json_pack("[I]", t[i].rows);
        json_object_set_new(hdr, t[i].name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", "BF16", "shape", shape,
                                      "data_offsets", off, off + 2 * elems));
        off += 2 * elems;
    }
    char *h = json_dumps(hdr, JSON_COMPACT);
    json_decref(hdr);
    size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    int ok = f != NULL;
    uint64_t le = padded;
    ok = ok && fwrite(&le, 8, 1, f) == 1 && fwrite(h, 1, hl, f) == hl;
    for (size_t i = hl; ok && i < padded; i++)
        ok = fputc(' ', f) != EOF;
    uint32_t x = 2463534242u;
    uint16_t buf[4096];
    for (int i = 0; ok && i < n; i++) {
        long long elems = t[i].rows * (t[i].cols ? t[i].cols : 1);
        float scale =
            t[i].cols ? 1.7320508f / sqrtf((float)t[i].cols) : 0.0f; /* uniform, variance 1/in */
        for (long long e = 0; ok && e < elems;) {
            size_t k = 0;
            for (; k < 4096 && e < elems; k++, e++) {
                float v =
                    t[i].cols ? scale * ((float)(xorshift(&x) >> 8) / 8388608.0f - 1.0f) : 1.0f;
                uint32_t bits;
                memcpy(&bits, &v, 4);
                buf[k] = (uint16_t)(bits >> 16);
            }
            ok = fwrite(buf, 2, k, f) == k;
        }
    }
    if (f && fclose(f) != 0) ok = 0;
    free(h);
    free(t);
    if (!ok) fprintf(stderr, "bench_engine: cannot write %s\n", path);
    return ok ? 0 : -1;
}

#define ATT_TILE 64 /* QW_ATT_TILE of worker/engine/model.c */

typedef struct shape {
    int m, n, k, trans_b, lda, ldb, ldc;
} shape;

/* The GEMM shapes of one forward of T tokens, in execution order; returns the count and FLOPs. */
static int forward_shapes(const qw_config *c, int T, shape *s, double *flops) {
    int D = c->dim, F = c->hidden_dim, H = c->n_heads, G = c->n_kv_heads, E = c->head_dim,
        V = c->vocab_size;
    int n = 0;
    double fl = 0.0;
    const int outs[7] = {H * E, G * E, G * E, D, F, F, D}, ins[7] = {D, D, D, H * E, D, D, F};
    for (int l = 0; l < c->n_layers; l++) {
        for (int k = 0; k < 3; k++)
            s[n++] = (shape){T, outs[k], ins[k], 1, ins[k], ins[k], outs[k]};
        for (int h = 0; h < H; h++)
            for (int t0 = 0; t0 < T; t0 += ATT_TILE) {
                int r = T - t0 < ATT_TILE ? T - t0 : ATT_TILE, nc = t0 + r;
                s[n++] = (shape){r, nc, E, 1, H * E, G * E, nc};
                s[n++] = (shape){r, E, nc, 0, nc, G * E, H * E};
            }
        for (int k = 3; k < 7; k++)
            s[n++] = (shape){T, outs[k], ins[k], 1, ins[k], ins[k], outs[k]};
    }
    s[n++] = (shape){T - T / 2, V, D, 1, D, D, V}; /* lm_head on the scored half (eval.h) */
    for (int i = 0; i < n; i++)
        fl += 2.0 * s[i].m * s[i].n * s[i].k;
    *flops = fl;
    return n;
}

static double time_sgemm(const shape *s, int n, float *A, float *B, float *C, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = qs_clock_s();
        for (int i = 0; i < n; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, s[i].trans_b ? CblasTrans : CblasNoTrans,
                        s[i].m, s[i].n, s[i].k, 1.0f, A, s[i].lda, B, s[i].ldb, 0.0f, C, s[i].ldc);
        double dt = qs_clock_s() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

/* The fixed-order GEMM on the same shapes, best of reps passes: a linear's shape through
 * qw_matmul_forward (the engine's split of a linear between `threads` threads), an attention
 * shape cut into pieces of QW_GEMM_COLS columns handed to the threads. */
static double time_fixed(const shape *s, int n, float *A, float *B, float *C, int reps,
                         int threads) {
    qw_cpu_gemm was = qw_cpu_gemm_kind();
    qw_cpu_gemm_force(QW_CPU_GEMM_FIXED);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = qs_clock_s();
        for (int i = 0; i < n; i++) {
            if (s[i].trans_b && s[i].lda == s[i].k && s[i].ldb == s[i].k && s[i].ldc == s[i].n) {
                qw_matmul_forward(C, A, B, s[i].m, s[i].k, s[i].n, threads);
                continue;
            }
            int pieces = (s[i].n + QW_GEMM_COLS - 1) / QW_GEMM_COLS;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
            for (int p = 0; p < pieces; p++) {
                int c0 = p * QW_GEMM_COLS,
                    w = s[i].n - c0 < QW_GEMM_COLS ? s[i].n - c0 : QW_GEMM_COLS;
                const float *b = s[i].trans_b ? B + (size_t)c0 * s[i].ldb : B + c0;
                qw_gemm_fixed(0, s[i].trans_b, s[i].m, w, s[i].k, 1.0f, A, s[i].lda, b, s[i].ldb,
                              0.0f, C + c0, s[i].ldc);
            }
        }
        double dt = qs_clock_s() - t0;
        best = dt < best ? dt : best;
    }
    qw_cpu_gemm_force(was);
    return best;
}

/* The best FMA peak at `threads` threads, printing each ISA's. */
static double peak_at(int threads) {
    fma_peak p[2];
    int n = fma_peak_measure(threads, p);
    double best = 0.0;
    printf("FP32 FMA peak at %d thread%s:", threads, threads == 1 ? "" : "s");
    for (int i = 0; i < n; i++) {
        printf(" %s %.1f GF/s", p[i].isa, p[i].gflops);
        best = p[i].gflops > best ? p[i].gflops : best;
    }
    printf("%s\n", n ? "" : " no AVX2+FMA: not measured");
    return best;
}

/* One job's profile against its wall time. */
static void print_profile(const char *what, const qw_profile *p, double wall) {
    printf("\n%s: %.3f s wall\n", what, wall);
    printf("  %-14s %10s %8s\n", "phase", "s", "share");
    for (int i = 0; i < QW_PHASES; i++)
        printf("  %-14s %10.4f %7.1f%%\n", qw_phase_name((qw_phase)i), p->s[i],
               wall > 0 ? 100.0 * p->s[i] / wall : 0.0);
    double sum = qw_profile_total(p);
    printf("  %-14s %10.4f %7.1f%%\n", "(sum)", sum, wall > 0 ? 100.0 * sum / wall : 0.0);
}

/* The same bits: every metric of a and b (perplexity, KL statistics, top-1, each SQNR). */
static int same_metrics(const qw_eval_metrics *a, const qw_eval_metrics *b) {
    const double va[] = {a->ppl,    a->kl_mean, a->kl_median, a->kl_p90,
                         a->kl_p99, a->kl_max,  a->top1};
    const double vb[] = {b->ppl,    b->kl_mean, b->kl_median, b->kl_p90,
                         b->kl_p99, b->kl_max,  b->top1};
    if (memcmp(va, vb, sizeof va) != 0 || a->n_sqnr != b->n_sqnr) return 0;
    for (size_t i = 0; i < a->n_sqnr; i++)
        if (memcmp(&a->sqnr[i].sqnr_db, &b->sqnr[i].sqnr_db, sizeof(double)) != 0) return 0;
    return 1;
}

/* One baseline job and one eval job under the policy pol, each timed by phase and printed;
 * *eval_wall and *out (the eval job's metrics) for the caller. */
static qs_status profile_jobs(qw_model *m, const qw_tokens *toks, qw_eval_options opt,
                              const char *path, const qw_policy *pol, double *eval_wall,
                              qw_eval_metrics *out, qs_error *err) {
    qw_profile *prof = qw_model_profile(m);
    qw_eval_metrics met = {0};
    qw_profile_reset(prof);
    double t0 = qs_clock_s();
    qs_status st = qw_model_apply_policy(m, NULL, err);
    if (!st) st = qw_eval_baseline(m, toks, &opt, path, &met, err);
    double wall = qs_clock_s() - t0;
    qw_eval_metrics_free(&met);
    if (st) return st;
    print_profile("baseline job (unquantized, writes the baseline log-probs)", prof, wall);
    opt.sqnr = 1;
    qw_profile_reset(prof);
    t0 = qs_clock_s();
    st = qw_model_apply_policy(m, pol, err);
    if (!st) st = qw_eval_compare(m, toks, &opt, path, out, err);
    *eval_wall = qs_clock_s() - t0;
    if (st) return st;
    print_profile("eval job (NVFP4 weights on every block linear; KL, top-1, SQNR probe)", prof,
                  *eval_wall);
    printf("  (ppl %.4f, kl_mean %.5f, top1 %.4f)\n", out->ppl, out->kl_mean, out->top1);
    return QS_OK;
}

/* Makes the empty file of mkstemp template path (its XXXXXX replaced) for a baseline to go to;
 * 0, or 1 with the error on stderr. */
static int temp_file(char *path) {
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "bench_engine: mkstemp: %s\n", strerror(errno));
        return 1;
    }
    close(fd);
    return 0;
}

/* --profile: a baseline job and an eval job (NVFP4 weights on every block linear, KL, top-1,
 * SQNR) over `chunks` chunks of ctx, timed by phase, three times: with the conversion cache
 * off; with a new one of the default budget (convcache.h: the baseline's first chunk converts
 * the masters, the eval's first chunk its packed weights, as on a worker's first jobs on a
 * model); and with the same cache kept (a worker's next jobs: masters held, packed pieces
 * converted into the buffers the last policy left); the eval job's wall time as ratios to the
 * first, and whether all three gave the same bits in every metric. Returns 0 or 1. */
static int run_profile(qw_model *m, const qw_tokens *toks, int ctx, int chunks) {
    char path[] = "/tmp/bench_engine_baseline_XXXXXX";
    if (temp_file(path)) return 1;
    qs_error err = {0};
    const qw_config *c = qw_model_config(m);
    qw_eval_options opt = {.ctx = ctx, .max_chunks = (size_t)chunks, .bos_id = -1};
    qw_eval_metrics met[3] = {{0}, {0}, {0}};
    qw_policy pol = {0};
    qw_quant_spec spec = {.weight = qk_format_by_name("nvfp4")};
    double wall[3] = {0, 0, 0};
    size_t budget = qw_convcache_default_bytes();
    int rc = 1;
    qs_status st = QS_OK;
    if (!spec.weight) {
        fprintf(stderr, "bench_engine: nvfp4 format missing\n");
        goto out;
    }
    st = qw_policy_init(&pol, c->n_layers, &err);
    for (int b = 0; !st && b < c->n_layers; b++)
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            *qw_policy_linear(&pol, b, (qw_linear_kind)k) = spec;
    static const char *const runs[3] = {"off", "on, new (a worker's first jobs on the model)",
                                        "on, kept (the worker's next jobs)"};
    for (int on = 0; on < 3 && !st; on++) {
        if (on < 2) st = qw_model_set_convert_cache(m, on ? budget : 0, &err);
        if (st) break;
        printf("\nprofile at %d threads, conversion cache %s (worker/engine/profile.h; share: "
               "of the job's wall time)\n",
               qw_model_threads(m), runs[on]);
        st = profile_jobs(m, toks, opt, path, &pol, &wall[on], &met[on], &err);
        if (!st && on) {
            qw_convcache_stats cs;
            qw_model_convert_cache_stats(m, &cs);
            printf("  (conversion cache: budget %.0f MiB, %zu pieces, %.1f MiB held, %llu hits, "
                   "%llu misses, %llu evictions; counts since the cache was made)\n",
                   (double)cs.budget / 1048576.0, cs.entries, (double)cs.bytes / 1048576.0,
                   (unsigned long long)cs.hits, (unsigned long long)cs.misses,
                   (unsigned long long)cs.evictions);
        }
    }
    if (st) goto out;
    int same = same_metrics(&met[0], &met[1]) && same_metrics(&met[0], &met[2]);
    printf("\neval job: %.3f s with the conversion cache off, %.3f s new (%.2fx), %.3f s kept "
           "(%.2fx); every metric (ppl, KL, top-1, %zu SQNR) bit-identical: %s\n",
           wall[0], wall[1], wall[1] > 0 ? wall[0] / wall[1] : 0.0, wall[2],
           wall[2] > 0 ? wall[0] / wall[2] : 0.0, met[0].n_sqnr, same ? "yes" : "NO");
    rc = same ? 0 : 1;
out:
    if (st) fprintf(stderr, "bench_engine: profile: %s\n", err.msg);
    for (int i = 0; i < 3; i++)
        qw_eval_metrics_free(&met[i]);
    qw_policy_free(&pol);
    qw_model_apply_policy(m, NULL, &err);
    qw_model_set_convert_cache(m, budget, &err);
    unlink(path);
    return rc;
}

/* OpenBLAS against the fixed-order GEMM inside the engine: for each thread count, `chunks`
 * forwards of each, alternating chunk by chunk; prints tokens/s and GFLOP/s of both, the fixed
 * engine against the fixed GEMM alone on the same shapes and against the FMA peak (peaks[],
 * measured before). Leaves the process's choice as it found it. Returns 0 or 1. */
static int compare_gemms(qw_model *m, const qw_tokens *toks, int ctx, int chunks, const int *counts,
                         const double *peaks, int n_counts, const shape *sh, int ns, double flops,
                         float *A, float *B, float *C) {
    qw_cpu_gemm was = qw_cpu_gemm_kind();
    qs_error err = {0};
    char rows[2][200];
    for (int ti = 0; ti < n_counts; ti++) {
        int th = counts[ti];
        if (qw_model_set_threads(m, th, &err) != QS_OK) goto fail;
        double total[2] = {0, 0}, best[2] = {1e30, 1e30};
        const float *logits;
        for (int k = 0; k < 2; k++) { /* warm-up */
            qw_cpu_gemm_force(k ? QW_CPU_GEMM_FIXED : QW_CPU_GEMM_OPENBLAS);
            if (qw_model_forward(m, toks->ids, ctx, &logits, &err) != QS_OK) goto fail;
        }
        for (int ch = 0; ch < chunks; ch++)
            for (int k = 0; k < 2; k++) {
                qw_cpu_gemm_force(k ? QW_CPU_GEMM_FIXED : QW_CPU_GEMM_OPENBLAS);
                double s0 = qs_clock_s();
                if (qw_model_forward_rows(m, toks->ids + (size_t)ch * ctx, ctx, ctx / 2, &logits,
                                          &err) != QS_OK)
                    goto fail;
                double dt = qs_clock_s() - s0;
                total[k] += dt;
                best[k] = dt < best[k] ? dt : best[k];
            }
        double t_fixed = time_fixed(sh, ns, A, B, C, chunks, th);
        double gf_b = flops / best[0] * 1e-9, gf_f = flops / best[1] * 1e-9;
        double gf_g = flops / t_fixed * 1e-9, pk = peaks[ti];
        snprintf(rows[ti], sizeof rows[ti],
                 "%-8d %15.1f %12.1f %15.3f %12.1f %12.2f %12.1f %12.3f %11.3f", th,
                 ctx * chunks / total[0], ctx * chunks / total[1], total[0] / total[1], gf_b, gf_f,
                 gf_g, gf_f / gf_g, pk > 0 ? gf_f / pk : 0.0);
    }
    qw_cpu_gemm_force(was);
    printf("\nOpenBLAS against the fixed-order GEMM (%s path) in the engine, chunks "
           "alternating:\n",
           qw_gemm_isa_name(qw_gemm_fixed_isa()));
    printf("%-8s %15s %12s %15s %12s %12s %12s %12s %11s\n", "threads", "openblas tok/s",
           "fixed tok/s", "fixed/openblas", "openblas GF/s", "fixed GF/s", "fixgemm GF/s",
           "/fixgemm", "fixed/peak");
    for (int ti = 0; ti < n_counts; ti++)
        printf("%s\n", rows[ti]);
    return 0;
fail:
    qw_cpu_gemm_force(was);
    fprintf(stderr, "bench_engine: %s\n", err.msg);
    return 1;
}

/* The sweep lever: block-wise NVFP4 isolation over every 5th block of m, one chunk of ctx
 * tokens per policy, without and with the prefix cache (blocks before the quantized one
 * reused), at `threads` threads; prints both wall times. Returns 0, or 1 with the error on
 * stderr. */
static int run_sweep(qw_model *m, const qw_tokens *toks, int ctx, int threads) {
    const qw_config *c = qw_model_config(m);
    qs_error err = {0};
    qw_policy pol;
    qw_quant_spec spec = {.weight = qk_format_by_name("nvfp4")};
    if (!spec.weight || qw_policy_init(&pol, c->n_layers, &err) != QS_OK) {
        fprintf(stderr, "bench_engine: %s\n", spec.weight ? err.msg : "nvfp4 format missing");
        return 1;
    }
    double sweep_s[2] = {0, 0};
    size_t hits = 0, skipped = 0;
    int n_pol = 0;
    for (int cached = 0; cached < 2; cached++) {
        if (qw_model_set_prefix_cache(
                m, cached ? (size_t)c->n_layers * ctx * c->dim * 4 + 4096u * ctx : 0, &err) !=
            QS_OK) {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            return 1;
        }
        const float *logits;
        qw_model_apply_policy(m, NULL, &err);
        qw_model_forward(m, toks->ids, ctx, &logits, &err); /* the baseline pass of the sweep */
        n_pol = 0;
        double s0 = qs_clock_s();
        for (int b = 0; b < c->n_layers; b += 5, n_pol++) {
            if (qw_policy_isolation(&pol, QW_ISO_BLOCK, 0, b, &spec, &err) != QS_OK ||
                qw_model_apply_policy(m, &pol, &err) != QS_OK ||
                qw_model_forward(m, toks->ids, ctx, &logits, &err) != QS_OK) {
                fprintf(stderr, "bench_engine: %s\n", err.msg);
                return 1;
            }
        }
        sweep_s[cached] = qs_clock_s() - s0;
        if (cached) qw_model_prefix_cache_stats(m, &hits, &skipped);
    }
    qw_model_set_prefix_cache(m, 0, &err);
    printf("\nblock-wise NVFP4 isolation, %d policies x 1 chunk of %d, %d threads (policy "
           "application included):\n",
           n_pol, ctx, threads);
    printf("  recomputing every block %.3f s, prefix cache %.3f s (%zu blocks skipped): speedup "
           "%.2fx\n",
           sweep_s[0], sweep_s[1], skipped, sweep_s[0] / sweep_s[1]);
    qw_policy_free(&pol);
    return 0;
}

/* --demo-floor: the main job (tools/demo.sh, experiments/smollm2-fp4-components.yaml) shortened
 * to `chunks` chunks of ctx: its baseline job and its 28 eval jobs (NVFP4 and MXFP4 with their
 * default options, W4A16 and W4A4, one linear kind in every block; ppl, KL, top-1 and the SQNR
 * probe) as the worker runs them (qw_model_apply_policy, qw_eval_baseline / qw_eval_compare),
 * at `threads` threads with the conversion cache a worker keeps. The arithmetic floor is the
 * jobs' chunk-forwards x `flops` per forward at the FMA peak of one core (the best ISA's peak on
 * one thread, measured here): CPU seconds no engine can go below. It
 * prints the process's CPU seconds (CLOCK_PROCESS_CPUTIME_ID: every thread, spinning included)
 * against it, the wall time against the floor's wall time, and where the wall time went (the
 * phases summed over the jobs). Returns 0, or 1 with the error on stderr. */
static int run_demo_floor(qw_model *m, const qw_tokens *toks, int ctx, int chunks, int threads,
                          double flops, int sqnr_rows) {
    static const char *const fmts[2] = {"nvfp4", "mxfp4"};
    const qw_config *c = qw_model_config(m);
    char path[] = "/tmp/bench_engine_demo_XXXXXX";
    if (temp_file(path)) return 1;
    qs_error err = {0};
    qw_policy pol = {0};
    qw_eval_options opt = {.ctx = ctx, .max_chunks = (size_t)chunks, .bos_id = -1};
    qw_eval_metrics met = {0};
    qw_profile *prof = qw_model_profile(m);
    /* The floor is per CPU second: one core's peak, the FMA loop on one thread. Its best of
     * 30 runs is a run that held its core throughout, so the machine's load lowers it only
     * when no run got a whole core; a peak over all the threads would count a loaded
     * machine's missing cores. */
    double core_peak = peak_at(1);
    qs_status st = qw_model_set_threads(m, threads, &err);
    int jobs = 0;
    qw_profile_reset(prof);
    struct timespec c0, c1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    double t0 = qs_clock_s();
    if (!st) st = qw_model_apply_policy(m, NULL, &err);
    if (!st) st = qw_eval_baseline(m, toks, &opt, path, &met, &err);
    qw_eval_metrics_free(&met);
    jobs += !st;
    opt.sqnr = 1;
    opt.sqnr_rows = sqnr_rows;
    for (int f = 0; f < 2 && !st; f++)
        for (int acts = 0; acts < 2 && !st; acts++)
            for (int k = 0; k < QW_LINEAR_KINDS && !st; k++) {
                qw_quant_spec q = {.weight = qk_format_by_name(fmts[f])};
                if (!q.weight) {
                    st = qs_error_set(&err, QS_EINVAL, "format %s missing", fmts[f]);
                    break;
                }
                if (acts) q.act = q.weight;
                qw_policy_free(&pol);
                st = qw_policy_init(&pol, c->n_layers, &err);
                for (int b = 0; !st && b < c->n_layers; b++)
                    *qw_policy_linear(&pol, b, (qw_linear_kind)k) = q;
                if (!st) st = qw_model_apply_policy(m, &pol, &err);
                if (!st) st = qw_eval_compare(m, toks, &opt, path, &met, &err);
                qw_eval_metrics_free(&met);
                qw_model_apply_policy(m, NULL, NULL); /* as the worker leaves its model */
                jobs += !st;
            }
    double wall = qs_clock_s() - t0;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
    qw_policy_free(&pol);
    unlink(path);
    if (st) {
        fprintf(stderr, "bench_engine: demo floor: job %d: %s\n", jobs + 1, err.msg);
        return 1;
    }
    long forwards = (long)jobs * chunks;
    double floor_cpu = core_peak > 0 ? forwards * flops * 1e-9 / core_peak : 0.0;
    printf("\nthe main job shortened (experiments/smollm2-fp4-components.yaml: 1 baseline + 28 eval "
           "jobs, NVFP4/MXFP4 x W4A16/W4A4 x 7 components, ppl, KL, top-1, SQNR on %s), %d "
           "chunks of %d, %d threads (share: of the jobs' wall time, phases summed over the "
           "jobs)\n",
           sqnr_rows ? "the last rows" : "every row", chunks, ctx, threads);
    if (sqnr_rows) printf("  (sqnr_rows %d: not the demo grid's jobs)\n", sqnr_rows);
    printf("  %-14s %10s %8s\n", "phase", "s", "share");
    for (int i = 0; i < QW_PHASES; i++)
        printf("  %-14s %10.3f %7.1f%%\n", qw_phase_name((qw_phase)i), prof->s[i],
               wall > 0 ? 100.0 * prof->s[i] / wall : 0.0);
    printf("\n%-7s %9s %11s %12s %10s %10s %9s %9s %11s\n", "jobs", "forwards", "GFLOP/fwd",
           "peak/core", "floor CPU", "CPU s", "CPU/floor", "wall s", "wall/floor");
    printf("%-7d %9ld %11.1f %12.1f %10.1f %10.1f %9.2f %9.1f %11.2f\n", jobs, forwards,
           flops * 1e-9, core_peak, floor_cpu, cpu,
           floor_cpu > 0 ? cpu / floor_cpu : 0.0, wall,
           floor_cpu > 0 ? wall / (floor_cpu / threads) : 0.0);
    printf("(floor: forwards x GFLOP per forward / the FMA peak of one core, the best ISA on one "
           "thread, best of its runs; wall/floor: the wall time against the floor over %d "
           "threads; target CPU/floor <= 1.25)\n",
           threads);
    return 0;
}

/* The throughput table at 1 thread and at `all`: the engine's tokens/s and GFLOP/s against its
 * GEMM alone on the same shapes (sh[0..ns), flops per forward) and the FMA peak, then (unless
 * table_only) the GEMM comparison, the profile and the sweep. A, B, C: scratch for the GEMM
 * passes. Returns 0, or 1 after printing an error. */
static int run_throughput(qw_model *m, const qw_tokens *toks, int ctx, int chunks, int all,
                          const shape *sh, int ns, double flops, float *A, float *B, float *C,
                          int table_only, int profile) {
    qs_error err = {0};
    int thread_counts[2] = {1, all};
    int n_counts = all > 1 ? 2 : 1;
    char rows[2][160];
    double peaks[2] = {0, 0};
    for (int ti = 0; ti < n_counts; ti++) {
        int th = thread_counts[ti];
        double pk = peak_at(th); /* next to the measurements it is the yardstick of */
        peaks[ti] = pk;
        if (qw_model_set_threads(m, th, &err) != QS_OK) {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            return 1;
        }
        const float *logits;
        qw_model_forward(m, toks->ids, ctx, &logits, &err); /* warm-up */
        double best = 1e30, total = 0.0;
        for (int ch = 0; ch < chunks; ch++) {
            double s0 = qs_clock_s();
            if (qw_model_forward_rows(m, toks->ids + (size_t)ch * ctx, ctx, ctx / 2, &logits,
                                      &err) != QS_OK) {
                fprintf(stderr, "bench_engine: %s\n", err.msg);
                return 1;
            }
            double dt = qs_clock_s() - s0;
            total += dt;
            best = dt < best ? dt : best;
        }
        /* The ceiling: the engine's GEMM alone on the same shapes. The fixed-order GEMM split
         * as the engine splits it; OpenBLAS with its own threading (the model runs it single-
         * threaded under its OpenMP team, so give it the threads back for this pass). */
        double t_gemm;
        if (qw_cpu_gemm_kind() == QW_CPU_GEMM_FIXED) {
            t_gemm = time_fixed(sh, ns, A, B, C, chunks, th);
        } else {
            openblas_set_num_threads(th);
            t_gemm = time_sgemm(sh, ns, A, B, C, chunks);
            openblas_set_num_threads(1);
        }
        double gf_engine = flops / best * 1e-9, gf_gemm = flops / t_gemm * 1e-9;
        snprintf(rows[ti], sizeof rows[ti],
                 "%-8d %10.1f %9.3f %12.2f %11.2f %8.3f %10.1f %11.3f %11.3f", th,
                 ctx * chunks / total, total / chunks, gf_engine, gf_gemm, gf_engine / gf_gemm, pk,
                 pk > 0 ? gf_engine / pk : 0.0, pk > 0 ? gf_gemm / pk : 0.0);
    }
    printf("\n%-8s %10s %9s %12s %11s %8s %10s %11s %11s\n", "threads", "tokens/s", "s/chunk",
           "engine GF/s", "gemm GF/s", "/gemm", "peak GF/s", "engine/peak", "gemm/peak");
    for (int ti = 0; ti < n_counts; ti++)
        printf("%s\n", rows[ti]);
    printf("\n(tokens/s: mean over the chunks; gemm: the engine's GEMM alone on the same shapes, "
           "%s; GFLOP/s: best chunk against the best gemm pass; peak: the best ISA's FMA loop at "
           "that thread count)\n",
           qw_cpu_gemm_kind() == QW_CPU_GEMM_FIXED
               ? "the fixed-order GEMM split as the engine splits it"
               : "cblas_sgemm with OpenBLAS's threads");

    if (!table_only && compare_gemms(m, toks, ctx, chunks, thread_counts, peaks, n_counts, sh, ns,
                                     flops, A, B, C) != 0)
        return 1;
    qw_model_set_threads(m, all, &err);
    if (profile && !table_only && run_profile(m, toks, ctx, chunks) != 0) return 1;
    /* --table-only: the throughput table alone (bench/peer) */
    if (!table_only && run_sweep(m, toks, ctx, all) != 0) return 1;
    return 0;
}

/* A positional argument as a whole number in [lo, INT_MAX] into *out; 0 after naming it. */
static int whole_arg(const char *name, const char *text, long lo, int *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < lo || v > INT_MAX) {
        fprintf(stderr, "bench_engine: %s '%s': expected a whole number >= %ld\n", name, text, lo);
        return 0;
    }
    *out = (int)v;
    return 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* each line as it is measured, also into a file */
    char def[1024];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(def, sizeof def, "%s/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf", xdg);
    else
        snprintf(def, sizeof def, "%s/.cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : "");
    int profile = 0, synthetic = 0, table_only = 0, demo_floor = 0, sqnr_rows = 0, npos = 0;
    int help = 0;
    const char *pos[3] = {NULL, NULL, NULL};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--profile") == 0)
            profile = 1;
        else if (strcmp(argv[i], "--synthetic") == 0)
            synthetic = 1;
        else if (strcmp(argv[i], "--table-only") == 0)
            table_only = 1;
        else if (strcmp(argv[i], "--demo-floor") == 0)
            demo_floor = 1;
        else if (strncmp(argv[i], "--sqnr-rows=", 12) == 0) {
            char *end;
            long v = strtol(argv[i] + 12, &end, 10);
            if (end == argv[i] + 12 || *end || v < 0 || v > INT_MAX) {
                fprintf(stderr, "bench_engine: %s: expected a whole number of rows\n", argv[i]);
                return 2;
            }
            sqnr_rows = (int)v;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            help = 1;
        } else if (!strncmp(argv[i], "--", 2) ||
                   (argv[i][0] == '-' && isalpha((unsigned char)argv[i][1]))) {
            fprintf(stderr, "bench_engine: unknown option '%s'\n", argv[i]);
            npos = 4;
        } else if (npos < 3)
            pos[npos++] = argv[i];
        else
            npos = 4;
    }
    if (profile + table_only + demo_floor > 1) {
        fprintf(stderr, "bench_engine: %s%s%s: one mode at a time\n",
                profile ? "--profile and " : "", table_only ? "--table-only" : "",
                demo_floor ? (table_only ? " and --demo-floor" : "--demo-floor") : "");
        return 2;
    }
    const char *gguf = pos[0] ? pos[0] : def;
    int ctx = 512, chunks = 2;
    if ((pos[1] && !whole_arg("ctx", pos[1], 3, &ctx)) ||
        (pos[2] && !whole_arg("chunks", pos[2], 1, &chunks)))
        return 2;
    if (help || npos > 3 || (synthetic && !pos[0]) || sqnr_rows < 0) {
        fprintf(help && npos <= 3 ? stdout : stderr,
                "usage: bench_engine [--profile | --table-only | --demo-floor "
                "[--sqnr-rows=N]] [gguf | hf-dir | synthetic:SHAPE] [ctx>=3] [chunks>=1]\n"
                "       bench_engine [--profile] --synthetic DIR [ctx>=3] [chunks>=1]\n");
        return help && npos <= 3 ? 0 : 2;
    }
    int synthetic_spec = strncmp(gguf, "synthetic:", 10) == 0;
    if (synthetic && write_synthetic(gguf) != 0) return 1;
    if (!synthetic_spec && access(gguf, R_OK) != 0) {
        printf("bench_engine: %s absent (tools/fetch_smollm2.sh fetches it); nothing measured\n",
               gguf);
        return 0;
    }
    bench_print_loadavg("at start");
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf("OpenBLAS core %s (%s); OPENBLAS_CORETYPE %s\n", openblas_get_corename(),
           openblas_get_config(), coretype ? coretype : "unset");
    printf("engine GEMM (QSWEEP_CPU_GEMM): %s; CPU numerics path %s\n",
           qw_cpu_gemm_name(qw_cpu_gemm_kind()), qw_backend_cpu_path());
    char tokpath[1024];
    snprintf(tokpath, sizeof tokpath, "%s/gpl3.smollm2.tokens", QW_ENGINE_DATA);
    qs_error err = {0};
    qw_checkpoint *ck = NULL;
    qw_tokens toks = {0};
    qw_model *m;
    double t0 = qs_clock_s();
    if (synthetic_spec ? qw_model_create_synthetic(gguf, ctx, 0, &m, &err) != QS_OK
                       : (qw_checkpoint_open(gguf, &ck, &err) != QS_OK ||
                          qw_model_create(ck, ctx, 0, &m, &err) != QS_OK)) {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 1;
    }
    if (synthetic || synthetic_spec) {
        toks.n = (size_t)ctx * chunks;
        toks.ids = malloc(toks.n * sizeof *toks.ids);
        if (!toks.ids) return 1;
        uint32_t x = 88172645u;
        for (size_t i = 0; i < toks.n; i++)
            toks.ids[i] = xorshift(&x) % (uint32_t)qw_model_config(m)->vocab_size;
        toks.vocab_size = (uint32_t)qw_model_config(m)->vocab_size;
    } else if (qw_tokens_load(tokpath, &toks, &err) != QS_OK) {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 1;
    }
    double t_load = qs_clock_s() - t0;
    if (toks.n < (size_t)ctx * chunks) {
        fprintf(stderr, "bench_engine: %zu tokens, fewer than %d chunks of %d\n", toks.n, chunks,
                ctx);
        return 1;
    }
    const qw_config *c = qw_model_config(m);
    int max_shapes = c->n_layers * (7 + 2 * c->n_heads * ((ctx + ATT_TILE - 1) / ATT_TILE)) + 1;
    shape *sh = malloc((size_t)max_shapes * sizeof *sh);
    double flops;
    int ns = forward_shapes(c, ctx, sh, &flops);
    size_t big =
        (size_t)ctx * (size_t)(c->vocab_size > c->hidden_dim ? c->vocab_size : c->hidden_dim);
    size_t wbig = (size_t)c->vocab_size * c->dim;
    if ((size_t)c->hidden_dim * c->dim > wbig) wbig = (size_t)c->hidden_dim * c->dim;
    float *A =
        calloc((size_t)ctx * (c->hidden_dim > ctx ? c->hidden_dim : ctx) * (size_t)c->n_heads,
               sizeof(float));
    float *B = calloc(wbig > big ? wbig : big, sizeof(float));
    float *C = calloc(big, sizeof(float));
    if (!sh || !A || !B || !C) {
        fprintf(stderr, "bench_engine: out of memory\n");
        return 1;
    }
    printf("%s%s (%s): %d layers, dim %d, ffn %d, heads %d/%d, vocab %d; load %.2f s\n",
           synthetic ? "synthetic " : "", synthetic_spec ? "model" : "SmolLM2-135M", gguf,
           c->n_layers, c->dim, c->hidden_dim, c->n_heads, c->n_kv_heads, c->vocab_size, t_load);
    printf("ctx %d, %d chunks per measurement, %.1f GFLOP per forward (%d GEMMs)\n\n", ctx, chunks,
           flops * 1e-9, ns);
    int all = qs_default_threads(); /* threads.h: OMP_NUM_THREADS, else the affinity mask */
    int rc = demo_floor ? run_demo_floor(m, &toks, ctx, chunks, all, flops, sqnr_rows)
                        : run_throughput(m, &toks, ctx, chunks, all, sh, ns, flops, A, B, C,
                                         table_only, profile);
    bench_print_loadavg("at end");
    free(sh);
    free(A);
    free(B);
    free(C);
    qw_tokens_free(&toks);
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
    return rc;
}
