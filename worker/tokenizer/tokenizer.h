/* qw_tokenizer: the models' own tokenizers, encode (UTF-8 text -> token ids) and decode.
 *
 * Three families, read from the file that ships with the model:
 *  - byte-level BPE from a Hugging Face tokenizer.json (GPT-2 byte-to-unicode map, merges by
 *    rank, the pre-tokenizer regexes of the file run through PCRE2): Llama 3/3.1/3.2, SmolLM2;
 *  - SentencePiece-style BPE from a tokenizer.json ("▁" for spaces, byte fallback <0xNN>, the
 *    normalizer's Prepend/Replace steps): Llama 2;
 *  - SentencePiece BPE from a SentencePiece .model file (Llama 2's tokenizer.model), encoded
 *    as the sentencepiece library does;
 *  - the tokenizer embedded in a GGUF file (tokenizer.ggml.model "gpt2" with the pre-tokenizer
 *    that tokenizer.ggml.pre names, or "llama", SentencePiece scores), as llama.cpp's
 *    llama-vocab.cpp reads and runs it.
 * Added tokens marked special (control tokens) are never produced from plain text unless the
 * caller asks (QW_ENCODE_PARSE_SPECIAL); non-special added tokens (user-defined) always are,
 * as both Hugging Face tokenizers and llama.cpp do.
 *
 * A tokenizer is immutable once opened: one may be shared by threads that encode at once.
 */
#ifndef QW_TOKENIZER_H
#define QW_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "tokens.h"

typedef struct qw_tokenizer qw_tokenizer;

/* Opens the tokenizer of `path`: a tokenizer.json file, a directory holding one (a Hugging
 * Face checkpoint; its tokenizer_config.json, when present, says add_bos_token/add_eos_token)
 * or else a SentencePiece tokenizer.model, a SentencePiece .model file (a name ending in
 * ".model", or a file that starts with a ModelProto's first field rather than JSON), or a
 * .gguf file (its tokenizer.ggml.* keys). Errors name the file and the field or offset:
 * QS_ENOTFOUND (no such file, a directory without tokenizer.json or tokenizer.model, a GGUF file
 * without tokenizer.ggml.model), QS_EIO, QS_EFORMAT (not JSON, a field missing or of the wrong
 * type, a merge naming a token not in the vocab, a regex PCRE2 refuses: with PCRE2's message and
 * offset; ids sparser than 2 x the tokens + 1024 or above 2^24), QS_EUNSUPPORTED (another
 * model type such as WordPiece or Unigram, a normalizer or pre-tokenizer not implemented, a
 * GGUF pre-tokenizer name not in the table), QS_ENOMEM. */
qs_status qw_tokenizer_open(const char *path, qw_tokenizer **out, qs_error *err);

/* Parses a tokenizer.json held in memory (`len` bytes, need not be NUL-terminated); `file`
 * names it in messages. add_bos/add_eos: -1 = as the file's post-processor says (a
 * TemplateProcessing that puts a special token before/after $A), else 0/1. Errors as
 * qw_tokenizer_open. */
qs_status qw_tokenizer_from_json(const char *file, const char *text, size_t len, int add_bos,
                                 int add_eos, qw_tokenizer **out, qs_error *err);

/* Reads the tokenizer of a GGUF file held in memory (the whole file, or only its header and
 * metadata: tensors are not looked at). Errors as qw_tokenizer_open. */
qs_status qw_tokenizer_from_gguf(const char *file, const uint8_t *data, size_t size,
                                 qw_tokenizer **out, qs_error *err);

