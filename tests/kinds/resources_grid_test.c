/* kinds_resources_grid: the resources each job of a grid gets at expansion (grid.h
 * `resources`, kinds/resources.h), through the CLI's real probe (cli/probe.c: checkpoint
 * headers, the master dtype's device bytes and the synthetic shape table) over a real checkpoint
 * and token file, with the figures computed by hand in the comments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "fixtures.h"
#include "grid.h"
#include "probe.h"

typedef struct env {
    char *dir;
    char grid[512];
} env;

static int setup(void **state) {
    env *e = calloc(1, sizeof *e);
    /* 2 blocks, vocabulary 64, F32, tied (fixtures.h: dim 8, intermediate 16, 2 heads, 1 KV
       head), 600 tokens */
    if (!e || !(e->dir = fx_grid_dir("qsweep-resources", 2, 64, 600))) {
        free(e);
        return -1;
    }
    snprintf(e->grid, sizeof e->grid, "%s/grid.yaml", e->dir);
    *state = e;
    return 0;
}

static int teardown(void **state) {
    env *e = *state;
    if (fx_grid_dir_release(e->dir)) return -1;
    free(e);
    return 0;
}

static qs_status load(env *e, const char *text, qc_grid **g, qs_error *err) {
    assert_int_equal(fx_write_text(e->grid, text), 0);
    return qc_grid_load(e->grid, NULL, 0, qsweep_probe(), g, err);
}

static void expand(env *e, const char *text, qc_grid **g, qc_job_list *l) {
    qs_error err = {0};
    if (load(e, text, g, &err)) fail_msg("%s", err.msg);
    if (qc_grid_expand(*g, l, &err)) fail_msg("%s", err.msg);
}

#define SYNTH_7B                                                                                   \
    "name: r\n"                                                                                    \
    "models: [{synthetic: llama2-7b, seed: 1}]\n"                                                  \
    "dataset: {tokens: toks.bin, ctx: 256, max_chunks: 1}\n"                                       \
    "sensitivity: {formats: [nvfp4], modes: [component], parts: [down]}\n"

/* The fixture checkpoint as the probe reads it:
 *   elements: embeddings 64*8 = 512 (tied: once), a block q 64 + k 32 + v 32 + o 64 + gate 128
 *   + up 128 + down 128 + norms 16 = 592, two blocks, final norm 8: 1704; F32: 6816 bytes;
 *   F32 linears are FP32-valued masters on the GPU: 4 device bytes an element. */
static void probe_reads_the_stored_bytes_and_the_master_bytes(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e,
                          "name: r\nmodels: [ckpt]\ndataset: {tokens: toks.bin, ctx: 16}\n"
                          "sensitivity: {formats: [nvfp4]}\n",
                          &g, &err),
                     QS_OK);
    const qc_model_facts *f = &g->models[0].facts;
    assert_int_equal(f->shape.dim, 8);
    assert_int_equal(f->shape.hidden_dim, 16);
    assert_int_equal(f->shape.n_kv_heads, 1);
    assert_true(f->shape.tied_embeddings);
    assert_int_equal(f->stored_bytes, 6816);
    assert_int_equal(f->master_bytes, 4);
    qc_grid_free(g);
}

/* Synthetic Llama-2-7B (BF16 masters, 2 bytes; common/device_memory.h) at ctx 256, one rank:
 *   linears 32 * 202 375 168 * 2 = 12 952 010 752, embed 32000*4096*4 = 524 288 000, lm_head
 *   32000*4096*2 = 262 144 000, norms 65*4096*4 + 256*128*4 = 1 196 032, run 256 * (3*4096 +
 *   128*128 + 2*11008 + 11008 + 32000 + 64) * 4 = 96 010 240, scratch 256*11008*7 + 64 MiB =
 *   86 835 200, reserve 1 GiB:
 *   baseline: 14 996 226 048 bytes -> 14 302 MiB;
 *   eval down NVFP4: + 811 597 824 packed = 15 807 823 872 -> 15 076 MiB. */
