/* Internals of qw_tokenizer shared by its files and by tests/tokenizer (fuzz targets, unit
 * tests of the pieces). Callers outside use tokenizer.h only. */
#ifndef QW_TOKENIZER_INTERNAL_H
#define QW_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "tokenizer.h"

/* The families (tokenizer.h). */
typedef enum qw_tok_kind {
    QW_TOK_BYTE_BPE =
        0,          /* byte-level BPE, merges by rank (HF BPE / llama.cpp LLAMA_VOCAB_TYPE_BPE) */
    QW_TOK_SPM_BPE, /* BPE over "▁"-escaped UTF-8 with byte fallback (HF BPE, Llama 2) */
    QW_TOK_SPM,     /* SentencePiece scores (llama.cpp llm_tokenizer_spm) */
} qw_tok_kind;

/* Token kinds, as GGUF's tokenizer.ggml.token_type (llama.h LLAMA_TOKEN_TYPE_*). */
enum {
    QW_TT_UNDEFINED = 0,
    QW_TT_NORMAL = 1,
    QW_TT_UNKNOWN = 2,
    QW_TT_CONTROL = 3,      /* special: matched in text only with QW_ENCODE_PARSE_SPECIAL */
    QW_TT_USER_DEFINED = 4, /* added, not special: always matched in text */
    QW_TT_UNUSED = 5,
    QW_TT_BYTE = 6,
};

/* Open-addressing hash map from byte strings to ids; keys point into the tokenizer's pool. */
typedef struct qw_strmap {
    uint32_t *slot; /* id + 1; 0 = empty */
    size_t mask;    /* capacity - 1 (a power of two) */
} qw_strmap;

/* Open-addressing hash map from a pair of ids to (rank, merged id). */
typedef struct qw_pairmap {
    uint64_t *key; /* (left << 32 | right) + 1; 0 = empty */
    uint32_t *rank, *merged;
    size_t mask;
} qw_pairmap;

/* One pre-tokenizer step, applied to every fragment the previous step made. */
typedef enum qw_split_behavior {
    QW_SPLIT_ISOLATED = 0, /* matches and the text between them are fragments of their own */
    QW_SPLIT_REMOVED,      /* matches are dropped */
    QW_SPLIT_MERGED_PREV,  /* each match joins the fragment before it */
    QW_SPLIT_MERGED_NEXT,  /* each match joins the fragment after it */
} qw_split_behavior;

typedef struct qw_pretok_step {
    pcre2_code *re;
    int jit; /* pcre2_jit_compile succeeded */
    qw_split_behavior behavior;
    int invert; /* the fragments are what the pattern does NOT match */
    char *pattern;
} qw_pretok_step;

#define QW_TOK_MAX_STEPS 8
/* The largest vocabulary read (2^24 ids; real ones have up to about a million). */
#define QW_TOK_MAX_VOCAB (1 << 24)

/* A text replacement of the normalizer (tokenizer.json Replace): every occurrence of the
 * String `from`, or with a Regex pattern every match of `re` (compiled from `from`, PCRE2 UTF
 * and UCP), becomes `to` (taken literally, as tokenizers' normalizers/replace.rs does). */
typedef struct qw_replace {
    char *from, *to;
    size_t from_len, to_len;
    pcre2_code *re; /* NULL for a String pattern */
} qw_replace;

/* An added token that is matched in the text before the model runs. */
typedef struct qw_added {
    uint32_t id;
    int special;
} qw_added;

