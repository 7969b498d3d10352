/* kinds_resources: what a job needs of a worker (kinds/resources.h), against figures computed
 * by hand from the formulas stated there, and the packed sizes against the numeric core's own
 * qk_packed_init.
 *
 * Llama-2-7B (meta-llama/Llama-2-7b-hf config.json: hidden 4096, intermediate 11008, 32 layers,
 * 32 heads, 32 KV heads, head_dim 128, vocabulary 32000, untied):
 *   elements = 2 * 32000*4096 (embeddings, lm_head)
 *            + 32 * (4*4096*4096 + 3*4096*11008 + 2*4096) + 4096   = 6 738 415 616,
 *   the parameter count Hugging Face reports for the model. BF16 masters: 13 476 831 232 bytes.
 *   down in NVFP4: [4096 x 11008], a row 11008/2 codes + 11008/16 scales = 6192 bytes,
 *   4096 rows = 25 362 432 bytes a block, 811 597 824 for the 32 blocks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "quant.h"
#include "resources.h"
#include "sensitivity.h"

static const qs_model_shape llama2_7b = {.dim = 4096,
                                         .hidden_dim = 11008,
                                         .n_layers = 32,
                                         .n_heads = 32,
                                         .n_kv_heads = 32,
                                         .head_dim = 128,
                                         .vocab_size = 32000};

static void llama2_7b_has_the_parameter_count_hugging_face_reports(void **state) {
    (void)state;
    assert_int_equal(qs_model_elements(&llama2_7b), 6738415616LL);
    int64_t rows, cols;
    assert_int_equal(qs_part_shape(&llama2_7b, 6, &rows, &cols), 4096LL * 11008);
    assert_int_equal(rows, 4096); /* down: [D x F] */
    assert_int_equal(cols, 11008);
    assert_int_equal(qs_part_shape(&llama2_7b, 4, &rows, &cols), 11008LL * 4096);
    assert_int_equal(rows, 11008); /* gate: [F x D] */
    assert_int_equal(qs_part_shape(&llama2_7b, 9, NULL, NULL), -1);
    /* tied: lm_head is held once */
    qs_model_shape tied = llama2_7b;
    tied.tied_embeddings = true;
    assert_int_equal(qs_model_elements(&tied), 6738415616LL - 32000LL * 4096);
}

/* Bits per weight of a [4096 x 4096] linear: bytes * 8 / 4096^2. */
static void packed_sizes_are_the_formats_bits_per_weight(void **state) {
    (void)state;
    const int64_t n = 4096LL * 4096;
    assert_int_equal(qs_packed_bytes("nvfp4", 0, 4096, 4096), n * 9 / 16);       /* 4.5 bits */
    assert_int_equal(qs_packed_bytes("nvfp4_2d", 0, 4096, 4096), n * 9 / 16);    /* 4.5 */
    assert_int_equal(qs_packed_bytes("mxfp4", 0, 4096, 4096), n * 17 / 32);      /* 4.25 */
    assert_int_equal(qs_packed_bytes("mxfp8_e4m3", 0, 4096, 4096), n * 33 / 32); /* 8.25 */
    assert_int_equal(qs_packed_bytes("mxfp6_e2m3", 0, 4096, 4096), n * 33 / 32); /* byte codes */
    assert_int_equal(qs_packed_bytes("fp8_e4m3", 0, 4096, 4096), n);             /* 8 */
    assert_int_equal(qs_packed_bytes("int8_channel", 0, 4096, 4096), 4096LL * (4096 + 4));
    assert_int_equal(qs_packed_bytes("int4_group", 0, 4096, 4096), n * 17 / 32); /* 4 + 32/128 */
    assert_int_equal(qs_packed_bytes("int4_group", 64, 4096, 4096), n * 9 / 16); /* 4 + 32/64 */
    assert_int_equal(qs_packed_bytes("bf16", 0, 4096, 4096), 0);
    assert_int_equal(qs_packed_bytes("fp5", 0, 4096, 4096), -1);
    /* an odd row: 17 codes take 9 bytes, two 16-blocks two scales */
    assert_int_equal(qs_packed_bytes("nvfp4", 0, 1, 17), 11);
}

