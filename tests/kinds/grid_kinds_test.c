/* Grid kinds (coordinator/grid/grid_kind.h) and what the sensitivity kind offers:
 * job keys and specs of an existing grid unchanged, leave-one-out by block and by layer,
 * lm_head and embeddings as parts with tied embeddings recorded, the kind registry's errors,
 * and the generic reader's typed values (config.h) that new kinds use. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "config.h"
#include "fixtures.h"
#include "grid_kind.h"
#include "grid.h"
#include "probe.h"
#include "sensitivity.h"

#define N_LAYERS 3
#define VOCAB 64

typedef struct env {
    char *dir;
    char grid[512];
} env;

static int setup(void **state) {
    env *e = calloc(1, sizeof *e);
    /* the fixture checkpoint ties its embeddings (fixtures.h) */
    if (!e || !(e->dir = fx_grid_dir("qsweep-gridkinds", N_LAYERS, VOCAB, 300))) {
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

#define HEAD                                                                                       \
    "name: t\n"                                                                                    \
    "models: [ckpt]\n"                                                                             \
    "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\n"

/* Loads and expands text; fails the test on error. */
static void expand(env *e, const char *text, qc_grid **g, qc_job_list *l) {
    qs_error err = {0};
    if (load(e, text, g, &err)) fail_msg("%s", err.msg);
    if (qc_grid_expand(*g, l, &err)) fail_msg("%s", err.msg);
}

static const char *field(const qc_job *j, const char *key, char *buf, size_t cap) {
    json_t *s = json_loads(j->spec, 0, NULL);
    json_t *v = json_object_get(s, key);
    if (json_is_string(v))
        snprintf(buf, cap, "%s", json_string_value(v));
    else if (v) {
        char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(buf, cap, "%s", t);
        free(t);
    } else
        snprintf(buf, cap, "(absent)");
    json_decref(s);
    return buf;
}

/* Keys and canonical specs of a grid over committed checkpoints, a committed token file and
 * synthetic shapes, as the pre-kinds build (commit 952f45b, `qsweep submit --dry-run --sample
 * 1000000`) gave them at numerics version 1: SHA-256 of the 4268 keys, one per line, and of
 * the specs without their paths, one per line. Each spec is restated at version 1 and keyed
 * by qs_spec_key; the grid's own specs carry QS_NUMERICS_VERSION, and their keys are those of
 * their specs. */
static void test_keys_and_specs_of_an_existing_grid_are_unchanged(void **state) {
    env *e = *state;
    char text[4096];
    snprintf(text, sizeof text,
             "name: keys\n"
             "kind: sensitivity\n"
             "models:\n"
             "  - %s/tests/engine/data/llama3_gqa\n"
             "  - %s/tests/engine/data/llama32_tied\n"
             "  - {synthetic: llama2-7b, seed: 1}\n"
             "  - {synthetic: llama3.2-1b}\n"
             "dataset: {tokens: %s/experiments/data/gpl3.bytes.tokens, ctx: 64, max_chunks: 8}\n"
             "sensitivity:\n"
             "  formats: [nvfp4, {name: mxfp4, options: {scale_rule: floor}}, int4_group, bf16]\n"
             "  quantize: [weights, w4a4]\n"
             "  modes: [component, block, layer, leave_one_out, cumulative]\n"
             "  metrics: [kl, ppl]\n",
             QSWEEP_SOURCE_DIR, QSWEEP_SOURCE_DIR, QSWEEP_SOURCE_DIR);
    qc_grid *g = NULL;
    qc_job_list l = {0};
    expand(e, text, &g, &l);
    assert_int_equal(l.n, 4268);
    crypto_hash_sha256_state keys, specs;
    crypto_hash_sha256_init(&keys);
    crypto_hash_sha256_init(&specs);
    for (size_t i = 0; i < l.n; i++) {
        json_t *s = json_loads(l.jobs[i].spec, 0, NULL);
        assert_non_null(s);
        assert_string_equal(json_string_value(json_object_get(s, "numerics_version")),
                            QS_NUMERICS_VERSION);
        char own[65], v1[65];
        qs_error err = {0};
        assert_int_equal(qs_spec_key(s, own, &err), QS_OK);
        assert_string_equal(own, l.jobs[i].key);
        json_object_set_new(s, "numerics_version", json_string("1"));
        assert_int_equal(qs_spec_key(s, v1, &err), QS_OK);
        crypto_hash_sha256_update(&keys, (const unsigned char *)v1, 64);
        crypto_hash_sha256_update(&keys, (const unsigned char *)"\n", 1);
        if (i == 1) /* test_spec.c's EVAL_KEY */
            assert_string_equal(v1,
                                "17f40fb202416f0b03c604841176a4aa5ca37e3c28295abc90e837f24beacebe");
        json_object_del(json_object_get(s, "model"), "path");
        json_object_del(json_object_get(s, "dataset"), "path");
        char *c = json_dumps(s, JSON_SORT_KEYS | JSON_COMPACT);
        crypto_hash_sha256_update(&specs, (const unsigned char *)c, strlen(c));
        crypto_hash_sha256_update(&specs, (const unsigned char *)"\n", 1);
        free(c);
        json_decref(s);
    }
    unsigned char hk[32], hs[32];
    char hex_k[65], hex_s[65];
    crypto_hash_sha256_final(&keys, hk);
    crypto_hash_sha256_final(&specs, hs);
    sodium_bin2hex(hex_k, sizeof hex_k, hk, 32);
    sodium_bin2hex(hex_s, sizeof hex_s, hs, 32);
    assert_string_equal(hex_k, "38a2357bad60d65399a339668f9cba73fa0cc1d2d5fe6eaaefb15c547948f3fd");
    assert_string_equal(hex_s, "6e872cb273b136357c51a101fa50472c3a950747f86eb1897f097c71f54a19e1");
    /* the affinity key the pre-kinds submit built from the model's digest */
    assert_string_equal(l.jobs[1].model_key,
                        "model:eca1f7e6930602478a3e12bacc8deab4e52c8053a0b75014e38b5ec8679bd05e");
    assert_string_equal(l.jobs[l.n - 1].model_key,
                        "model:"
                        "9f19eb23fc84fdbddc5f3f8b0ee52a683921b4c6e1cfd67e3b522eae5c4c34a9");
    qc_job_list_free(&l);
    qc_grid_free(g);
}

/* leave_one_out_block: one job per block; leave_one_out_layer: one per (block, kind). */
static void test_leave_one_out_by_block_and_by_layer_expand(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qc_job_list l = {0};
    expand(e,
           HEAD "sensitivity: {formats: [nvfp4], modes: [leave_one_out_block, "
                "leave_one_out_layer, leave_one_out_component]}\n",
           &g, &l);
    assert_int_equal(l.n, 1 + N_LAYERS + 7 * N_LAYERS + 7);
    char b[256];
    assert_string_equal(field(&l.jobs[1], "mode", b, sizeof b), "leave_one_out_block");
    assert_string_equal(field(&l.jobs[1], "part", b, sizeof b), "0");
    assert_string_equal(field(&l.jobs[1 + N_LAYERS], "mode", b, sizeof b), "leave_one_out_layer");
    assert_string_equal(field(&l.jobs[1 + N_LAYERS], "part", b, sizeof b), "0.q");
    assert_string_equal(field(&l.jobs[N_LAYERS + 7 * N_LAYERS], "part", b, sizeof b), "2.down");
    /* the component form keeps its stored name */
    assert_string_equal(field(&l.jobs[l.n - 1], "mode", b, sizeof b), "leave_one_out");
    assert_string_equal(field(&l.jobs[l.n - 1], "leave_one_out_of", b, sizeof b), "(absent)");
    assert_non_null(strstr(l.jobs[1].label, "leave_one_out_block 0"));
    qc_job_list_free(&l);
    qc_grid_free(g);
}

/* sensitivity.fuse: every eval spec names the fused groups, sorted ("gate_up", "qkv"), so a
 * fused job has another key than the unfused one; the baseline is shared; an empty list is
 * the default; a bad or repeated name is refused at its location. */
static void test_fuse_is_recorded_in_every_eval_spec(void **state) {
    env *e = *state;
    qc_grid *g = NULL, *g2 = NULL, *g3 = NULL;
    qc_job_list l = {0}, l2 = {0}, l3 = {0};
    expand(e, HEAD "sensitivity: {formats: [nvfp4], parts: [q, o], fuse: [qkv, gate_up]}\n", &g,
           &l);
    expand(e, HEAD "sensitivity: {formats: [nvfp4], parts: [q, o]}\n", &g2, &l2);
    expand(e, HEAD "sensitivity: {formats: [nvfp4], parts: [q, o], fuse: []}\n", &g3, &l3);
    assert_int_equal(l.n, 3);
    assert_int_equal(l2.n, 3);
    char b[256];
    assert_string_equal(field(&l.jobs[0], "fuse", b, sizeof b), "(absent)");
    assert_string_equal(l.jobs[0].key, l2.jobs[0].key); /* one baseline */
    for (size_t i = 1; i < 3; i++) {
        assert_string_equal(field(&l.jobs[i], "fuse", b, sizeof b), "[\"gate_up\",\"qkv\"]");
        assert_string_equal(field(&l2.jobs[i], "fuse", b, sizeof b), "(absent)");
        assert_string_not_equal(l.jobs[i].key, l2.jobs[i].key);
        assert_string_equal(l3.jobs[i].key, l2.jobs[i].key);
        assert_non_null(strstr(l.jobs[i].label, "fuse gate_up+qkv"));
    }
    qc_job_list_free(&l);
    qc_job_list_free(&l2);
    qc_job_list_free(&l3);
    qc_grid_free(g);
    qc_grid_free(g2);
    qc_grid_free(g3);
    qs_error err = {0};
    qc_grid *bad = NULL;
    char prefix[600];
    assert_int_equal(
        load(e, HEAD "sensitivity:\n  formats: [nvfp4]\n  fuse: [qkv, qk]\n", &bad, &err),
        QS_EINVAL);
    snprintf(prefix, sizeof prefix, "%s:6:15: unknown fused group 'qk' (expected qkv or gate_up)",
             e->grid);
    if (!strstr(err.msg, prefix)) fail_msg("%s", err.msg);
    assert_int_equal(
        load(e, HEAD "sensitivity:\n  formats: [nvfp4]\n  fuse: [qkv, qkv]\n", &bad, &err),
        QS_EINVAL);
    snprintf(prefix, sizeof prefix, "%s:6:15: fused group 'qkv' is listed twice", e->grid);
    assert_non_null(strstr(err.msg, prefix));
    assert_null(bad);
}

/* sensitivity.sqnr_rows: every eval spec of the grid carries the probe's sample (another key
 * than the grid without it; the baseline is shared); a count not below ctx or a grid without
 * metric sqnr is refused at the key. */
static void test_sqnr_rows_is_recorded_in_every_eval_spec(void **state) {
    env *e = *state;
    qc_grid *g = NULL, *g2 = NULL;
    qc_job_list l = {0}, l2 = {0};
    expand(e, HEAD "sensitivity: {formats: [nvfp4], parts: [q, o], sqnr_rows: 4}\n", &g, &l);
    expand(e, HEAD "sensitivity: {formats: [nvfp4], parts: [q, o]}\n", &g2, &l2);
    assert_int_equal(l.n, 3);
    char b[256];
    assert_string_equal(field(&l.jobs[0], "sqnr_rows", b, sizeof b), "(absent)");
    assert_string_equal(l.jobs[0].key, l2.jobs[0].key);
    for (size_t i = 1; i < 3; i++) {
        assert_string_equal(field(&l.jobs[i], "sqnr_rows", b, sizeof b), "4");
        assert_string_equal(field(&l2.jobs[i], "sqnr_rows", b, sizeof b), "(absent)");
        assert_string_not_equal(l.jobs[i].key, l2.jobs[i].key);
    }
    qc_job_list_free(&l);
    qc_job_list_free(&l2);
    qc_grid_free(g);
    qc_grid_free(g2);
    qs_error err = {0};
    qc_grid *bad = NULL;
    assert_int_equal(load(e, HEAD "sensitivity:\n  formats: [nvfp4]\n  sqnr_rows: 16\n", &bad, &err),
                     QS_EINVAL);
    if (!strstr(err.msg, ":6:14: sqnr_rows 16 is not fewer than the ctx 16")) fail_msg("%s", err.msg);
    assert_int_equal(load(e,
                          HEAD "sensitivity:\n  formats: [nvfp4]\n  metrics: [ppl]\n"
                               "  sqnr_rows: 4\n",
                          &bad, &err),
                     QS_EINVAL);
    if (!strstr(err.msg, ":7:14: 'sqnr_rows' samples the SQNR probe")) fail_msg("%s", err.msg);
    assert_null(bad);
}

/* lm_head and embeddings as parts; the fixture model is tied, so the spec records that the
 * head (or the embedding table) is quantized as a copy of its own. */
static void test_lm_head_and_embeddings_parts_record_tied_handling(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qc_job_list l = {0};
    expand(e,
           HEAD "sensitivity: {formats: [nvfp4], modes: [component, leave_one_out], "
                "parts: [down, lm_head, embeddings]}\n",
           &g, &l);
    assert_int_equal(l.n, 1 + 3 + 3);
    char b[256];
    assert_string_equal(field(&l.jobs[1], "part", b, sizeof b), "down");
    assert_string_equal(field(&l.jobs[1], "tied_embeddings", b, sizeof b), "(absent)");
    assert_string_equal(field(&l.jobs[2], "part", b, sizeof b), "lm_head");
    assert_string_equal(field(&l.jobs[2], "tied_embeddings", b, sizeof b), "head_copy_only");
    assert_string_equal(field(&l.jobs[3], "tied_embeddings", b, sizeof b), "embeddings_copy_only");
    /* leave_one_out over the listed parts: leaving lm_head out quantizes down and embeddings */
    assert_string_equal(field(&l.jobs[5], "mode", b, sizeof b), "leave_one_out");
    assert_string_equal(field(&l.jobs[5], "part", b, sizeof b), "lm_head");
    assert_string_equal(field(&l.jobs[5], "leave_one_out_of", b, sizeof b),
                        "[\"down\",\"lm_head\",\"embeddings\"]");
    assert_string_equal(field(&l.jobs[5], "tied_embeddings", b, sizeof b), "embeddings_copy_only");
    assert_string_equal(field(&l.jobs[4], "tied_embeddings", b, sizeof b), "both_copies");
    for (size_t i = 1; i < l.n; i++)
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(l.jobs[i].key, l.jobs[j].key);
    qc_job_list_free(&l);
    qc_grid_free(g);
}

static void test_bad_parts_are_refused_at_their_location(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qs_error err = {0};
    char prefix[600];
    assert_int_equal(load(e, HEAD "sensitivity:\n  formats: [nvfp4]\n  parts: [q, wq]\n", &g, &err),
                     QS_EINVAL);
    snprintf(prefix, sizeof prefix, "%s:6:14: unknown part 'wq'", e->grid);
    assert_non_null(strstr(err.msg, prefix));
    assert_int_equal(load(e, HEAD "sensitivity:\n  formats: [nvfp4]\n  parts: [q, q]\n", &g, &err),
                     QS_EINVAL);
    assert_non_null(strstr(err.msg, "part 'q' is listed twice"));
    assert_int_equal(load(e,
                          HEAD "sensitivity:\n  formats: [nvfp4]\n  modes: [block]\n"
                               "  parts: [lm_head]\n",
                          &g, &err),
                     QS_EINVAL);
    snprintf(prefix, sizeof prefix, "%s:7:10: 'parts' applies to modes component and", e->grid);
    assert_non_null(strstr(err.msg, prefix));
    assert_null(g);
}

/* Mode policy: one eval job per model and quantize, its map in the spec without
 * the bf16 linears, each format's options (from `formats` when listed there, else the
 * defaults), the map's id as the part; the same map with its bf16 linears listed is the same
 * job. */
static void test_policy_mode_is_one_job_with_its_map(void **state) {
    env *e = *state;
    qc_grid *g = NULL, *g2 = NULL;
    qc_job_list l = {0}, l2 = {0};
    expand(e,
           HEAD "sensitivity:\n  formats: [{name: mxfp4, options: {rounding: rz}}]\n"
                "  quantize: [weights, w4a4]\n  modes: [policy]\n  metrics: [kl]\n"
                "  policy:\n    \"0.q\": nvfp4\n    \"2.down\": mxfp4\n    \"1.up\": bf16\n"
                "    lm_head: nvfp4\n",
           &g, &l);
    assert_int_equal(l.n, 3); /* the baseline, then weights and weights+activations */
    char buf[1024];
    assert_string_equal(field(&l.jobs[1], "mode", buf, sizeof buf), "policy");
    assert_string_equal(field(&l.jobs[1], "format", buf, sizeof buf), "policy");
    assert_string_equal(field(&l.jobs[1], "policy", buf, sizeof buf),
                        "{\"0.q\":\"nvfp4\",\"2.down\":\"mxfp4\",\"lm_head\":\"nvfp4\"}");
    assert_string_equal(field(&l.jobs[1], "format_options", buf, sizeof buf),
                        "{\"mxfp4\":{\"rounding\":\"rz\",\"scale_rule\":\"rceil\"},"
                        "\"nvfp4\":{\"clamp\":\"none\",\"rounding\":\"rne\"}}");
    /* the fixture ties its embeddings: lm_head is the head's own copy */
    assert_string_equal(field(&l.jobs[1], "tied_embeddings", buf, sizeof buf), "head_copy_only");
    json_t *map = json_pack("{s:s, s:s, s:s}", "0.q", "nvfp4", "2.down", "mxfp4", "lm_head",
                            "nvfp4");
    char id[17];
    qs_error err = {0};
    assert_int_equal(qs_sensitivity_policy_id(map, id, &err), QS_OK);
    json_decref(map);
    assert_string_equal(field(&l.jobs[1], "part", buf, sizeof buf), id);
    assert_string_equal(field(&l.jobs[2], "quantize", buf, sizeof buf), "weights+activations");
    /* without the bf16 entry: the same jobs */
    expand(e,
           HEAD "sensitivity:\n  formats: [{name: mxfp4, options: {rounding: rz}}]\n"
                "  quantize: [weights, w4a4]\n  modes: [policy]\n  metrics: [kl]\n"
                "  policy: {\"0.q\": nvfp4, \"2.down\": mxfp4, lm_head: nvfp4}\n",
           &g2, &l2);
    assert_int_equal(l2.n, 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(l.jobs[i].key, l2.jobs[i].key);
    qc_job_list_free(&l);
    qc_job_list_free(&l2);
    qc_grid_free(g);
    qc_grid_free(g2);
    /* a grid of mode policy needs no formats; with others it still does */
    expand(e, HEAD "sensitivity:\n  modes: [policy]\n  policy: {\"1.v\": mxfp4}\n", &g, &l);
    assert_int_equal(l.n, 2);
    qc_job_list_free(&l);
    qc_grid_free(g);
}

/* Bad maps are refused at the key or value they name (file:line:column; a quoted key's column
 * is that of its first character inside the quotes). */
static void test_bad_policy_entries_are_refused_at_their_location(void **state) {
    env *e = *state;
    static const struct {
        const char *policy, *want;
        qs_status st;
    } cases[] = {
        {"    \"3.q\": nvfp4\n", ":7:6: policy linear '3.q': model ckpt has blocks 0..2", QS_EINVAL},
        {"    \"1.qq\": nvfp4\n", ":7:6: unknown linear '1.qq' in policy", QS_EINVAL},
        {"    \"01.q\": nvfp4\n", ":7:6: unknown linear '01.q' in policy", QS_EINVAL},
        {"    \"1.q_proj\": nvfp4\n", ":7:6: unknown linear '1.q_proj' in policy", QS_EINVAL},
        {"    \"1.q\": nvfp5\n", ":7:12: policy linear '1.q': unknown format 'nvfp5'", QS_EINVAL},
        {"    \"1.q\": [nvfp4]\n", ":7:12: policy linear '1.q': unknown format '(not a scalar)'",
         QS_EINVAL},
        {"    \"1.q\": bf16\n    \"2.q\": bf16\n", ":7:5: every linear of the policy is bf16",
         QS_EINVAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024], want[700];
        snprintf(text, sizeof text,
                 HEAD "sensitivity:\n  modes: [policy]\n  policy:\n%s", cases[i].policy);
        qc_grid *g = NULL;
        qs_error err = {0};
        assert_int_equal(load(e, text, &g, &err), cases[i].st);
        snprintf(want, sizeof want, "%s%s", e->grid, cases[i].want);
        if (!strstr(err.msg, want)) fail_msg("case %zu: no '%s' in '%s'", i, want, err.msg);
        assert_null(g);
    }
    /* policy without the mode, and the mode without a policy */
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(
        load(e, HEAD "sensitivity:\n  formats: [nvfp4]\n  policy: {\"1.q\": nvfp4}\n", &g, &err),
        QS_EINVAL);
    assert_non_null(strstr(err.msg, "'policy' applies to mode policy"));
    assert_int_equal(load(e, HEAD "sensitivity:\n  modes: [policy]\n", &g, &err), QS_EFORMAT);
    assert_non_null(strstr(err.msg, "mode policy needs a 'policy' mapping"));
    assert_int_equal(load(e, HEAD "sensitivity:\n  modes: [policy, block]\n  policy: {\"1.q\": "
                                  "nvfp4}\n",
                          &g, &err),
                     QS_EFORMAT);
    assert_non_null(strstr(err.msg, "expected a 'formats' list"));
}

/* compare_to: the model's reference gets the baseline (the spec any grid listing the reference
 * writes), the model one compare job (mode policy, the empty map, reference_model) and nothing
 * else; the reference's path is not in the key; bad references are refused at the key. */
static void test_compare_to_is_one_compare_job_on_the_references_baseline(void **state) {
    env *e = *state;
    char dir[600], text[2048], buf[1024];
    snprintf(dir, sizeof dir, "%s/parent", e->dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(fx_write_checkpoint(dir, N_LAYERS, VOCAB, 77), 0);
    qc_grid *g = NULL, *g2 = NULL;
    qc_job_list l = {0}, l2 = {0};
    snprintf(text, sizeof text,
             "name: t\nmodels: [{path: ckpt, compare_to: parent}]\n"
             "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\n");
    expand(e, text, &g, &l); /* no sensitivity section: every metric */
    assert_int_equal(l.n, 2);
    assert_string_equal(l.jobs[0].kind, "baseline");
    assert_non_null(strstr(l.jobs[0].spec, "/parent\""));
    assert_string_equal(field(&l.jobs[1], "mode", buf, sizeof buf), "policy");
    assert_string_equal(field(&l.jobs[1], "policy", buf, sizeof buf), "{}");
    assert_string_equal(field(&l.jobs[1], "metrics", buf, sizeof buf),
                        "[\"kl\",\"ppl\",\"sqnr\",\"top1\"]");
    assert_non_null(strstr(field(&l.jobs[1], "reference_model", buf, sizeof buf), "/parent\""));
    assert_int_equal(l.jobs[1].n_deps, 1);
    assert_int_equal(l.jobs[1].deps[0], 0);
    /* the parent's baseline is the one a grid of the parent alone has */
    expand(e,
           "name: t\nmodels: [parent]\ndataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\n"
           "sensitivity: {formats: [nvfp4]}\n",
           &g2, &l2);
    assert_string_equal(l.jobs[0].key, l2.jobs[0].key);
    /* the spec decodes and re-encodes to its own text, and its key leaves out the path */
    json_t *spec = json_loads(l.jobs[1].spec, 0, NULL);
    qs_sensitivity_spec s;
    qs_error err = {0};
    assert_int_equal(qs_sensitivity_decode(spec, &s, &err), QS_OK);
    json_t *again = NULL;
    assert_int_equal(qs_sensitivity_encode(&s, &again, &err), QS_OK);
    assert_true(json_equal(spec, again));
    char k1[65], k2[65];
    assert_int_equal(qs_spec_key(spec, k1, &err), QS_OK);
    json_object_set_new(json_object_get(spec, "reference_model"), "path",
                        json_string("/elsewhere/parent"));
    assert_int_equal(qs_spec_key(spec, k2, &err), QS_OK);
    assert_string_equal(k1, k2);
    /* a compare job that quantizes: refused by the decoder */
    json_object_set_new(spec, "quantize", json_string("weights+activations"));
    qs_sensitivity_clear(&s);
    assert_int_equal(qs_sensitivity_decode(spec, &s, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "reference_model: a compare job has mode policy"));
    json_decref(spec);
    json_decref(again);
    qc_job_list_free(&l);
    qc_job_list_free(&l2);
    qc_grid_free(g);
    qc_grid_free(g2);
    static const struct {
        const char *model, *want;
    } bad[] = {
        {"{path: ckpt, compare_to: ckpt}", "is the model ckpt itself"},
        {"{path: ckpt, compare_to: nowhere}", ":2:35: reference model "},
        {"{synthetic: llama3.2-1b, compare_to: parent}", "must be a checkpoint"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text,
                 "name: t\nmodels: [%s]\ndataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\n",
                 bad[i].model);
        g = NULL;
        assert_int_not_equal(load(e, text, &g, &err), QS_OK);
        if (!strstr(err.msg, bad[i].want))
            fail_msg("case %zu: no '%s' in '%s'", i, bad[i].want, err.msg);
        assert_null(g);
    }
}

/* A model's digest key (qsweep plan writes it into a plan's grid): the file must still be
 * that model, else the grid is refused at the key; malformed, or on a synthetic model, refused. */
static void test_a_model_digest_must_match_its_file(void **state) {
    env *e = *state;
    char text[1024];
    qc_grid *g = NULL;
    qs_error err = {0};
    if (load(e, HEAD "sensitivity: {formats: [nvfp4]}\n", &g, &err)) fail_msg("%s", err.msg);
    char digest[65];
    snprintf(digest, sizeof digest, "%s", g->models[0].facts.digest);
    qc_grid_free(g);
    snprintf(text, sizeof text,
             "name: t\nmodels: [{path: ckpt, digest: %s}]\n"
             "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\nsensitivity: {formats: [nvfp4]}\n",
             digest);
    g = NULL;
    if (load(e, text, &g, &err)) fail_msg("%s", err.msg);
    qc_grid_free(g);
    char other[65];
    snprintf(other, sizeof other, "%s", digest);
    other[0] = other[0] == 'a' ? 'b' : 'a';
    static const char *const want[] = {":2:31: model ", "expected the 64 hex digits",
                                       "'digest' applies to model files only"};
    const char *models[3] = {other, "abc", NULL};
    for (int i = 0; i < 3; i++) {
        if (i < 2)
            snprintf(text, sizeof text,
                     "name: t\nmodels: [{path: ckpt, digest: %s}]\n"
                     "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\nsensitivity: {formats: [nvfp4]}\n",
                     models[i]);
        else
            snprintf(text, sizeof text,
                     "name: t\nmodels: [{synthetic: llama3.2-1b, digest: %s}]\n"
                     "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\nsensitivity: {formats: [nvfp4]}\n",
                     digest);
        g = NULL;
        assert_int_not_equal(load(e, text, &g, &err), QS_OK);
        if (!strstr(err.msg, want[i])) fail_msg("case %d: no '%s' in '%s'", i, want[i], err.msg);
        assert_null(g);
    }
    assert_non_null(strstr(err.msg, "digest"));
}

static void test_unknown_kind_names_the_registered_kinds(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, "name: t\nkind: diagonal\n", &g, &err), QS_EINVAL);
    char want[700];
    snprintf(want, sizeof want, "%s:2:7: unknown kind 'diagonal' (expected sensitivity", e->grid);
    assert_non_null(strstr(err.msg, want));
    /* the kind's keys are checked with the common ones, listing both */
    assert_int_equal(load(e, HEAD "sensitivity: {formats: [nvfp4]}\ntraining: {}\n", &g, &err),
                     QS_EINVAL);
    assert_non_null(strstr(err.msg, "unknown key 'training' in the grid (expected one of: name, "
                                    "description, kind, models, dataset, sensitivity, priority, "
                                    "max_attempts, resources, numerics)"));
}

/* A spec its job kind would refuse fails at expansion, naming the job; so does a kind the
 * registry does not know. */
static void test_job_list_refuses_specs_their_kind_refuses(void **state) {
    (void)state;
    qc_job_list l = {0};
    qs_error err = {0};
    json_t *bad = json_pack("{s:s, s:s}", "kind", "eval", "mode", "diagonal");
    assert_int_equal(qc_job_list_add(&l, bad, "eval", -1, 0, 0, "m f w diagonal q", NULL, &err),
                     QS_EINVAL);
    assert_non_null(strstr(err.msg, "job 1 (m f w diagonal q): job spec:"));
    json_t *other = json_pack("{s:s}", "kind", "sleep");
    assert_int_equal(qc_job_list_add(&l, other, "sleep", -1, 0, -1, "s", NULL, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "job kind 'sleep' is not registered"));
    assert_int_equal(l.n, 0);
    qc_job_list_free(&l);
}

/* `resources` is recorded in every spec and changes no key. */
static void test_resources_are_recorded_but_not_keyed(void **state) {
    env *e = *state;
    qc_grid *g = NULL, *h = NULL;
    qc_job_list l = {0}, m = {0};
    expand(e, HEAD "sensitivity: {formats: [nvfp4]}\n", &g, &l);
    expand(e,
           HEAD "sensitivity: {formats: [nvfp4]}\n"
                "resources: {gpu_count: 1, gpu_memory_mib: 81920, native_fp4: true}\n",
           &h, &m);
    assert_int_equal(l.n, m.n);
    char b[256];
    for (size_t i = 0; i < l.n; i++) {
        assert_string_equal(l.jobs[i].key, m.jobs[i].key);
        assert_string_equal(field(&l.jobs[i], "resources", b, sizeof b), "(absent)");
        assert_string_equal(field(&m.jobs[i], "resources", b, sizeof b),
                            "{\"gpu_count\":1,\"gpu_memory_mib\":81920,\"native_fp4\":true}");
    }
    qc_job_list_free(&l);
    qc_job_list_free(&m);
    qc_grid_free(g);
    qc_grid_free(h);
    qs_error err = {0};
    assert_int_equal(
        load(e, HEAD "sensitivity: {formats: [nvfp4]}\nresources: {gpus: 2}\n", &g, &err),
        QS_EINVAL);
    assert_non_null(strstr(err.msg, ":5:13: unknown key 'gpus' in resources"));
}

/* A grid's `numerics` is recorded in every spec and keyed, except `any`, which keeps the keys
 * of a grid without it; a value that names no path is refused at its location. */
static void test_numerics_is_recorded_and_keyed_unless_any(void **state) {
    env *e = *state;
    qc_grid *g = NULL, *h = NULL, *k = NULL;
    qc_job_list l = {0}, m = {0}, n = {0};
    expand(e, HEAD "sensitivity: {formats: [nvfp4]}\n", &g, &l);
    expand(e, HEAD "sensitivity: {formats: [nvfp4]}\nnumerics: cpu\n", &h, &m);
    expand(e, HEAD "sensitivity: {formats: [nvfp4]}\nnumerics: any\n", &k, &n);
    assert_int_equal(l.n, m.n);
    assert_int_equal(l.n, n.n);
    char b[256];
    for (size_t i = 0; i < l.n; i++) {
        assert_string_equal(field(&l.jobs[i], "numerics", b, sizeof b), "(absent)");
        assert_string_equal(field(&m.jobs[i], "numerics", b, sizeof b), "cpu");
        assert_string_equal(field(&n.jobs[i], "numerics", b, sizeof b), "any");
        assert_string_not_equal(l.jobs[i].key, m.jobs[i].key);
        assert_string_equal(l.jobs[i].key, n.jobs[i].key);
        char again[65];
        qs_error err = {0};
        assert_int_equal(qc_job_key(m.jobs[i].spec, again, &err), QS_OK); /* key of its spec */
        assert_string_equal(again, m.jobs[i].key);
    }
    qc_job_list_free(&l);
    qc_job_list_free(&m);
    qc_job_list_free(&n);
    qc_grid_free(g);
    qc_grid_free(h);
    qc_grid_free(k);
    qs_error err = {0};
    assert_int_equal(load(e, HEAD "sensitivity: {formats: [nvfp4]}\nnumerics: gpu\n", &g, &err),
                     QS_EINVAL);
    assert_non_null(strstr(err.msg, ":5:11: numerics: 'gpu' is not a numerics path"));
    assert_int_equal(load(e, HEAD "sensitivity: {formats: [nvfp4]}\nnumerics: cpu-a/b\n", &g, &err),
                     QS_EINVAL);
    assert_non_null(strstr(err.msg, "numerics: 'cpu-a/b' is not a numerics path"));
}

/* The reader's typed getters a new grid kind uses, each naming file:line:column. */
static void test_reader_numbers_and_booleans_name_their_location(void **state) {
    env *e = *state;
    assert_int_equal(fx_write_text(e->grid, "lr: 3e-4\nbad: 1e999\nflag: true\nno: maybe\n"), 0);
    qs_error err = {0};
    qc_config *c = NULL;
    const char *sets[] = {"+steps=12"};
    assert_int_equal(qc_config_load(e->grid, sets, 1, &c, &err), QS_OK);
    struct fy_node *root = qc_config_root(c);
    double lr = 0;
    int flag = 0, steps = 0;
    assert_int_equal(qc_config_number(c, qc_config_lookup(root, "lr"), "lr", 0, 1, &lr), QS_OK);
    assert_true(lr == 3e-4);
    assert_int_equal(qc_config_number(c, qc_config_lookup(root, "bad"), "bad", 0, 1, &lr),
                     QS_EFORMAT);
    char want[700];
    snprintf(want, sizeof want, "%s:2:6: expected a number in [0, 1] for bad, got '1e999'",
             e->grid);
    assert_string_equal(err.msg, want);
    assert_int_equal(qc_config_bool(c, qc_config_lookup(root, "flag"), "flag", &flag), QS_OK);
    assert_int_equal(flag, 1);
    assert_int_equal(qc_config_bool(c, qc_config_lookup(root, "no"), "no", &flag), QS_EFORMAT);
    assert_non_null(strstr(err.msg, ":4:5: expected true or false for no, got 'maybe'"));
    assert_int_equal(qc_config_int(c, qc_config_lookup(root, "steps"), "steps", 1, 10, &steps),
                     QS_EFORMAT);
    assert_string_equal(err.msg, "--set +steps=12: expected an integer in [1, 10] for steps, "
                                 "got '12'");
    qc_config_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_keys_and_specs_of_an_existing_grid_are_unchanged,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_leave_one_out_by_block_and_by_layer_expand, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lm_head_and_embeddings_parts_record_tied_handling,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_sqnr_rows_is_recorded_in_every_eval_spec, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bad_parts_are_refused_at_their_location, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_policy_mode_is_one_job_with_its_map, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_policy_entries_are_refused_at_their_location,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_kind_names_the_registered_kinds, setup,
                                        teardown),
        cmocka_unit_test(test_job_list_refuses_specs_their_kind_refuses),
        cmocka_unit_test_setup_teardown(
            test_compare_to_is_one_compare_job_on_the_references_baseline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_model_digest_must_match_its_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fuse_is_recorded_in_every_eval_spec, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resources_are_recorded_but_not_keyed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_numerics_is_recorded_and_keyed_unless_any, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reader_numbers_and_booleans_name_their_location, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