/* Reads a SentencePiece model file (the serialized ModelProto of sentencepiece_model.proto,
 * `size` bytes at data): pieces, scores and types, trainer_spec (model_type, byte_fallback,
 * unk/bos/eos ids) and normalizer_spec (add_dummy_prefix, remove_extra_whitespaces). Encodes
 * as sentencepiece's SentencePieceProcessor::Encode does for BPE models (no BOS/EOS there;
 * QW_ENCODE_ADD_SPECIAL adds BOS, as Llama 2 does). Errors name `file`: QS_EFORMAT (not a
 * ModelProto, no pieces, an id out of range, byte pieces without byte_fallback),
 * QS_EUNSUPPORTED ("SentencePiece unigram models are not supported", word and char models, a
 * normalizer with a precompiled character map such as nmt_nfkc, escape_whitespaces off,
 * treat_whitespace_as_suffix), QS_ENOMEM. */
qs_status qw_tokenizer_from_spm_model(const char *file, const uint8_t *data, size_t size,
                                      qw_tokenizer **out, qs_error *err);

/* Frees everything. NULL is a no-op. */
void qw_tokenizer_free(qw_tokenizer *t);

/* Flags of qw_tokenizer_encode. */
enum {
    QW_ENCODE_PARSE_SPECIAL = 1, /* match special (control) tokens' text in the input */
    QW_ENCODE_ADD_SPECIAL = 2,   /* add BOS/EOS as the model's config says (add_bos/add_eos) */
};

/* A growable vector of token ids; zero-initialise, free with qw_token_vec_free. */
typedef struct qw_token_vec {
    uint32_t *ids;
    size_t n, cap;
} qw_token_vec;

/* Frees ids and zeroes the vector. */
void qw_token_vec_free(qw_token_vec *v);

/* Appends the ids of `len` bytes of UTF-8 text to *out (which keeps what it held).
 * Errors: QS_EINVAL (invalid UTF-8: names the byte offset), QS_ENOMEM, QS_EFORMAT (PCRE2 failed
 * on a fragment: names its offset). On error *out holds what it held before the call. */
qs_status qw_tokenizer_encode(const qw_tokenizer *t, const char *text, size_t len, unsigned flags,
                              qw_token_vec *out, qs_error *err);

/* Decodes n ids to UTF-8 text: *text (heap, NUL-terminated, *len bytes without the NUL).
 * skip_special: leave out special (control) tokens such as BOS. Byte-level pieces and byte
 * fallback tokens give raw bytes, so a cut through a character can give invalid UTF-8 (as
 * llama.cpp's detokenizer does). The leading space that encode adds for SentencePiece
 * models is removed (the Strip decoder of tokenizer.json; llama.cpp's remove_space).
 * Errors: QS_EINVAL (an id >= the vocabulary size: names its index), QS_ENOMEM. */
qs_status qw_tokenizer_decode(const qw_tokenizer *t, const uint32_t *ids, size_t n,
                              int skip_special, char **text, size_t *len, qs_error *err);

/* Number of ids (the largest id + 1, added tokens included). */
uint32_t qw_tokenizer_vocab_size(const qw_tokenizer *t);
/* BOS / EOS ids, -1 when the model has none. */
int64_t qw_tokenizer_bos(const qw_tokenizer *t);
int64_t qw_tokenizer_eos(const qw_tokenizer *t);
/* Whether QW_ENCODE_ADD_SPECIAL adds BOS (chunks of an evaluation start with BOS then, as
 * llama.cpp's perplexity does). */
int qw_tokenizer_adds_bos(const qw_tokenizer *t);
/* The text of id (not NUL-terminated: *len bytes, as stored in the vocabulary, e.g. "Ġthe"
 * for byte-level BPE); NULL for an id out of range. */
const char *qw_tokenizer_piece(const qw_tokenizer *t, uint32_t id, size_t *len);
/* Whether id is a special (control) token. */
int qw_tokenizer_is_special(const qw_tokenizer *t, uint32_t id);
/* Short name of the family: "byte-bpe", "spm-bpe" (tokenizer.json) or "spm" (GGUF llama). */
const char *qw_tokenizer_kind(const qw_tokenizer *t);