/* The sizes qk_packed_init gives the same tensors, read from the struct it fills. */
static void packed_sizes_match_the_numeric_core(void **state) {
    (void)state;
    const char *names[] = {"nvfp4",      "nvfp4_2d",   "mxfp4",    "mxfp6_e2m3",   "mxfp6_e3m2",
                           "mxfp8_e4m3", "mxfp8_e5m2", "fp8_e4m3", "int8_channel", "int4_group"};
    const int64_t shapes[][2] = {{32, 256}, {48, 4096}, {5, 100}, {16, 33}};
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const qk_format *fmt = qk_format_by_name(names[f]);
            assert_non_null(fmt);
            qk_packed p;
            qs_error err = {0};
            int64_t rows = shapes[s][0], cols = shapes[s][1];
            assert_int_equal(qk_packed_init(&p, fmt, NULL, (size_t)rows, (size_t)cols, &err),
                             QS_OK);
            int64_t core = (int64_t)(p.rows * p.row_bytes);
            if (p.scales) core += (int64_t)(p.rows * p.blocks_per_row);
            if (p.scales_f32) core += (int64_t)(p.rows * p.blocks_per_row * sizeof(float));
            qk_packed_release(&p);
            if (qs_packed_bytes(names[f], 0, rows, cols) != core)
                fail_msg("%s [%lld x %lld]: %lld here, %lld in qk_packed_init", names[f],
                         (long long)rows, (long long)cols,
                         (long long)qs_packed_bytes(names[f], 0, rows, cols), (long long)core);
        }
}

/* A spec the way the grid writes it (kinds/sensitivity.h), with resources r (NULL: none). */
static json_t *eval_spec(const char *mode, const char *part, const char *resources) {
    char text[2048];
    snprintf(text, sizeof text,
             "{\"kind\":\"eval\",\"model\":{\"path\":\"synthetic:llama2-7b:1\",\"digest\":"
             "\"%064d\"},\"dataset\":{\"path\":\"/d\",\"digest\":\"%064d\",\"ctx\":256,"
             "\"max_chunks\":0},\"format\":\"nvfp4\",\"format_options\":{},"
             "\"quantize\":\"weights\",\"mode\":\"%s\",\"part\":\"%s\","
             "\"metrics\":[\"ppl\"],\"numerics_version\":\"%s\"%s%s}",
             0, 0, mode, part, QS_NUMERICS_VERSION, resources ? ",\"resources\":" : "",
             resources ? resources : "");
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) fail_msg("spec: %s", je.text);
    return j;
}

/* MiB the estimate asks for a synthetic (BF16) Llama-2-7B job at ctx 256 with these packed bytes
 * (common/device_memory.h, the one estimate; its parts are checked by hand in
 * tests/kinds/resources_grid_test.c and on the real shapes in tests/gpu/test_memory_estimate.c). */
static int64_t need_7b(int64_t packed_block, int64_t packed_other, int tp) {
    qs_mem_plan p = {.master_bytes = 2,
                     .packed_block_bytes = packed_block,
                     .packed_other_bytes = packed_other,
                     .ctx = 256,
                     .batch = 1,
                     .tp = tp};
    qs_mem_estimate e;
    qs_error err = {0};
    if (qs_mem_estimate_of(&llama2_7b, &p, &e, &err)) fail_msg("%s", err.msg);
    return qs_gpu_need_mib(&e);
}

/* The need is the estimate's total in MiB, rounded up. */
static void need_is_the_estimate_in_mib_rounded_up(void **state) {
    (void)state;
    qs_mem_estimate e = {.total = 0};
    assert_int_equal(qs_gpu_need_mib(&e), 0);
    e.total = 8ll << 20;
    assert_int_equal(qs_gpu_need_mib(&e), 8);
    e.total = (8ll << 20) + 1; /* a byte over rounds up */
    assert_int_equal(qs_gpu_need_mib(&e), 9);
}

