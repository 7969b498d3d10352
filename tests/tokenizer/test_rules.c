/* The tokenizer's rules, one test each: the GPT-2 byte map, special tokens never produced
 * from plain text unless asked, BOS/EOS per the model's config, refused input (invalid UTF-8
 * with its offset, malformed tokenizer.json naming the field), split behaviours, digests,
 * token files that name their tokenizer and the pairing check. */
#include <ftw.h>
#include <sys/stat.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tokenizer.h"
#include "tokenizer_internal.h"
#include "tokens.h"

static qw_tokenizer *open_tok(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", QW_TOK_DATA, name);
    qw_tokenizer *t;
    qs_error err = {0};
    if (qw_tokenizer_open(path, &t, &err)) fail_msg("%s: %s", path, err.msg);
    return t;
}

static qw_token_vec enc(const qw_tokenizer *t, const char *s, unsigned flags) {
    qw_token_vec v = {0};
    qs_error err = {0};
    if (qw_tokenizer_encode(t, s, strlen(s), flags, &v, &err)) fail_msg("encode: %s", err.msg);
    return v;
}

static void assert_ids(const qw_token_vec *v, const uint32_t *want, size_t n) {
    if (v->n != n) fail_msg("%zu ids, want %zu", v->n, n);
    for (size_t i = 0; i < n; i++)
        if (v->ids[i] != want[i]) fail_msg("id %zu = %u, want %u", i, v->ids[i], want[i]);
}

static void assert_has(const char *msg, const char *part) {
    if (!strstr(msg, part)) fail_msg("message \"%s\" does not name \"%s\"", msg, part);
}

/* openai/gpt-2 encoder.py bytes_to_unicode: ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ', 0 -> U+0100,
 * DEL -> U+0121, 0xAD (soft hyphen) -> U+0143 'Ń', printable bytes to themselves. */
static void gpt2_byte_map(void **state) {
    (void)state;
    assert_int_equal(qw_byte_to_cp(' '), 0x120);
    assert_int_equal(qw_byte_to_cp('\n'), 0x10a);
    assert_int_equal(qw_byte_to_cp(0), 0x100);
    assert_int_equal(qw_byte_to_cp(0x7f), 0x121);
    assert_int_equal(qw_byte_to_cp(0xad), 0x143);
    assert_int_equal(qw_byte_to_cp('A'), 'A');
    assert_int_equal(qw_byte_to_cp(0xff), 0xff);
    int seen[324] = {0};
    for (int b = 0; b < 256; b++)
        seen[qw_byte_to_cp((uint8_t)b)]++;
    for (int c = 0; c < 324; c++)
        assert_true(seen[c] <= 1); /* one-to-one */
}

/* RFC 3629: overlong forms, surrogates, code points above U+10FFFF and cut sequences. */
static void utf8_validity(void **state) {
    (void)state;
    const char *bad[] = {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                         "\xe2\x82", "\x80",         "\xff"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(qw_utf8_check((const uint8_t *)bad[i], strlen(bad[i])), 0);
    const char *good = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    assert_int_equal(qw_utf8_check((const uint8_t *)good, strlen(good)), strlen(good));
}

static void invalid_utf8_is_refused_with_its_offset(void **state) {
    (void)state;
    qw_tokenizer *t = open_tok("llama3/tokenizer.json");
    qw_token_vec v = {0};
    qw_token_vec_push(&v, 7, NULL);
    qs_error err = {0};
    assert_int_equal(qw_tokenizer_encode(t, "ok \xe2\x82 then", 10, 0, &v, &err), QS_EINVAL);
    assert_has(err.msg, "byte offset 3");
    assert_int_equal(v.n, 1); /* what the vector held is kept */
    qw_token_vec_free(&v);
    qw_tokenizer_free(t);
}

/* "<|begin_of_text|>" in plain text is text (HF with encode_special_tokens, llama.cpp with
 * parse_special false); QW_ENCODE_PARSE_SPECIAL makes it the token. */
static void special_tokens_only_when_asked(void **state) {
    (void)state;
    const char *names[] = {"llama3/tokenizer.json", "llama3.vocab.gguf"};
    for (int k = 0; k < 2; k++) {
        qw_tokenizer *t = open_tok(names[k]);
        qw_token_vec plain = enc(t, "<|begin_of_text|>Hi", 0);
        for (size_t i = 0; i < plain.n; i++)
            assert_int_not_equal(plain.ids[i], 128000);
        assert_true(plain.n > 2);
        qw_token_vec asked = enc(t, "<|begin_of_text|>Hi", QW_ENCODE_PARSE_SPECIAL);
        uint32_t want[] = {128000, 13347}; /* "Hi" */
        assert_ids(&asked, want, 2);
        assert_true(qw_tokenizer_is_special(t, 128000));
        qw_token_vec_free(&plain);
        qw_token_vec_free(&asked);
        qw_tokenizer_free(t);
    }
}

/* BOS per the model's config: Llama 3.2's post-processor and llama-bpe add <|begin_of_text|>;
 * Llama 2 adds <s> (1); SmolLM2's GGUF sets add_bos_token false. EOS is not added by any. */
static void bos_per_model_config(void **state) {
    (void)state;
    struct {
        const char *name;
        int64_t bos;
        int adds;
    } m[] = {{"llama3/tokenizer.json", 128000, 1},
             {"llama3.vocab.gguf", 128000, 1},
             {"llama2/tokenizer.json", 1, 1},
             {"llama2.vocab.gguf", 1, 1},
             {"smollm2.vocab.gguf", 1, 0}};
    for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) {
        qw_tokenizer *t = open_tok(m[k].name);
        assert_int_equal(qw_tokenizer_bos(t), m[k].bos);
        assert_int_equal(qw_tokenizer_adds_bos(t), m[k].adds);
        qw_token_vec a = enc(t, "Hello", 0), b = enc(t, "Hello", QW_ENCODE_ADD_SPECIAL);
        assert_int_equal(b.n, a.n + (size_t)m[k].adds);
        if (m[k].adds) assert_int_equal(b.ids[0], (uint32_t)m[k].bos);
        assert_memory_equal(b.ids + m[k].adds, a.ids, a.n * 4);
        char *s;
        size_t n;
        assert_int_equal(qw_tokenizer_decode(t, b.ids, b.n, 1, &s, &n, NULL), QS_OK);
        assert_string_equal(s, "Hello"); /* skip_special drops BOS */
        free(s);
        qw_token_vec_free(&a);
        qw_token_vec_free(&b);
        qw_tokenizer_free(t);
    }
}