struct qw_tokenizer {
    qw_tok_kind kind;
    char *source; /* the file it was read from, for messages */
    uint32_t n_vocab;
    /* Token texts: piece i is pool[off[i] .. off[i+1]); absent ids (holes) are empty. */
    char *pool;
    size_t *off;
    uint8_t *type; /* QW_TT_* per id */
    float *score;  /* QW_TOK_SPM: SentencePiece score per id; else NULL */
    qw_strmap map; /* piece text -> id (normal tokens and added tokens alike) */
    qw_pairmap merges;
    uint32_t n_merges;
    uint32_t *merge_l, *merge_r; /* merges in rank order (for the digest) */
    /* Byte-level: byte b maps to the code point byte_cp[b] (GPT-2 bytes_to_unicode) whose id
     * is byte_id[b] (UINT32_MAX when absent from the vocabulary); cp_byte inverts it. */
    uint32_t byte_id[256];
    int16_t cp_byte[324]; /* code point (< 324) -> byte, -1 if none */
    /* SentencePiece byte fallback: the id of <0xNN>, UINT32_MAX when absent. */
    uint32_t fallback_id[256];
    int byte_fallback, fuse_unk, ignore_merges;
    /* Byte-level: a byte whose symbol is not in the vocabulary is dropped (llama.cpp's BPE
     * session finds no token for it) instead of becoming unk_id (HF's BPE). */
    int drop_missing_bytes;
    int64_t unk_id, bos_id, eos_id;
    int add_bos, add_eos;
    /* Normalizer (tokenizer.json): an optional prefix, then replacements, in file order. */
    char *prepend;
    size_t prepend_len;
    qw_replace repl[4];
    int n_repl;
    /* Metaspace pre-tokenizer (tokenizer.json, HF pre_tokenizers/metaspace.rs): every ' '
     * becomes ms_rep, which is put in front of a fragment that does not start with it
     * (ms_scheme 0 "always": every fragment; 1 "first": only the text's first; 2 "never");
     * its split option is the literal step ms_rep / MergedWithNext in step[]. */
    int ms;
    char ms_rep[8];
    size_t ms_rep_len;
    int ms_scheme;
    /* SPM (GGUF llama): add a space before the text and after each special token. */
    int add_space_prefix;
    /* SPM read from a SentencePiece .model file (spm_model.c): the text is normalized as
     * sentencepiece's normalizer.cc does (remove_extra_whitespaces: leading and trailing
     * spaces dropped, runs cut to one), user-defined pieces are frozen symbols of the merge
     * (user_ids, longest text first: bpe_model.cc PrefixMatch), only NORMAL, USER_DEFINED and
     * UNUSED pieces are merge results, and without byte fallback a run of unknown symbols is
     * one unk_id (sentencepiece_processor.cc). */
    int sp_model, sp_remove_ws;
    uint32_t *user_ids;
    size_t n_user;
    /* SentencePiece families: no token holds another character followed by "▁", so no merge
     * can cross the start of a "▁" run and the text may be cut there into words that are
     * merged one at a time, with the same result (qw_tok_finish checks the vocabulary). */
    int cut_at_space;
    /* Pre-tokenizer: steps in order; none = the whole (normalized) text is one word. */
    qw_pretok_step step[QW_TOK_MAX_STEPS];
    int n_steps;
    /* Added tokens, longest text first (so the longest match wins). */
    qw_added *added;
    size_t n_added;
    char digest[65];
};

/* Hash maps (vocab.c). qw_strmap_build indexes ids [0, n) of t (duplicates: the lower id
 * wins, as llama.cpp's token_to_id). Errors: QS_ENOMEM. */
qs_status qw_strmap_build(qw_tokenizer *t, qs_error *err);
/* Id of the piece `s` (`len` bytes), or -1. */
int64_t qw_strmap_get(const qw_tokenizer *t, const char *s, size_t len);
/* Allocates room for `n` merges. Errors: QS_ENOMEM. */
qs_status qw_pairmap_init(qw_pairmap *m, size_t n, qs_error *err);
/* Inserts (left, right) -> (rank, merged) unless the pair is present (the first rank wins,
 * as llama.cpp's bpe_ranks.emplace). */
void qw_pairmap_put(qw_pairmap *m, uint32_t left, uint32_t right, uint32_t rank, uint32_t merged);
/* Looks a pair up: 1 and (*rank, *merged) when present, else 0. */
int qw_pairmap_get(const qw_pairmap *m, uint32_t left, uint32_t right, uint32_t *rank,
                   uint32_t *merged);
void qw_pairmap_free(qw_pairmap *m);

/* Allocates the per-id arrays for n ids (pool empty). Errors: QS_ENOMEM. */
qs_status qw_tok_alloc(qw_tokenizer *t, uint32_t n, size_t pool_bytes, qs_error *err);

/* GPT-2 bytes_to_unicode (openai/gpt-2 encoder.py): the code point byte b is written as.
 * Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68 map
 * to 256, 257, ... in byte order. */