/* NVFP4 down in every block (811 597 824 bytes packed): whole, the packed bytes add to the
 * baseline's; over two ranks, the block linears and their packed forms split in two. */
static void gpu_memory_of_a_7b_job_whole_and_over_two_ranks(void **state) {
    (void)state;
    assert_int_equal(need_7b(0, 0, 1), 14302); /* resources_grid_test.c, by hand */
    assert_int_equal(need_7b(811597824, 0, 1), 15076);
    assert_int_equal(need_7b(811597824, 0, 2), 8369);
    /* FP32-valued masters (an F32 checkpoint, a GGUF block type) take 4 bytes an element */
    qs_model_size m32 = {.shape = llama2_7b, .master_bytes = 4};
    qs_job_need n;
    qs_error err = {0};
    json_t *s = eval_spec("component", "down",
                          "{\"gpu_count\":1,\"gpu_memory_mib\":0,\"native_fp4\":false}");
    assert_int_equal(qs_job_resources("eval", s, &m32, &n, &err), QS_OK);
    /* the linears (12 952 010 752) and lm_head (262 144 000) twice over, and the FP32 master's
       16-bit copy of the largest weight (32000*4096*2) in the scratch */
    int64_t extra = 12952010752LL + 262144000LL + 32000LL * 4096 * 2;
    assert_int_equal(n.gpu_mem_mb, (15807823872LL + extra + (1 << 20) - 1) >> 20);
    json_decref(s);
}

static void default_resources_need_nothing_so_cpu_workers_run_the_job(void **state) {
    (void)state;
    qs_model_size m = {.shape = llama2_7b, .master_bytes = 2};
    qs_job_need n = {.gpus = 9};
    qs_error err = {0};
    json_t *s = eval_spec("component", "down", NULL);
    assert_int_equal(qs_job_resources("eval", s, &m, &n, &err), QS_OK);
    assert_int_equal(n.gpus, 0);
    assert_int_equal(n.gpu_mem_mb, 0);
    assert_false(n.native_fp4);
    json_decref(s);
    s = eval_spec("component", "down",
                  "{\"gpu_count\":0,\"gpu_memory_mib\":0,\"native_fp4\":false}");
    assert_int_equal(qs_job_resources("eval", s, &m, &n, &err), QS_OK);
    assert_int_equal(n.gpus, 0);
    assert_int_equal(n.gpu_mem_mb, 0);
    json_decref(s);
}

static void a_gpu_job_gets_its_memory_computed_unless_given(void **state) {
    (void)state;
    qs_model_size m = {.shape = llama2_7b, .master_bytes = 2};
    qs_job_need n;
    qs_error err = {0};
    json_t *s = eval_spec("component", "down",
                          "{\"gpu_count\":1,\"gpu_memory_mib\":0,\"native_fp4\":false}");
    assert_int_equal(qs_job_resources("eval", s, &m, &n, &err), QS_OK);
    assert_int_equal(n.gpus, 1);
    assert_int_equal(n.gpu_mem_mb, need_7b(811597824, 0, 1));
    json_decref(s);
    s = eval_spec("component", "down",
                  "{\"gpu_count\":2,\"gpu_memory_mib\":0,\"native_fp4\":true}");
    assert_int_equal(qs_job_resources("eval", s, &m, &n, &err), QS_OK);
    assert_int_equal(n.gpus, 2);
    assert_int_equal(n.gpu_mem_mb, need_7b(811597824, 0, 2));
    assert_true(n.native_fp4);
    json_decref(s);
    /* native FP4 alone asks for one GPU */
    s = eval_spec("component", "down",
                  "{\"gpu_count\":0,\"gpu_memory_mib\":0,\"native_fp4\":true}");
    assert_int_equal(qs_job_resources("eval", s, &m, &n, &err), QS_OK);
    assert_int_equal(n.gpus, 1);
    assert_int_equal(n.gpu_mem_mb, need_7b(811597824, 0, 1));
    json_decref(s);
    /* an explicit figure wins */
    s = eval_spec("component", "down",
                  "{\"gpu_count\":1,\"gpu_memory_mib\":40000,\"native_fp4\":false}");
    assert_int_equal(qs_job_resources("eval", s, &m, &n, &err), QS_OK);
    assert_int_equal(n.gpu_mem_mb, 40000);
    json_decref(s);
    /* a GPU job whose model size is unknown cannot be sized */
    s = eval_spec("component", "down",
                  "{\"gpu_count\":1,\"gpu_memory_mib\":0,\"native_fp4\":false}");
    assert_int_equal(qs_job_resources("eval", s, NULL, &n, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "needs its model's size"));
    json_decref(s);
}

