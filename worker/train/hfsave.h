/* Writes a trained model as a Hugging Face checkpoint directory: config.json (the classic
 * Llama layout qsweep's loader and transformers read: architectures LlamaForCausalLM,
 * hidden_size, ..., rope_theta, rope_scaling, tie_word_embeddings, torch_dtype float32) and
 * model.safetensors (F32, every tensor under its HF name, lm_head absent when tied), each
 * written to a temporary file, fsynced and renamed into place, so a reader never sees half a
 * checkpoint. Safetensors layout: u64 LE header length, JSON header (padded with spaces to a
 * multiple of 8), raw little-endian data (huggingface/safetensors README). */
#ifndef QW_TRAIN_HFSAVE_H
#define QW_TRAIN_HFSAVE_H

#include "error.h"
#include "tmodel.h"

/* Creates dir if missing (one level) and writes the two files. Errors: QS_EIO naming the path
 * and errno text. */
qs_status qw_tmodel_save_hf(qw_tmodel *m, const char *dir, qs_error *err);

#endif