/* SmolLM2's GGUF names the smollm pre-tokenizer, which splits digits first, so
 * "\n\n  1" gives [39892 '\n\n  '] then the digit, not transformers' [8866 '\n\n ', 216 ' ']. */
static void smollm_digit_split_before_whitespace(void **state) {
    (void)state;
    qw_tokenizer *t = open_tok("smollm2.vocab.gguf");
    qw_token_vec v = enc(t, "a\n\n  1", 0);
    assert_true(v.n >= 3);
    assert_int_equal(v.ids[1], 39892);
    qw_token_vec_free(&v);
    qw_tokenizer_free(t);
}

/* Found by tokenizer_fuzz_encode: SmolLM2's GGUF has no symbol for byte 0x14; llama.cpp's
 * llama-tokenize drops it ("\x14ex" -> [888]) rather than giving unknown_token_id 0. */
static void smollm_byte_outside_the_vocabulary_is_dropped(void **state) {
    (void)state;
    qw_tokenizer *t = open_tok("smollm2.vocab.gguf");
    qw_token_vec v = enc(t,
                         "\x14"
                         "ex",
                         0);
    uint32_t want[] = {888};
    assert_ids(&v, want, 1);
    qw_token_vec_free(&v);
    qw_tokenizer_free(t);
}

static void empty_text_gives_no_ids(void **state) {
    (void)state;
    const char *names[] = {"llama2/tokenizer.json", "llama3/tokenizer.json", "llama2.vocab.gguf",
                           "smollm2.vocab.gguf"};
    for (int k = 0; k < 4; k++) {
        qw_tokenizer *t = open_tok(names[k]);
        qw_token_vec v = enc(t, "", 0);
        assert_int_equal(v.n, 0);
        qw_token_vec_free(&v);
        qw_tokenizer_free(t);
    }
}

/* Byte fallback (Llama 2): a character outside the vocabulary becomes its UTF-8 bytes as
 * <0xNN> tokens and decodes back. U+1F600 is F0 9F 98 80. */
static void byte_fallback_round_trip(void **state) {
    (void)state;
    const char *names[] = {"llama2/tokenizer.json", "llama2.vocab.gguf"};
    for (int k = 0; k < 2; k++) {
        qw_tokenizer *t = open_tok(names[k]);
        qw_token_vec v = enc(t, "\xf0\x9f\x98\x80", 0);
        /* "▁" (29871) then the four byte tokens <0xF0> <0x9F> <0x98> <0x80> = 3 + byte */
        uint32_t want[] = {29871, 3 + 0xf0, 3 + 0x9f, 3 + 0x98, 3 + 0x80};
        assert_ids(&v, want, 5);
        char *s;
        size_t n;
        assert_int_equal(qw_tokenizer_decode(t, v.ids, v.n, 0, &s, &n, NULL), QS_OK);
        assert_string_equal(s, "\xf0\x9f\x98\x80");
        free(s);
        qw_token_vec_free(&v);
        qw_tokenizer_free(t);
    }
}

