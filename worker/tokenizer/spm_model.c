/* SentencePiece .model files: the serialized ModelProto (sentencepiece_model.proto, compiled
 * by protoc-c) read into the SPM family. Which fields decide the ids, as sentencepiece's
 * model_interface.cc, normalizer.cc, bpe_model.cc and sentencepiece_processor.cc use them:
 *  - pieces[i]: text, score (the merge priority of BPE) and type (NORMAL, UNKNOWN, CONTROL,
 *    USER_DEFINED, BYTE <0xNN>, UNUSED; the numbers are GGUF's token types too);
 *  - trainer_spec: model_type (only BPE is read), byte_fallback, unk/bos/eos ids,
 *    treat_whitespace_as_suffix; split_digits and the other split_* options act at training
 *    only (they shaped the pieces; encoding does not split);
 *  - normalizer_spec: precompiled_charsmap (empty for "identity", the only rule read),
 *    add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces. */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "sentencepiece_model.pb-c.h"

typedef Sentencepiece__ModelProto qw_sp_model;

/* Model type names of trainer_spec.model_type, for the refusal message. */
static const char *qw_sp_type_name(Sentencepiece__TrainerSpec__ModelType t) {
    switch (t) {
    case SENTENCEPIECE__TRAINER_SPEC__MODEL_TYPE__UNIGRAM:
        return "unigram";
    case SENTENCEPIECE__TRAINER_SPEC__MODEL_TYPE__WORD:
        return "word";
    case SENTENCEPIECE__TRAINER_SPEC__MODEL_TYPE__CHAR:
        return "char";
    default:
        return "unknown-type";
    }
}

/* The specs qsweep encodes as sentencepiece does; anything else is refused by name. */
static qs_status qw_sp_check_specs(const char *file, const qw_sp_model *m, qs_error *err) {
    const Sentencepiece__TrainerSpec *ts = m->trainer_spec;
    const Sentencepiece__NormalizerSpec *ns = m->normalizer_spec;
    /* an absent trainer_spec has the proto's defaults: model_type UNIGRAM */
    Sentencepiece__TrainerSpec__ModelType type =
        ts ? ts->model_type : SENTENCEPIECE__TRAINER_SPEC__MODEL_TYPE__UNIGRAM;
    if (type != SENTENCEPIECE__TRAINER_SPEC__MODEL_TYPE__BPE)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: SentencePiece %s models are not supported (only BPE models "
                            "are: trainer_spec.model_type = %d)",
                            file, qw_sp_type_name(type), (int)type);
    if (ts->treat_whitespace_as_suffix)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: SentencePiece trainer_spec.treat_whitespace_as_suffix is not "
                            "supported",
                            file);
    if (ns && ns->has_precompiled_charsmap && ns->precompiled_charsmap.len > 0)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: SentencePiece normalizer \"%s\" (a precompiled character map "
                            "of %zu bytes) is not supported; only \"identity\" is",
                            file, ns->name ? ns->name : "", ns->precompiled_charsmap.len);
    if (ns && !ns->escape_whitespaces)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: SentencePiece normalizer_spec.escape_whitespaces = false is "
                            "not supported",
                            file);
    return QS_OK;
}

/* The ids of trainer_spec (unk_id, bos_id, eos_id; -1 = none) checked against the pieces:
 * sentencepiece requires them to name pieces of type UNKNOWN and CONTROL. */
static qs_status qw_sp_special_id(const char *file, const char *field, int32_t id, uint32_t n,
                                  const uint8_t *type, uint8_t want, int64_t *out, qs_error *err) {
    if (id < 0) {
        *out = -1;
        return QS_OK;
    }
    if ((uint32_t)id >= n || type[id] != want)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: trainer_spec.%s = %d is not a piece of type %s (%u pieces)", file,
                            field, (int)id, want == QW_TT_UNKNOWN ? "UNKNOWN" : "CONTROL", n);
    *out = id;
    return QS_OK;
}