/* The tokenizer's digest, 64 lowercase hex + NUL: BLAKE2b-256 (libsodium crypto_generichash)
 * of a canonical description of everything that decides the ids: family, normalizer,
 * pre-tokenizer regexes, every token's bytes and kind in id order, merges in rank order or
 * scores, BOS/EOS ids and add flags, and, for a tokenizer with a regex (a pre-tokenizer step
 * or a Replace pattern), the Unicode version of the PCRE2 library that runs it
 * (qw_tokenizer_regex_unicode_version): its tables decide what \p{L} or \p{N} matches, so
 * token files and caches made under another PCRE2 build are not mixed in. Two files that
 * describe the same tokenizer the same way get the same digest on the same PCRE2; a change to
 * any of these changes it. */
const char *qw_tokenizer_digest(const qw_tokenizer *t);

/* The Unicode version of the linked PCRE2 library's tables (pcre2_config
 * PCRE2_CONFIG_UNICODE_VERSION, e.g. "14.0.0" for Debian's 10.42) into out (cap bytes),
 * "unknown" when the library does not say. */
void qw_tokenizer_regex_unicode_version(char *out, size_t cap);

/* Whether the token file `tok` (read from tokens_path) may be evaluated on the model at
 * model_path (an HF directory or a .gguf file), for grid validation: a version 2 file must
 * name the model's tokenizer digest; a version 1 file (no digest) must have the tokenizer's
 * vocabulary size. A model without a tokenizer (no tokenizer.json, no tokenizer.ggml.* keys)
 * is not checked (QS_OK): the caller's id-range check is all there is then.
 * Errors: QS_EINVAL (the pairing is refused: names both files and both digests or sizes),
 * and qw_tokenizer_open's for a tokenizer that exists but cannot be read. */
qs_status qw_tokenizer_check_tokens(const char *tokens_path, const qw_tokens *tok,
                                    const char *model_path, qs_error *err);

/* The version of the tokenizer code (normalizers, pre-tokenizers, BPE/unigram encoders): part
 * of the text-dataset cache key, so raising it after a change to the ids the code gives for a
 * tokenizer makes every cached text tokenized again instead of serving the old ids. */
#define QW_TOKENIZER_CODE_VERSION 1

/* A text file as an evaluation dataset (`dataset: {text: FILE}`), for the grid and
 * job side: the text's own ids (no BOS: evaluation puts BOS at each chunk start when
 * qw_tokenizer_adds_bos says so) through the model's tokenizer, computed once per
 * (tokenizer digest, text digest, QW_TOKENIZER_CODE_VERSION) into the version 2 token file
 * <cache>/<tokenizer digest>-<text digest>-c<code version>.tokens, with that file's BLAKE2b-256
 * hex digest and a newline in <that path>.b2 beside it (both written atomically,
 * common/replace_file.h), and loaded from there into *out. A cached file is used only when its
 * digest is the recorded one and its header names this tokenizer's digest and vocabulary
 * size; otherwise (flipped byte, truncated, no .b2) it is rebuilt, with a warning on stderr. Its
 * out->digest (BLAKE2b-256 of that file) is the dataset digest for job keys: it covers the ids
 * and the tokenizer digest of the header, so another text or another tokenizer gives another
 * key, and the same text given as a `qsweep tokenize` file gives the same digest.
 * tokens_path (tokens_path_cap bytes) gets the cached file's path. cache_dir NULL or "":
 * $QSWEEP_TOKENS_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/tokens (created 0700).
 * text_path must be a regular file after symlinks are followed.
 * Errors: QS_EINVAL (invalid UTF-8: names the text file and the byte offset; a directory:
 * "Is a directory"; a FIFO, socket or device: names which, without ever blocking on it),
 * QS_ENOTFOUND (no text file; a model without a tokenizer), QS_EIO, QS_ENOMEM, and
 * qw_tokenizer_open's. On error *out is zeroed. */
qs_status qw_text_dataset(const char *model_path, const char *text_path, const char *cache_dir,
                          qw_tokens *out, char *tokens_path, size_t tokens_path_cap, qs_error *err);

#endif