/* Bytes of the data section of a safetensors file: its size less the 8-byte little-endian
 * header length and the JSON header (the format's layout), read from the file itself. */
static int64_t safetensors_data_bytes(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char b[8];
    assert_int_equal(fread(b, 1, 8, f), 8);
    uint64_t header = 0;
    for (int i = 7; i >= 0; i--)
        header = header << 8 | b[i];
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    fclose(f);
    return (int64_t)size - 8 - (int64_t)header;
}

/* The committed checkpoints hold exactly the tensors the engine reads, so the probe's stored
 * bytes (from the tensor table) equal their files' data sections, one file or three shards. */
static void stored_bytes_of_committed_checkpoints_are_their_data_sections(void **state) {
    (void)state;
    const qc_grid_probe *probe = qsweep_probe();
    char dir[1024], file[1100];
    qc_model_facts f;
    qs_error err = {0};
    snprintf(dir, sizeof dir, "%s/tests/engine/data/llama3_gqa", QSWEEP_SOURCE_DIR);
    memset(&f, 0, sizeof f);
    if (probe->model(probe->user, dir, &f, &err)) fail_msg("%s", err.msg);
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    assert_int_equal(f.stored_bytes, safetensors_data_bytes(file));
    assert_true(f.stored_bytes > 0);
    snprintf(dir, sizeof dir, "%s/tests/engine/data/sharded", QSWEEP_SOURCE_DIR);
    memset(&f, 0, sizeof f);
    if (probe->model(probe->user, dir, &f, &err)) fail_msg("%s", err.msg);
    int64_t sum = 0;
    for (int i = 1; i <= 3; i++) {
        snprintf(file, sizeof file, "%s/model-%05d-of-00003.safetensors", dir, i);
        sum += safetensors_data_bytes(file);
    }
    assert_int_equal(f.stored_bytes, sum);
}

static void a_gpu_grid_sizes_each_job_from_its_model_format_and_ctx(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qc_job_list l = {0};
    expand(e, SYNTH_7B "resources: {gpu_count: 1}\n", &g, &l);
    assert_int_equal(g->models[0].facts.master_bytes, 2);
    assert_int_equal(g->models[0].facts.stored_bytes, 0);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.jobs[0].kind, "baseline");
    assert_int_equal(l.jobs[0].need.gpus, 1);
    assert_int_equal(l.jobs[0].need.gpu_mem_mb, 14302);
    assert_string_equal(l.jobs[1].kind, "eval");
    assert_int_equal(l.jobs[1].need.gpus, 1);
    assert_int_equal(l.jobs[1].need.gpu_mem_mb, 15076);
    assert_false(l.jobs[1].need.native_fp4);
    qc_job_list_free(&l);
    qc_grid_free(g);
}

static void a_grid_without_resources_needs_nothing(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qc_job_list l = {0};
    expand(e, SYNTH_7B, &g, &l);
    for (size_t i = 0; i < l.n; i++) {
        assert_int_equal(l.jobs[i].need.gpus, 0);
        assert_int_equal(l.jobs[i].need.gpu_mem_mb, 0);
        assert_false(l.jobs[i].need.native_fp4);
    }
    qc_job_list_free(&l);
    qc_grid_free(g);
}

/* tensor_parallel 2: per GPU linears 6 476 005 376 and packed 405 798 912 (halves), embed
 * 524 288 000, lm_head 131 072 000 (half the vocabulary), norms 1 196 032, run 256 * (3*4096 +
 * 64*128 + 11008 + 11008 + 32000 + 64) * 4 = 76 349 440, scratch 86 835 200, 1 GiB:
 * 8 775 286 784 bytes -> 8 369 MiB; gemm native_fp4 asks for Blackwell. */