static void decode_refuses_an_id_out_of_range(void **state) {
    (void)state;
    qw_tokenizer *t = open_tok("llama2/tokenizer.json");
    uint32_t ids[] = {1, 32000};
    char *s = (char *)1;
    size_t n;
    qs_error err = {0};
    assert_int_equal(qw_tokenizer_decode(t, ids, 2, 0, &s, &n, &err), QS_EINVAL);
    assert_null(s);
    assert_has(err.msg, "index 1");
    qw_tokenizer_free(t);
}

/* A minimal byte-level tokenizer.json: vocab = the 256 byte symbols plus `extra`, merges as
 * given, pre-tokenizer as given. */
static qs_status tiny(const char *pre, const char *extra_vocab, const char *merges,
                      qw_tokenizer **out, qs_error *err) {
    char *buf = malloc(1 << 16);
    size_t k = (size_t)snprintf(buf, 1 << 16, "{\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (int b = 0; b < 256; b++) {
        char u[5] = {0};
        qw_utf8_put(qw_byte_to_cp((uint8_t)b), u);
        /* JSON-escape '"' and '\\' */
        k += (size_t)snprintf(buf + k, (1 << 16) - k, "%s\"%s%s\":%d", b ? "," : "",
                              (b == '"' || b == '\\') ? "\\" : "", u, b);
    }
    k += (size_t)snprintf(buf + k, (1 << 16) - k,
                          "%s%s},\"merges\":[%s]},\"pre_tokenizer\":%s,"
                          "\"decoder\":{\"type\":\"ByteLevel\"}}",
                          *extra_vocab ? "," : "", extra_vocab, merges, pre);
    qs_status st = qw_tokenizer_from_json("tiny.json", buf, k, -1, -1, out, err);
    free(buf);
    return st;
}

/* HF Split behaviours on "a-b": the merge a+- (id 256) and -+b (257) show where the cuts are. */
static void split_behaviors(void **state) {
    (void)state;
    const char *vocab = "\"a-\":256,\"-b\":257";
    const char *merges = "\"a -\",\"- b\"";
    struct {
        const char *behavior;
        uint32_t want[3];
        size_t n;
    } c[] = {
        {"Isolated", {'a', '-', 'b'}, 3},
        {"Removed", {'a', 'b'}, 2},
        {"MergedWithPrevious", {256, 'b'}, 2},
        {"MergedWithNext", {'a', 257}, 2},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char pre[256];
        snprintf(pre, sizeof pre,
                 "{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"%s\","
                 "\"invert\":false}",
                 c[i].behavior);
        qw_tokenizer *t;
        qs_error err = {0};
        if (tiny(pre, vocab, merges, &t, &err)) fail_msg("%s: %s", c[i].behavior, err.msg);
        qw_token_vec v = enc(t, "a-b", 0);
        assert_ids(&v, c[i].want, c[i].n);
        qw_token_vec_free(&v);
        qw_tokenizer_free(t);
    }
    /* no pre-tokenizer: one word, merges by rank (a+- is rank 0, so it wins over -+b) */
    qw_tokenizer *t;
    assert_int_equal(tiny("null", vocab, merges, &t, NULL), QS_OK);
    qw_token_vec v = enc(t, "a-b", 0);
    uint32_t want[] = {256, 'b'};
    assert_ids(&v, want, 2);
    qw_token_vec_free(&v);
    qw_tokenizer_free(t);
}

static void malformed_tokenizer_json(void **state) {
    (void)state;
    struct {
        const char *pre, *vocab, *merges;
        qs_status st;
        const char *part;
    } c[] = {
        {"null", "\"ab\":256", "\"a x\"", QS_EFORMAT, "model.merges[0]"},
        {"null", "", "\"ab\"", QS_EFORMAT, "model.merges[0]"},
        {"{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}", "", "",
         QS_EFORMAT, "PCRE2"},
        {"{\"type\":\"Whitespace\"}", "", "", QS_EUNSUPPORTED, "Whitespace"},
        {"{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Sideways\"}", "", "",
         QS_EUNSUPPORTED, "Sideways"},
        {"{\"type\":\"ByteLevel\",\"add_prefix_space\":true}", "", "", QS_EUNSUPPORTED,
         "add_prefix_space"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        qw_tokenizer *t = (qw_tokenizer *)1;
        qs_error err = {0};
        assert_int_equal(tiny(c[i].pre, c[i].vocab, c[i].merges, &t, &err), c[i].st);
        assert_null(t);
        assert_has(err.msg, "tiny.json");
        assert_has(err.msg, c[i].part);
    }
    qw_tokenizer *t;
    qs_error err = {0};
    assert_int_equal(qw_tokenizer_from_json("x.json", "{\"model\": [1,", 13, -1, -1, &t, &err),
                     QS_EFORMAT);
    assert_has(err.msg, "x.json: line 1");
    /* found by tokenizer_fuzz_json: one id of a billion would allocate gigabytes */
    const char *sparse = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1000000000},"
                         "\"merges\":[]}}";
    assert_int_equal(qw_tokenizer_from_json("s.json", sparse, strlen(sparse), -1, -1, &t, &err),
                     QS_EFORMAT);
    assert_has(err.msg, "largest id 1000000000");
    const char *wp = "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}";
    assert_int_equal(qw_tokenizer_from_json("w.json", wp, strlen(wp), -1, -1, &t, &err),
                     QS_EUNSUPPORTED);
    assert_has(err.msg, "WordPiece");
}

