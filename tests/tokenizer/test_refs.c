/* qsweep's token ids against an independent implementation's, on five texts
 * (tests/tokenizer/data, made by tools/tokenizer/make_tokenizer_refs.py and, for the
 * SentencePiece .model files, tools/tokenizer/make_spm_refs.py: sentencepiece itself):
 * Hugging Face tokenizers for the tokenizer.json files (Llama 2 in its legacy form and with the
 * Metaspace pre-tokenizer two ways, Llama 3.2), llama.cpp's
 * llama-tokenize for the GGUF vocabularies (SmolLM2, Llama 2, Llama 3.2). Each test checks the
 * ids are exactly the reference's, then that decode(encode(text)) == text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "tokenizer.h"

typedef struct ref_case {
    const char *tokenizer; /* under QW_TOK_DATA (unpacked) */
    const char *ref_name;  /* refs/<ref_name>.<text>.ids */
    const char *text;
    const char *text_file;
    int lossy; /* the normalizer drops or changes text: no round trip */
    /* regex_replace/<normalizer> in place of the tokenizer.json's normalizer; NULL: as it is */
    const char *normalizer;
} ref_case;

/* The tokenizer.json at path with its "normalizer" replaced by the JSON file norm_path. */
static qw_tokenizer *open_with_normalizer(const char *path, const char *norm_path) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je), *norm = json_load_file(norm_path, 0, &je);
    if (!root || !norm) fail_msg("%s: %s", root ? norm_path : path, je.text);
    json_object_set_new(root, "normalizer", norm);
    char *text = json_dumps(root, JSON_COMPACT);
    assert_non_null(text);
    qw_tokenizer *t;
    qs_error err = {0};
    if (qw_tokenizer_from_json(path, text, strlen(text), -1, -1, &t, &err))
        fail_msg("%s with %s: %s", path, norm_path, err.msg);
    free(text);
    json_decref(root);
    return t;
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("%s: cannot open", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    b[len] = 0;
    *n = (size_t)len;
    return b;
}

static uint32_t *read_ids(const char *path, size_t *n) {
    size_t len;
    char *s = slurp(path, &len);
    size_t cap = len / 2 + 1, k = 0;
    uint32_t *ids = malloc(cap * sizeof *ids);
    assert_non_null(ids);
    for (char *p = s, *end; *p; p = end) {
        unsigned long v = strtoul(p, &end, 10);
        if (end == p) break;
        ids[k++] = (uint32_t)v;
    }
    free(s);
    *n = k;
    return ids;
}

/* The piece of an id, escaped for a message. */
static const char *show(const qw_tokenizer *t, uint32_t id, char *buf, size_t cap) {
    size_t n;
    const char *p = qw_tokenizer_piece(t, id, &n);
    size_t k = 0;
    for (size_t i = 0; p && i < n && k + 5 < cap; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n')
            k += (size_t)snprintf(buf + k, cap - k, "\\n");
        else if (c < 0x20)
            k += (size_t)snprintf(buf + k, cap - k, "\\x%02x", c);
        else
            buf[k++] = (char)c;
    }
    buf[k] = 0;
    return buf;
}

static void run_case(void **state) {
    const ref_case *c = *state;
    char path[4096];
    qs_error err = {0};
    qw_tokenizer *t;
    snprintf(path, sizeof path, "%s/%s", QW_TOK_DATA, c->tokenizer);
    qs_status st = QS_OK;
    if (c->normalizer) {
        char norm[4096];
        snprintf(norm, sizeof norm, "%s/regex_replace/%s", QW_TOK_SRC_DATA, c->normalizer);
        t = open_with_normalizer(path, norm);
    } else if ((st = qw_tokenizer_open(path, &t, &err))) {
        fail_msg("%s: %s", path, err.msg);
    }
    size_t len, nref;
    snprintf(path, sizeof path, "%s/texts/%s", QW_TOK_SRC_DATA, c->text_file);
    char *text = slurp(path, &len);
    snprintf(path, sizeof path, "%s/refs/%s.%s.ids", QW_TOK_SRC_DATA, c->ref_name, c->text);
    uint32_t *ref = read_ids(path, &nref);
    qw_token_vec ids = {0};
    st = qw_tokenizer_encode(t, text, len, 0, &ids, &err);
    if (st) fail_msg("encode %s: %s", c->text, err.msg);
    size_t diffs = 0, first = (size_t)-1;
    for (size_t i = 0; i < ids.n && i < nref; i++)
        if (ids.ids[i] != ref[i]) {
            if (first == (size_t)-1) first = i;
            diffs++;
        }
    if (ids.n != nref || diffs) {
        char a[128], b[128];
        size_t i = first == (size_t)-1 ? (ids.n < nref ? ids.n : nref) : first;
        fail_msg("%s on %s: %zu ids, reference %zu; first difference at %zu: %u '%s' vs %u '%s'",
                 c->tokenizer, c->text, ids.n, nref, i, i < ids.n ? ids.ids[i] : 0,
                 i < ids.n ? show(t, ids.ids[i], a, sizeof a) : "", i < nref ? ref[i] : 0,
                 i < nref ? show(t, ref[i], b, sizeof b) : "");
    }
    /* Metaspace (prepend_scheme first/always) puts "▁" in front only when the text does not
     * start with a space, and its decoder strips one leading space whatever came: a text that
     * starts with a space loses it, in Hugging Face's decode as here. */
    const char *want = text;
    size_t want_len = len;
    if (strstr(c->tokenizer, "metaspace") && len > 0 && text[0] == ' ') {
        want++;
        want_len--;
    }
    if (c->lossy) {
        printf("OK %-26s %-12s %6zu ids (no round trip: the normalizer changes the text)\n",
               c->tokenizer, c->text, ids.n);
        qw_token_vec_free(&ids);
        free(ref);
        free(text);
        qw_tokenizer_free(t);
        return;
    }
    char *back;
    size_t back_len;
    st = qw_tokenizer_decode(t, ids.ids, ids.n, 0, &back, &back_len, &err);
    if (st) fail_msg("decode: %s", err.msg);
    if (back_len != want_len || memcmp(back, want, want_len) != 0) {
        size_t i = 0;
        while (i < want_len && i < back_len && back[i] == want[i])
            i++;
        fail_msg("%s on %s: decode(encode(text)) differs from the text at byte %zu (%zu vs %zu "
                 "bytes)",
                 c->tokenizer, c->text, i, back_len, want_len);
    }
    printf("OK %-26s %-12s %6zu ids\n", c->tokenizer, c->text, ids.n);
    free(back);
    qw_token_vec_free(&ids);
    free(ref);
    free(text);
    qw_tokenizer_free(t);
}