/* User-defined pieces, longest text first (the longest prefix match wins). */
static int qw_user_cmp(const void *a, const void *b, void *ctx) {
    const qw_tokenizer *t = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    size_t lx = t->off[x + 1] - t->off[x], ly = t->off[y + 1] - t->off[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static qs_status qw_sp_fill(qw_tokenizer *t, const qw_sp_model *m, qs_error *err) {
    const char *file = t->source;
    qs_status st = qw_sp_check_specs(file, m, err);
    if (st) return st;
    if (m->n_pieces == 0 || m->n_pieces >= QW_TOK_MAX_VOCAB)
        return qs_error_set(err, QS_EFORMAT, "%s: %zu pieces (1 .. %d)", file, m->n_pieces,
                            QW_TOK_MAX_VOCAB - 1);
    uint32_t n = (uint32_t)m->n_pieces;
    size_t pool = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!m->pieces[i]->piece || !m->pieces[i]->piece[0])
            return qs_error_set(err, QS_EFORMAT, "%s: piece %u is empty", file, i);
        pool += strlen(m->pieces[i]->piece);
    }
    if ((st = qw_tok_alloc(t, n, pool, err))) return st;
    t->score = calloc(n, sizeof *t->score);
    if (!t->score) return qs_error_set(err, QS_ENOMEM, "%s: out of memory", file);
    size_t at = 0;
    int bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        const Sentencepiece__ModelProto__SentencePiece *p = m->pieces[i];
        size_t len = strlen(p->piece);
        t->off[i] = at;
        memcpy(t->pool + at, p->piece, len);
        at += len;
        t->score[i] = p->score;
        int ty = (int)p->type;
        if (ty < QW_TT_NORMAL || ty > QW_TT_BYTE)
            return qs_error_set(err, QS_EFORMAT,
                                "%s: piece %u (\"%s\"): type %d is not a "
                                "SentencePiece piece type (1 .. 6)",
                                file, i, p->piece, ty);
        t->type[i] = (uint8_t)ty;
        bytes += ty == QW_TT_BYTE;
    }
    t->off[n] = at;
    const Sentencepiece__TrainerSpec *ts = m->trainer_spec;
    t->byte_fallback = ts->byte_fallback;
    if (bytes && !t->byte_fallback)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: %d BYTE pieces but trainer_spec.byte_fallback is false", file,
                            bytes);
    if ((st = qw_sp_special_id(file, "unk_id", ts->unk_id, n, t->type, QW_TT_UNKNOWN, &t->unk_id,
                               err)) ||
        (st = qw_sp_special_id(file, "bos_id", ts->bos_id, n, t->type, QW_TT_CONTROL, &t->bos_id,
                               err)) ||
        (st = qw_sp_special_id(file, "eos_id", ts->eos_id, n, t->type, QW_TT_CONTROL, &t->eos_id,
                               err)))
        return st;
    if ((st = qw_strmap_build(t, err))) return st;
    const Sentencepiece__NormalizerSpec *ns = m->normalizer_spec;
    t->kind = QW_TOK_SPM;
    t->sp_model = 1;
    t->add_space_prefix = ns ? ns->add_dummy_prefix : 1;
    t->sp_remove_ws = ns ? ns->remove_extra_whitespaces : 1;
    /* Llama 2 (transformers' LlamaTokenizer, llama.cpp) puts BOS before a text */
    t->add_bos = 1;
    t->add_eos = 0;
    for (uint32_t id = 0; id < n; id++) {
        uint8_t ty = t->type[id];
        if (ty == QW_TT_USER_DEFINED) {
            uint32_t *u = realloc(t->user_ids, (t->n_user + 1) * sizeof *u);
            if (!u) return qs_error_set(err, QS_ENOMEM, "%s: out of memory", file);
            t->user_ids = u;
            t->user_ids[t->n_user++] = id;
        } else if (ty == QW_TT_CONTROL || ty == QW_TT_UNKNOWN) {
            /* never matched in text by sentencepiece; here only with QW_ENCODE_PARSE_SPECIAL */
            if ((st = qw_tok_add_added(t, id, 1, err))) return st;
            t->type[id] = ty;
        }
    }
    if (t->n_user) qsort_r(t->user_ids, t->n_user, sizeof *t->user_ids, qw_user_cmp, t);
    return qw_tok_finish(t, err);
}

qs_status qw_tokenizer_from_spm_model(const char *file, const uint8_t *data, size_t size,
                                      qw_tokenizer **out, qs_error *err) {
    *out = NULL;
    qw_sp_model *m = sentencepiece__model_proto__unpack(NULL, size, data);
    if (!m)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: not a SentencePiece model (the %zu bytes do not parse as a "
                            "ModelProto of sentencepiece_model.proto)",
                            file, size);
    qw_tokenizer *t = calloc(1, sizeof *t);
    if (t) t->source = malloc(strlen(file) + 1);
    if (!t || !t->source) {
        free(t);
        sentencepiece__model_proto__free_unpacked(m, NULL);
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory", file);
    }
    strcpy(t->source, file);
    t->unk_id = t->bos_id = t->eos_id = -1;
    qs_status st = qw_sp_fill(t, m, err);
    sentencepiece__model_proto__free_unpacked(m, NULL);
    if (st) {
        qw_tokenizer_free(t);
        return st;
    }
    *out = t;
    return QS_OK;
}