/* The digest follows content, not the file: the same tokenizer twice is equal, one more merge
 * or another pre-tokenizer changes it. */
static void digest_follows_content(void **state) {
    (void)state;
    const char *vocab = "\"a-\":256,\"-b\":257";
    qw_tokenizer *a, *b, *c, *d;
    assert_int_equal(tiny("null", vocab, "\"a -\",\"- b\"", &a, NULL), QS_OK);
    assert_int_equal(tiny("null", vocab, "\"a -\",\"- b\"", &b, NULL), QS_OK);
    assert_int_equal(tiny("null", vocab, "\"a -\"", &c, NULL), QS_OK);
    assert_int_equal(tiny("{\"type\":\"Digits\",\"individual_digits\":true}", vocab,
                          "\"a -\",\"- b\"", &d, NULL),
                     QS_OK);
    assert_int_equal(strlen(qw_tokenizer_digest(a)), 64);
    assert_string_equal(qw_tokenizer_digest(a), qw_tokenizer_digest(b));
    assert_string_not_equal(qw_tokenizer_digest(a), qw_tokenizer_digest(c));
    assert_string_not_equal(qw_tokenizer_digest(a), qw_tokenizer_digest(d));
    qw_tokenizer_free(a);
    qw_tokenizer_free(b);
    qw_tokenizer_free(c);
    qw_tokenizer_free(d);
    qw_tokenizer *l2 = open_tok("llama2/tokenizer.json"), *l3 = open_tok("llama3/tokenizer.json");
    assert_string_not_equal(qw_tokenizer_digest(l2), qw_tokenizer_digest(l3));
    qw_tokenizer_free(l2);
    qw_tokenizer_free(l3);
}

/* The digest of a tokenizer with a regex covers the Unicode version of PCRE2's tables (two
 * versions, two digests; the real digest is the one for the library's own version, as
 * pcre2_config reports it); one without any regex is the same under every version. */
static void digest_covers_the_regex_unicode_version(void **state) {
    (void)state;
    char real[32], lib[64] = "";
    qw_tokenizer_regex_unicode_version(real, sizeof real);
    assert_true(pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, lib) > 0);
    assert_string_equal(real, lib);
    fprintf(stderr, "PCRE2 %d.%d, Unicode %s\n", PCRE2_MAJOR, PCRE2_MINOR, real);
    qw_tokenizer *re, *plain;
    assert_int_equal(tiny("{\"type\":\"Digits\",\"individual_digits\":true}", "\"a-\":256",
                          "\"a -\"", &re, NULL),
                     QS_OK);
    assert_int_equal(tiny("null", "\"a-\":256", "\"a -\"", &plain, NULL), QS_OK);
    assert_true(re->n_steps > 0);
    assert_int_equal(plain->n_steps, 0);
    assert_int_equal(plain->n_repl, 0);
    char a[65], b[65], mine[65];
    qw_tokenizer_compute_digest(re, "14.0.0", a);
    qw_tokenizer_compute_digest(re, "15.1.0", b);
    qw_tokenizer_compute_digest(re, real, mine);
    assert_string_not_equal(a, b);
    assert_string_equal(qw_tokenizer_digest(re), mine);
    qw_tokenizer_compute_digest(plain, "14.0.0", a);
    qw_tokenizer_compute_digest(plain, "15.1.0", b);
    assert_string_equal(a, b);
    assert_string_equal(qw_tokenizer_digest(plain), a);
    qw_tokenizer_free(re);
    qw_tokenizer_free(plain);
}

static void gguf_unknown_pre_tokenizer_is_refused(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/smollm2.vocab.gguf", QW_TOK_DATA);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n);
    assert_int_equal(fread(b, 1, n, f), n);
    fclose(f);
    /* the value "smollm" of tokenizer.ggml.pre becomes "smollx" */
    uint8_t *hit = memmem(b, n, "tokenizer.ggml.pre", 18);
    assert_non_null(hit);
    uint8_t *v = memmem(hit, 64, "smollm", 6);
    assert_non_null(v);
    v[5] = 'x';
    qw_tokenizer *t;
    qs_error err = {0};
    assert_int_equal(qw_tokenizer_from_gguf("s.gguf", b, n, &t, &err), QS_EUNSUPPORTED);
    assert_has(err.msg, "tokenizer.ggml.pre");
    assert_has(err.msg, "smollx");
    /* cut inside the token list: truncated, with the offset */
    assert_int_equal(qw_tokenizer_from_gguf("s.gguf", b, 4096, &t, &err), QS_EFORMAT);
    assert_has(err.msg, "truncated");
    free(b);
}