#define TEXTS_N(tok, ref, norm, lossy)                                                             \
    {tok, ref, "gpl3", "gpl3.txt", lossy, norm},                                                   \
        {tok, ref, "kjv_esther", "kjv_esther.txt", lossy, norm},                                   \
        {tok, ref, "llama2c_run", "llama2c_run.c", lossy, norm},                                   \
        {tok, ref, "unicode", "unicode.txt", lossy, norm}, {                                       \
        tok, ref, "whitespace", "whitespace.txt", lossy, norm                                      \
    }
#define TEXTS(tok, ref) TEXTS_N(tok, ref, NULL, 0)

static const ref_case cases[] = {
    TEXTS("llama2/tokenizer.json", "llama2"),
    TEXTS("llama2_metaspace/tokenizer.json", "llama2_metaspace"),
    TEXTS("llama2_metaspace_split/tokenizer.json", "llama2_metaspace_split"),
    TEXTS("llama3/tokenizer.json", "llama3"),
    TEXTS("smollm2.vocab.gguf", "smollm2_gguf"),
    TEXTS("llama2.vocab.gguf", "llama2_gguf"),
    TEXTS("llama3.vocab.gguf", "llama3_gguf"),
    /* SentencePiece .model files trained for these tests (tools/tokenizer/make_spm_refs.py),
     * against sentencepiece's own ids; spm/random.txt: seeded random strings */
    /* Llama 2's tokenizer.model alone in a folder: sentencepiece's ids on it are the refs of
     * its tokenizer.json and GGUF conversions (spm/SOURCES.md) */
    TEXTS("spm/llama2_model", "llama2"),
    TEXTS("spm/bpe.model", "spm_bpe"),
    {"spm/bpe.model", "spm_bpe", "random", "../spm/random.txt", 0, NULL},
    {"spm/bpe_ws.model", "spm_bpe_ws", "gpl3", "gpl3.txt", 1, NULL},
    {"spm/bpe_ws.model", "spm_bpe_ws", "kjv_esther", "kjv_esther.txt", 1, NULL},
    {"spm/bpe_ws.model", "spm_bpe_ws", "llama2c_run", "llama2c_run.c", 1, NULL},
    {"spm/bpe_ws.model", "spm_bpe_ws", "unicode", "unicode.txt", 1, NULL},
    {"spm/bpe_ws.model", "spm_bpe_ws", "whitespace", "whitespace.txt", 1, NULL},
    {"spm/bpe_ws.model", "spm_bpe_ws", "random", "../spm/random.txt", 1, NULL},
    /* tokenizer.json normalizers with Replace on a Regex pattern (the files in regex_replace/):
     * Hugging Face tokenizers' ids (tools/tokenizer/make_regex_replace_refs.py); the Regex
     * form of the legacy " " -> "▁" gives the String form's ids */
    TEXTS_N("llama2/tokenizer.json", "llama2", "plain.json", 0),
    TEXTS_N("llama2/tokenizer.json", "llama2_regex_rich", "rich.json", 1),
};

int main(void) {
    enum { N = sizeof cases / sizeof cases[0] };
    struct CMUnitTest tests[N];
    char names[N][96];
    for (size_t i = 0; i < N; i++) {
        /* cases that share another case's references are named apart by what they read */
        const char *how = cases[i].normalizer && !strcmp(cases[i].normalizer, "plain.json")
                              ? "_regex_plain"
                          : !strcmp(cases[i].tokenizer, "spm/llama2_model") ? "_model"
                                                                            : "";
        snprintf(names[i], sizeof names[i], "%s%s_%s", cases[i].ref_name, how, cases[i].text);
        tests[i] = (struct CMUnitTest){names[i], run_case, NULL, NULL, (void *)&cases[i]};
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