/* Which linears each mode quantizes, in packed bytes of the 7B in NVFP4 (per block: q, k, v,
 * o 4096*(2048+256) = 9 437 184 each; gate, up 11008*2304 = 25 362 432 each; down 25 362 432;
 * a block 113 836 032), the block linears' split across ranks, lm_head's whole on each. */
static void each_mode_packs_the_linears_it_quantizes(void **state) {
    (void)state;
    qs_model_size m = {.shape = llama2_7b, .master_bytes = 2};
    const int64_t block = 113836032LL;
    struct {
        const char *mode, *part;
        int64_t packed;
    } cases[] = {
        {"block", "3", block},
        {"layer", "3.q", 9437184LL},
        {"cumulative", "3", 4 * block},
        {"leave_one_out_block", "3", 31 * block},
        {"leave_one_out_layer", "3.down", 32 * block - 25362432LL},
        {"leave_one_out", "down", 32 * (block - 25362432LL)},
        {"component", "q", 32 * 9437184LL},
        /* lm_head [32000 x 4096] gets a packed copy: 32000 * 2304 */
        {"component", "lm_head", 32000LL * 2304},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *s = eval_spec(cases[i].mode, cases[i].part,
                              "{\"gpu_count\":1,\"gpu_memory_mib\":0,\"native_fp4\":false}");
        qs_job_need n;
        qs_error err = {0};
        if (qs_job_resources("eval", s, &m, &n, &err)) fail_msg("%s: %s", cases[i].mode, err.msg);
        bool lm_head = !strcmp(cases[i].part, "lm_head");
        assert_int_equal(n.gpu_mem_mb,
                         lm_head ? need_7b(0, cases[i].packed, 1) : need_7b(cases[i].packed, 0, 1));
        json_decref(s);
    }
}

/* Mode policy packs each linear of its map in its own format: 3.q in NVFP4 (9 437 184),
 * 3.down in MXFP4 (4096 rows x 11008/2 + 11008/32 scales = 4096 * 5848 = 23 953 408), lm_head
 * in NVFP4 (32000 * 2304, its own copy). */
static void policy_mode_packs_each_linear_in_its_format(void **state) {
    (void)state;
    qs_model_size m = {.shape = llama2_7b, .master_bytes = 2};
    json_t *map = json_pack("{s:s, s:s, s:s}", "3.q", "nvfp4", "3.down", "mxfp4", "lm_head",
                            "nvfp4");
    char id[17];
    qs_error err = {0};
    assert_int_equal(qs_sensitivity_policy_id(map, id, &err), QS_OK);
    json_t *s = eval_spec("policy", id, "{\"gpu_count\":1,\"gpu_memory_mib\":0,\"native_fp4\":false}");
    json_object_set_new(s, "format", json_string("policy"));
    json_object_set_new(s, "policy", map);
    json_object_set_new(s, "format_options",
                        json_pack("{s:{s:s, s:s}, s:{s:s, s:s}}", "nvfp4", "clamp", "none",
                                  "rounding", "rne", "mxfp4", "rounding", "rne", "scale_rule",
                                  "rceil"));
    qs_job_need n;
    if (qs_job_resources("eval", s, &m, &n, &err)) fail_msg("%s", err.msg);
    assert_int_equal(qs_packed_bytes("mxfp4", 0, 4096, 11008), 4096LL * 5848);
    assert_int_equal(n.gpu_mem_mb, need_7b(9437184LL + 4096LL * 5848, 32000LL * 2304, 1));
    json_decref(s);
}