/* Scratch folders made by scratch_file, removed with their contents by the group teardown so
 * a run leaves nothing in TMPDIR (tools/test.sh checks), also when a test fails. */
static char scratch_dirs[16][256];
static int n_scratch_dirs;

static char *scratch_file(const char *name) {
    assert_true(n_scratch_dirs < 16);
    char *dir = scratch_dirs[n_scratch_dirs];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof scratch_dirs[0], "%s/qw_tok_test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(dir));
    n_scratch_dirs++;
    char *p = malloc(512);
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int remove_scratch_dirs(void **state) {
    (void)state;
    for (int i = 0; i < n_scratch_dirs; i++)
        nftw(scratch_dirs[i], remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    n_scratch_dirs = 0;
    return 0;
}

/* A version 2 token file names its tokenizer; a model of another tokenizer is refused, a
 * version 1 file is checked by its vocabulary size (vocab 256 given to SmolLM2 is refused). */
static void token_file_names_its_tokenizer(void **state) {
    (void)state;
    qw_tokenizer *s = open_tok("smollm2.vocab.gguf");
    qw_token_vec v = enc(s, "Hello world", 0);
    char *path = scratch_file("hello.tokens");
    qs_error err = {0};
    assert_int_equal(
        qw_tokens_write(path, v.ids, v.n, qw_tokenizer_vocab_size(s), qw_tokenizer_digest(s), &err),
        QS_OK);
    qw_tokens tk = {0};
    assert_int_equal(qw_tokens_load(path, &tk, &err), QS_OK);
    assert_int_equal(tk.version, 2);
    assert_int_equal(tk.n, v.n);
    assert_memory_equal(tk.ids, v.ids, v.n * 4);
    assert_string_equal(tk.tokenizer_digest, qw_tokenizer_digest(s));
    char model[4096];
    snprintf(model, sizeof model, "%s/smollm2.vocab.gguf", QW_TOK_DATA);
    assert_int_equal(qw_tokenizer_check_tokens(path, &tk, model, &err), QS_OK);
    snprintf(model, sizeof model, "%s/llama3", QW_TOK_DATA); /* a directory with tokenizer.json */
    assert_int_equal(qw_tokenizer_check_tokens(path, &tk, model, &err), QS_EINVAL);
    assert_has(err.msg, "hello.tokens");
    assert_has(err.msg, "llama3");
    /* a version 1 file of vocabulary 256 */
    qw_tokens v1 = {.ids = v.ids, .n = v.n, .vocab_size = 256, .version = 1};
    snprintf(model, sizeof model, "%s/smollm2.vocab.gguf", QW_TOK_DATA);
    assert_int_equal(qw_tokenizer_check_tokens("bytes.tokens", &v1, model, &err), QS_EINVAL);
    assert_has(err.msg, "vocab_size");
    v1.vocab_size = 49152;
    assert_int_equal(qw_tokenizer_check_tokens("old.tokens", &v1, model, &err), QS_OK);
    /* a model without a tokenizer is not checked */
    assert_int_equal(qw_tokenizer_check_tokens("old.tokens", &v1, QW_TOK_DATA, &err), QS_OK);
    /* the writer refuses an id outside the vocabulary and a bad digest, and leaves no file */
    uint32_t bad[] = {5, 300};
    unlink(path);
    assert_int_equal(qw_tokens_write(path, bad, 2, 256, qw_tokenizer_digest(s), &err), QS_EINVAL);
    assert_has(err.msg, "token 1");
    assert_int_equal(qw_tokens_write(path, bad, 1, 256, "xyz", &err), QS_EINVAL);
    assert_int_equal(access(path, F_OK), -1);
    qw_tokens_free(&tk);
    qw_token_vec_free(&v);
    qw_tokenizer_free(s);
    free(path);
}

static void write_file(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(s, 1, n, f), n);
    fclose(f);
}

/* dataset {text: FILE}: one token file per (tokenizer, text) in the cache, the same bytes (so
 * the same dataset digest) as `qsweep tokenize` writes; another text or tokenizer, another
 * digest; invalid UTF-8 named with its offset and nothing cached. */
static void text_dataset_is_cached_per_tokenizer_and_text(void **state) {
    (void)state;
    char *text = scratch_file("a.txt");
    char cache[600], other[600], bad[600], path[4096], path2[4096];
    snprintf(cache, sizeof cache, "%.*s/cache", (int)(strrchr(text, '/') - text), text);
    snprintf(other, sizeof other, "%.*s/b.txt", (int)(strrchr(text, '/') - text), text);
    snprintf(bad, sizeof bad, "%.*s/bad.txt", (int)(strrchr(text, '/') - text), text);
    write_file(text, "Hello world 123\n", 16);
    write_file(other, "Hello world 124\n", 16);
    write_file(bad, "Hello \xff", 7);
    char smol[4096], l3[4096];
    snprintf(smol, sizeof smol, "%s/smollm2.vocab.gguf", QW_TOK_DATA);
    snprintf(l3, sizeof l3, "%s/llama3", QW_TOK_DATA);
    qs_error err = {0};
    qw_tokens a = {0}, a2 = {0}, b = {0}, c = {0};
    if (qw_text_dataset(smol, text, cache, &a, path, sizeof path, &err)) fail_msg("%s", err.msg);
    assert_int_equal(a.version, 2);
    assert_non_null(strstr(path, cache));
    /* the same bytes as qsweep tokenize's file */
    qw_tokenizer *t = open_tok("smollm2.vocab.gguf");
    qw_token_vec v = enc(t, "Hello world 123\n", 0);
    char *direct = scratch_file("direct.tokens");
    assert_int_equal(qw_tokens_write(direct, v.ids, v.n, qw_tokenizer_vocab_size(t),
                                     qw_tokenizer_digest(t), &err),
                     QS_OK);
    qw_tokens d = {0};
    assert_int_equal(qw_tokens_load(direct, &d, &err), QS_OK);
    assert_string_equal(a.digest, d.digest);
    /* the second time reads the cache: same file, same digest */
    assert_int_equal(qw_text_dataset(smol, text, cache, &a2, path2, sizeof path2, &err), QS_OK);
    assert_string_equal(path, path2);
    assert_string_equal(a.digest, a2.digest);
    assert_int_equal(qw_text_dataset(smol, other, cache, &b, path2, sizeof path2, &err), QS_OK);
    assert_string_not_equal(a.digest, b.digest);
    assert_int_equal(qw_text_dataset(l3, text, cache, &c, path2, sizeof path2, &err), QS_OK);
    assert_string_not_equal(a.digest, c.digest);
    qw_tokens e = {0};
    assert_int_equal(qw_text_dataset(smol, bad, cache, &e, path2, sizeof path2, &err), QS_EINVAL);
    assert_has(err.msg, "bad.txt");
    assert_has(err.msg, "byte offset 6");
    assert_null(e.ids);
    /* a model without a tokenizer */
    assert_int_equal(qw_text_dataset(QW_TOK_DATA, text, cache, &e, path2, sizeof path2, &err),
                     QS_ENOTFOUND);
    assert_has(err.msg, "tokenizer");
    qw_tokens_free(&a);
    qw_tokens_free(&a2);
    qw_tokens_free(&b);
    qw_tokens_free(&c);
    qw_tokens_free(&d);
    qw_token_vec_free(&v);
    qw_tokenizer_free(t);
    free(direct);
    free(text);
}

/* Flips one byte of a file at offset off. */
static void flip_byte(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    int c = fgetc(f);
    assert_true(c != EOF);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    assert_int_equal(fputc(c ^ 0x01, f), c ^ 0x01);
    fclose(f);
}

/* A damaged cache file is never served: a flipped id byte, a flipped header byte (the
 * tokenizer digest), a truncated file, a missing or altered .b2 digest file each make the next
 * use rebuild the file, which then has the digest of a fresh tokenization again. The key holds
 * the tokenizer code version. */
static void text_dataset_cache_is_verified_and_rebuilt(void **state) {
    (void)state;
    char *text = scratch_file("v.txt");
    char cache[600], path[4096], path2[4096], side[4200];
    snprintf(cache, sizeof cache, "%.*s/vcache", (int)(strrchr(text, '/') - text), text);
    write_file(text, "Hello world 123, and some more words.\n", 38);
    char smol[4096];
    snprintf(smol, sizeof smol, "%s/smollm2.vocab.gguf", QW_TOK_DATA);
    qs_error err = {0};
    qw_tokens a = {0};
    if (qw_text_dataset(smol, text, cache, &a, path, sizeof path, &err)) fail_msg("%s", err.msg);
    char key[32];
    snprintf(key, sizeof key, "-c%d.tokens", QW_TOKENIZER_CODE_VERSION);
    assert_has(path, key);
    snprintf(side, sizeof side, "%s.b2", path);
    assert_int_equal(access(side, F_OK), 0);
    /* worker/checkpoint/tokens.h version 2: an id's low byte (still a valid id: the case a
       loader cannot see), a byte of the tokenizer digest, of vocab_size, of the version */
    const long offs[] = {68, 40, 12, 8};
    for (size_t k = 0; k < sizeof offs / sizeof *offs; k++) {
        flip_byte(path, offs[k]);
        qw_tokens b = {0};
        if (qw_text_dataset(smol, text, cache, &b, path2, sizeof path2, &err))
            fail_msg("offset %ld: %s", offs[k], err.msg);
        assert_string_equal(path, path2);
        assert_string_equal(a.digest, b.digest);
        assert_int_equal(b.n, a.n);
        assert_memory_equal(b.ids, a.ids, a.n * sizeof *a.ids);
        qw_tokens_free(&b);
        /* the file on disk is whole again */
        qw_tokens d = {0};
        assert_int_equal(qw_tokens_load(path, &d, &err), QS_OK);
        assert_string_equal(d.digest, a.digest);
        qw_tokens_free(&d);
    }
    /* truncated to its header */
    assert_int_equal(truncate(path, 64), 0);
    qw_tokens b = {0};
    assert_int_equal(qw_text_dataset(smol, text, cache, &b, path2, sizeof path2, &err), QS_OK);
    assert_string_equal(a.digest, b.digest);
    qw_tokens_free(&b);
    /* no recorded digest, then a recorded digest that is not the file's */
    assert_int_equal(unlink(side), 0);
    assert_int_equal(qw_text_dataset(smol, text, cache, &b, path2, sizeof path2, &err), QS_OK);
    assert_string_equal(a.digest, b.digest);
    assert_int_equal(access(side, F_OK), 0);
    qw_tokens_free(&b);
    flip_byte(side, 0);
    assert_int_equal(qw_text_dataset(smol, text, cache, &b, path2, sizeof path2, &err), QS_OK);
    assert_string_equal(a.digest, b.digest);
    qw_tokens_free(&b);
    /* no temporary files left beside it */
    char cmd[900];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 2", cache);
    assert_int_equal(system(cmd), 0);
    qw_tokens_free(&a);
    free(text);
}

/* A text that is not a regular file is refused at once, saying what it is: a FIFO (which would
 * block a reader forever), a directory ("Is a directory"), a symlink to a FIFO; a symlink to a
 * regular file is read. */
static void text_dataset_refuses_what_is_not_a_regular_file(void **state) {
    (void)state;
    char *text = scratch_file("r.txt");
    char dir[600], fifo[600], link1[600], link2[600], cache[600], path[4096];
    int dl = (int)(strrchr(text, '/') - text);
    snprintf(dir, sizeof dir, "%.*s/adir", dl, text);
    snprintf(fifo, sizeof fifo, "%.*s/fifo", dl, text);
    snprintf(link1, sizeof link1, "%.*s/to-fifo", dl, text);
    snprintf(link2, sizeof link2, "%.*s/to-text", dl, text);
    snprintf(cache, sizeof cache, "%.*s/rcache", dl, text);
    write_file(text, "Hello world 123\n", 16);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(symlink(fifo, link1), 0);
    assert_int_equal(symlink(text, link2), 0);
    char smol[4096];
    snprintf(smol, sizeof smol, "%s/smollm2.vocab.gguf", QW_TOK_DATA);
    qs_error err = {0};
    qw_tokens t = {0};
    assert_int_equal(qw_text_dataset(smol, fifo, cache, &t, path, sizeof path, &err), QS_EINVAL);
    assert_has(err.msg, "fifo");
    assert_has(err.msg, "FIFO");
    assert_null(t.ids);
    assert_int_equal(qw_text_dataset(smol, link1, cache, &t, path, sizeof path, &err), QS_EINVAL);
    assert_has(err.msg, "to-fifo");
    assert_has(err.msg, "FIFO");
    assert_int_equal(qw_text_dataset(smol, dir, cache, &t, path, sizeof path, &err), QS_EINVAL);
    assert_has(err.msg, "adir");
    assert_has(err.msg, "Is a directory");
    assert_int_equal(qw_text_dataset(smol, link2, cache, &t, path, sizeof path, &err), QS_OK);
    assert_true(t.n > 0);
    qw_tokens_free(&t);
    free(text);
}

/* A normalizer Replace on a Regex pattern: the matches become the content, taken literally;
 * a pattern PCRE2 refuses is named with its field. */
static void normalizer_replace_with_a_regex(void **state) {
    (void)state;
    const char *ok =
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"-\":1,\"$1\":2,"
        "\"$\":3,\"1\":4},\"merges\":[\"$ 1\"]},\"normalizer\":{\"type\":\"Replace\",\"pattern\":"
        "{\"Regex\":\"(b|c)+\"},\"content\":\"$1\"}}";
    qw_tokenizer *t;
    qs_error err = {0};
    assert_int_equal(qw_tokenizer_from_json("re.json", ok, strlen(ok), -1, -1, &t, &err), QS_OK);
    qw_token_vec v = enc(t, "abcb-a", 0);
    const uint32_t want[] = {0, 2, 1, 0}; /* "a", "$1", "-", "a" */
    assert_ids(&v, want, 4);
    qw_token_vec_free(&v);
    qw_tokenizer_free(t);
    const char *bad = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                      "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":"
                      "\"Replace\",\"pattern\":{\"Regex\":\"(\"},\"content\":\"\"}]}}";
    assert_int_equal(qw_tokenizer_from_json("bad.json", bad, strlen(bad), -1, -1, &t, &err),
                     QS_EFORMAT);
    assert_has(err.msg, "bad.json");
    assert_has(err.msg, "normalizer.normalizers[0]");
    assert_has(err.msg, "PCRE2");
}

/* SentencePiece .model files (tools/tokenizer/make_spm_refs.py): a unigram model is refused
 * by name, not as bad JSON; a tokenizer.model alone in a checkpoint folder is found; a .model
 * file under another name is recognised by its first byte; a cut file is named; BOS only when
 * asked, as Llama 2 puts it. */
static void sentencepiece_model_files(void **state) {
    (void)state;
    char path[4096];
    qw_tokenizer *t = NULL;
    qs_error err = {0};
    snprintf(path, sizeof path, "%s/spm/unigram.model", QW_TOK_DATA);
    assert_int_equal(qw_tokenizer_open(path, &t, &err), QS_EUNSUPPORTED);
    assert_has(err.msg, "unigram.model");
    assert_has(err.msg, "SentencePiece unigram models are not supported");

    qw_tokenizer *bpe = open_tok("spm/bpe.model");
    assert_string_equal(qw_tokenizer_kind(bpe), "spm");
    qw_token_vec want = enc(bpe, "Hello world", 0);
    qw_token_vec with_bos = enc(bpe, "Hello world", QW_ENCODE_ADD_SPECIAL);
    assert_int_equal(with_bos.n, want.n + 1);
    assert_int_equal(with_bos.ids[0], (uint32_t)qw_tokenizer_bos(bpe));
    qw_token_vec none = enc(bpe, "", 0);
    assert_int_equal(none.n, 0);

    size_t n;
    snprintf(path, sizeof path, "%s/spm/bpe.model", QW_TOK_DATA);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(n > 0 && n < sizeof buf);
    char *in_dir = scratch_file("tokenizer.model");
    write_file(in_dir, buf, n);
    *strrchr(in_dir, '/') = 0; /* the folder */
    assert_int_equal(qw_tokenizer_open(in_dir, &t, &err), QS_OK);
    qw_token_vec got = enc(t, "Hello world", 0);
    assert_ids(&got, want.ids, want.n);
    assert_string_equal(qw_tokenizer_digest(t), qw_tokenizer_digest(bpe));
    qw_token_vec_free(&got);
    qw_tokenizer_free(t);
    char *other = scratch_file("sp.bin");
    write_file(other, buf, n);
    assert_int_equal(qw_tokenizer_open(other, &t, &err), QS_OK);
    assert_string_equal(qw_tokenizer_digest(t), qw_tokenizer_digest(bpe));
    qw_tokenizer_free(t);
    char *cut = scratch_file("cut.model");
    write_file(cut, buf, n / 2);
    assert_int_equal(qw_tokenizer_open(cut, &t, &err), QS_EFORMAT);
    assert_has(err.msg, "cut.model");
    assert_has(err.msg, "not a SentencePiece model");
    qw_token_vec_free(&want);
    qw_token_vec_free(&with_bos);
    qw_token_vec_free(&none);
    qw_tokenizer_free(bpe);
    free(in_dir);
    free(other);
    free(cut);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpt2_byte_map),
        cmocka_unit_test(utf8_validity),
        cmocka_unit_test(invalid_utf8_is_refused_with_its_offset),
        cmocka_unit_test(special_tokens_only_when_asked),
        cmocka_unit_test(bos_per_model_config),
        cmocka_unit_test(smollm_digit_split_before_whitespace),
        cmocka_unit_test(smollm_byte_outside_the_vocabulary_is_dropped),
        cmocka_unit_test(empty_text_gives_no_ids),
        cmocka_unit_test(byte_fallback_round_trip),
        cmocka_unit_test(decode_refuses_an_id_out_of_range),
        cmocka_unit_test(split_behaviors),
        cmocka_unit_test(malformed_tokenizer_json),
        cmocka_unit_test(digest_follows_content),
        cmocka_unit_test(digest_covers_the_regex_unicode_version),
        cmocka_unit_test(gguf_unknown_pre_tokenizer_is_refused),
        cmocka_unit_test(token_file_names_its_tokenizer),
        cmocka_unit_test(text_dataset_is_cached_per_tokenizer_and_text),
        cmocka_unit_test(text_dataset_cache_is_verified_and_rebuilt),
        cmocka_unit_test(text_dataset_refuses_what_is_not_a_regular_file),
        cmocka_unit_test(normalizer_replace_with_a_regex),
        cmocka_unit_test(sentencepiece_model_files),
    };
    return cmocka_run_group_tests(tests, NULL, remove_scratch_dirs);
}