uint32_t qw_byte_to_cp(uint8_t b);
/* Fills byte_id/cp_byte from the vocabulary (after qw_strmap_build). */
void qw_byte_level_init(qw_tokenizer *t);
/* Appends the UTF-8 bytes of code point cp to buf (room for 4); returns how many. */
size_t qw_utf8_put(uint32_t cp, char *buf);
/* Length of the valid UTF-8 character at s[0..n), 0 if s starts with an invalid sequence
 * (overlong forms, surrogates and code points above U+10FFFF are invalid, RFC 3629). */
size_t qw_utf8_char(const uint8_t *s, size_t n, uint32_t *cp);
/* Offset of the first invalid UTF-8 byte in s[0..n), or n when all of it is valid. */
size_t qw_utf8_check(const uint8_t *s, size_t n);

/* Compiles one pre-tokenizer step (PCRE2_UTF | PCRE2_UCP, JIT when available). `where`
 * names the field in messages. Errors: QS_EFORMAT (with PCRE2's message and offset). */
qs_status qw_pretok_add(qw_tokenizer *t, const char *pattern, size_t len,
                        qw_split_behavior behavior, int invert, const char *where, qs_error *err);
/* The same for a literal string (tokenizer.json Split with a String pattern). */
qs_status qw_pretok_add_literal(qw_tokenizer *t, const char *s, size_t len,
                                qw_split_behavior behavior, int invert, const char *where,
                                qs_error *err);

/* GPT-2's pre-tokenizer pattern as Hugging Face's ByteLevel pre-tokenizer writes it
 * (pre_tokenizers/byte_level.rs). */
#define QW_GPT2_PATTERN                                                                            \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* Adds an added token (marks its type; the list is sorted in qw_tok_finish). */
qs_status qw_tok_add_added(qw_tokenizer *t, uint32_t id, int special, qs_error *err);

/* The BPE and SPM engines (bpe.c, spm.c) and their scratch space. */
typedef struct qw_bpe_scratch qw_bpe_scratch;
qw_bpe_scratch *qw_bpe_scratch_new(void);
void qw_bpe_scratch_free(qw_bpe_scratch *s);
/* Byte-level BPE of one pre-tokenized word (raw bytes; the byte-to-unicode map is applied
 * here). Appends to out. Errors: QS_ENOMEM. */
qs_status qw_bpe_word_bytes(const qw_tokenizer *t, qw_bpe_scratch *s, const uint8_t *w, size_t n,
                            qw_token_vec *out, qs_error *err);
/* SentencePiece-style BPE (HF BPE with byte fallback) of one word of UTF-8 (already
 * normalized: "▁" for spaces). Appends to out. Errors: QS_ENOMEM. */
qs_status qw_bpe_word_utf8(const qw_tokenizer *t, qw_bpe_scratch *s, const uint8_t *w, size_t n,
                           qw_token_vec *out, qs_error *err);
/* llama.cpp's llm_tokenizer_spm_session::tokenize on one fragment (already "▁"-escaped), or
 * sentencepiece's BPE Encode (bpe_model.cc) when t->sp_model. Errors: QS_ENOMEM. */
qs_status qw_spm_tokenize(const qw_tokenizer *t, const uint8_t *w, size_t n, qw_token_vec *out,
                          qs_error *err);

/* Appends one id. Errors: QS_ENOMEM. */
qs_status qw_token_vec_push(qw_token_vec *v, uint32_t id, qs_error *err);

/* Sorts the added tokens (longest first) and computes the digest; called last by every
 * loader. Errors: QS_ENOMEM. */
qs_status qw_tok_finish(qw_tokenizer *t, qs_error *err);

/* The digest of t's canonical description (tokenizer.h, qw_tokenizer_digest) as 64 lowercase
 * hex + NUL into out_hex, the regexes' Unicode tables being those of unicode_version (e.g.
 * "14.0.0"); it enters the digest only when t has a regex (a pre-tokenizer step or a Replace
 * pattern). qw_tok_finish passes qw_tokenizer_regex_unicode_version. */
void qw_tokenizer_compute_digest(const qw_tokenizer *t, const char *unicode_version,
                                 char out_hex[65]);

#endif