static void tensor_parallel_and_native_fp4_reach_every_job(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qc_job_list l = {0};
    expand(e, SYNTH_7B "resources: {tensor_parallel: 2, gemm: native_fp4}\n", &g, &l);
    assert_int_equal(l.jobs[1].need.gpus, 2);
    assert_int_equal(l.jobs[1].need.gpu_mem_mb, 8369);
    assert_true(l.jobs[1].need.native_fp4);
    assert_true(l.jobs[0].need.native_fp4);
    qc_job_list_free(&l);
    qc_grid_free(g);
    /* emulated asks nothing of the worker and is recorded for the engine */
    expand(e, SYNTH_7B "resources: {gpu_count: 1, gemm: emulated}\n", &g, &l);
    assert_false(l.jobs[1].need.native_fp4);
    assert_non_null(strstr(l.jobs[1].spec, "\"gemm\":\"emulated\""));
    /* the explicit figure wins over the computed one */
    qc_job_list_free(&l);
    qc_grid_free(g);
    expand(e, SYNTH_7B "resources: {gpu_count: 1, gpu_memory_mib: 100000}\n", &g, &l);
    assert_int_equal(l.jobs[1].need.gpu_mem_mb, 100000);
    qc_job_list_free(&l);
    qc_grid_free(g);
}

static void bad_resources_are_refused_naming_the_place(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, SYNTH_7B "resources: {gpu_count: 1, tensor_parallel: 2}\n", &g, &err),
                     QS_EINVAL);
    assert_null(g);
    assert_non_null(strstr(err.msg, "grid.yaml:5:"));
    assert_non_null(strstr(err.msg, "tensor_parallel 2 and resources.gpu_count 1 differ"));
    assert_int_equal(load(e, SYNTH_7B "resources: {gemm: fast}\n", &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "resources.gemm: unknown 'fast'"));
    assert_int_equal(load(e, SYNTH_7B "resources: {gemm: emulated, native_fp4: true}\n", &g, &err),
                     QS_EINVAL);
    assert_non_null(strstr(err.msg, "emulated, but native_fp4 is true"));
    assert_int_equal(load(e, SYNTH_7B "resources: {tensor_parallel: 0}\n", &g, &err), QS_EFORMAT);
    assert_non_null(strstr(err.msg, "resources.tensor_parallel"));
}

/* A tensor-parallel degree the model's heads cannot be split over is refused at load, at
 * the key (file:line:column), with the engine's reason: Llama-2-7B has 32 heads, so 3 ranks
 * is refused and 4 accepted; gpu_count says the same as tensor_parallel. gpu_memory_mib
 * alone asks for one GPU of that memory. */
static void tensor_parallel_the_heads_cannot_split_is_refused_at_load(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qc_job_list l = {0};
    qs_error err = {0};
    assert_int_equal(load(e, SYNTH_7B "resources: {tensor_parallel: 3}\n", &g, &err), QS_EINVAL);
    assert_null(g);
    assert_non_null(strstr(err.msg, "grid.yaml:5:30:"));
    assert_non_null(strstr(err.msg, "n_heads 32 is not a multiple of the ranks"));
    assert_int_equal(load(e, SYNTH_7B "resources: {gpu_count: 6}\n", &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "grid.yaml:5:24:"));
    expand(e, SYNTH_7B "resources: {tensor_parallel: 4}\n", &g, &l);
    assert_int_equal(l.jobs[1].need.gpus, 4);
    qc_job_list_free(&l);
    qc_grid_free(g);
    expand(e, SYNTH_7B "resources: {gpu_memory_mib: 1}\n", &g, &l);
    for (size_t i = 0; i < l.n; i++) {
        assert_int_equal(l.jobs[i].need.gpus, 1);
        assert_int_equal(l.jobs[i].need.gpu_mem_mb, 1);
    }
    qc_job_list_free(&l);
    qc_grid_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(probe_reads_the_stored_bytes_and_the_master_bytes),
        cmocka_unit_test(stored_bytes_of_committed_checkpoints_are_their_data_sections),
        cmocka_unit_test(a_gpu_grid_sizes_each_job_from_its_model_format_and_ctx),
        cmocka_unit_test(a_grid_without_resources_needs_nothing),
        cmocka_unit_test(tensor_parallel_and_native_fp4_reach_every_job),
        cmocka_unit_test(bad_resources_are_refused_naming_the_place),
        cmocka_unit_test(tensor_parallel_the_heads_cannot_split_is_refused_at_load),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