static void other_kinds_take_their_resources_as_given(void **state) {
    (void)state;
    qs_job_need n;
    qs_error err = {0};
    json_t *s = json_loads("{\"kind\":\"sleep\",\"resources\":{\"gpu_count\":2,"
                           "\"gpu_memory_mib\":1000,\"native_fp4\":true}}",
                           0, NULL);
    assert_int_equal(qs_job_resources("sleep", s, NULL, &n, &err), QS_OK);
    assert_int_equal(n.gpus, 2);
    assert_int_equal(n.gpu_mem_mb, 1000);
    assert_true(n.native_fp4);
    json_decref(s);
    s = json_loads("{\"kind\":\"sleep\"}", 0, NULL);
    assert_int_equal(qs_job_resources("sleep", s, NULL, &n, &err), QS_OK);
    assert_int_equal(n.gpus, 0);
    json_decref(s);
    s = json_loads("{\"kind\":\"sleep\",\"resources\":{\"gpu_count\":-1,"
                   "\"gpu_memory_mib\":0,\"native_fp4\":false}}",
                   0, NULL);
    assert_int_equal(qs_job_resources("sleep", s, NULL, &n, &err), QS_EINVAL);
    json_decref(s);
}

/* gpu_memory_mib without gpu_count asks for one GPU with that memory (it was a CPU job that
 * ignored it): for a kind taking its resources as given, and for an eval job, whose memory is
 * then the figure given rather than computed. */
static void gpu_memory_alone_asks_for_one_gpu(void **state) {
    (void)state;
    qs_job_need n;
    qs_error err = {0};
    json_t *s = json_loads("{\"kind\":\"sleep\",\"resources\":{\"gpu_count\":0,"
                           "\"gpu_memory_mib\":1,\"native_fp4\":false}}",
                           0, NULL);
    assert_int_equal(qs_job_resources("sleep", s, NULL, &n, &err), QS_OK);
    assert_int_equal(n.gpus, 1);
    assert_int_equal(n.gpu_mem_mb, 1);
    assert_false(n.native_fp4);
    json_decref(s);
    s = json_loads("{\"kind\":\"sleep\",\"resources\":{\"gpu_count\":0,"
                   "\"gpu_memory_mib\":0,\"native_fp4\":false}}",
                   0, NULL);
    assert_int_equal(qs_job_resources("sleep", s, NULL, &n, &err), QS_OK);
    assert_int_equal(n.gpus, 0);
    json_decref(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama2_7b_has_the_parameter_count_hugging_face_reports),
        cmocka_unit_test(packed_sizes_are_the_formats_bits_per_weight),
        cmocka_unit_test(packed_sizes_match_the_numeric_core),
        cmocka_unit_test(need_is_the_estimate_in_mib_rounded_up),
        cmocka_unit_test(gpu_memory_of_a_7b_job_whole_and_over_two_ranks),
        cmocka_unit_test(default_resources_need_nothing_so_cpu_workers_run_the_job),
        cmocka_unit_test(a_gpu_job_gets_its_memory_computed_unless_given),
        cmocka_unit_test(each_mode_packs_the_linears_it_quantizes),
        cmocka_unit_test(policy_mode_packs_each_linear_in_its_format),
        cmocka_unit_test(other_kinds_take_their_resources_as_given),
        cmocka_unit_test(gpu_memory_alone_asks_for_one_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
