/* Pre-tokenizer steps: a PCRE2 pattern (UTF-8, Unicode properties) that cuts each fragment
 * of the previous step, as Hugging Face tokenizers' pre_tokenizers::split::Split (behaviours
 * Isolated, Removed, MergedWithPrevious, MergedWithNext; invert) and llama.cpp's
 * unicode_regex_split (each regex of the list applied in turn to every fragment, matches and
 * the text between them both kept: Isolated). The subject of a match is the fragment alone, so
 * a look-ahead such as \s+(?!\S) never sees past the fragment's end. */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

static qs_status qw_pretok_compile(qw_tokenizer *t, const char *pattern, size_t len,
                                   uint32_t options, qw_split_behavior behavior, int invert,
                                   const char *where, qs_error *err) {
    if (t->n_steps == QW_TOK_MAX_STEPS)
        return qs_error_set(err, QS_EUNSUPPORTED, "%s: %s: more than %d pre-tokenizer steps",
                            t->source, where, QW_TOK_MAX_STEPS);
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, options, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return qs_error_set(err, QS_EFORMAT, "%s: %s: PCRE2 refuses the pattern at offset %zu: %s",
                            t->source, where, (size_t)at, (const char *)msg);
    }
    qw_pretok_step *s = &t->step[t->n_steps];
    s->pattern = malloc(len + 1);
    if (!s->pattern) {
        pcre2_code_free(re);
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory", t->source);
    }
    memcpy(s->pattern, pattern, len);
    s->pattern[len] = 0;
    s->re = re;
    s->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    s->behavior = behavior;
    s->invert = invert;
    t->n_steps++;
    return QS_OK;
}

qs_status qw_pretok_add(qw_tokenizer *t, const char *pattern, size_t len,
                        qw_split_behavior behavior, int invert, const char *where, qs_error *err) {
    return qw_pretok_compile(t, pattern, len, PCRE2_UTF | PCRE2_UCP, behavior, invert, where, err);
}

/* PCRE2_LITERAL takes the pattern as plain text; PCRE2 does not allow UCP beside it, and a
 * literal needs no character classes. */
qs_status qw_pretok_add_literal(qw_tokenizer *t, const char *s, size_t len,
                                qw_split_behavior behavior, int invert, const char *where,
                                qs_error *err) {
    return qw_pretok_compile(t, s, len, PCRE2_UTF | PCRE2_LITERAL, behavior, invert, where, err);
}
