/* Exporting a quantization policy as a checkpoint that serving engines load: the codes and
 * scales the engine's quantizer produced for the policy (the packed forms of
 * qw_model_apply_policy, model.h), laid out in a serving format. docs/export.md has the formats,
 * what each can express, and how the writers are checked.
 *
 *   compressed-tensors  (vLLM): model.safetensors with per linear weight_packed (uint8, two
 *                       E2M1 codes a byte, the even column in the low nibble), weight_scale
 *                       (E4M3 per 16 for NVFP4, E8M0 per 32 for MXFP4) and, for NVFP4,
 *                       weight_global_scale (FP32, the encode scale 2688/amax: the reference
 *                       divides by it, compressed_tensors/quantization/lifecycle/
 *                       forward_helpers.py _dequantize); config.json's quantization_config
 *                       names one config group per (weight format, activation format) with
 *                       its linears as targets, and every other linear in `ignore`.
 *   modelopt            (TensorRT-LLM; modelopt_export.c): per NVFP4 linear weight (packed as
 *                       above), weight_scale (E4M3), weight_scale_2 (FP32 decode scale) and
 *                       input_scale (FP32, amax/(6*448) of its input over the calibration
 *                       chunks), hf_quant_config.json and quant_method "modelopt".
 *   gguf                (llama.cpp; gguf_export.c): the source GGUF, MXFP4 linears in ggml's type.
 * A job's method (worker/method) is applied after the policy, as the worker applies it, and
 * the linears GPTQ made are written from GPTQ's own codes and scales (qw_method_packed); a
 * method that transforms the input online (a rotation, SmoothQuant) is refused, since no layout
 * holds that transform.
 * Linears the policy leaves unquantized, norms and embeddings are written in their stored
 * type (F32, F16, BF16; any other type, e.g. a GGUF source's Q4_1, as its exact FP32 values). */
#ifndef QW_EXPORT_H
#define QW_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "policy.h"

struct qw_method_plan; /* worker/method method_apply.h */

/* Serving layouts. */
typedef enum qw_export_layout {
    QW_EXPORT_COMPRESSED_TENSORS = 0,
    QW_EXPORT_GGUF = 1, /* a GGUF source with its MXFP4 linears as ggml's MXFP4 type (llama.cpp);
                           gguf_export.c */
    QW_EXPORT_MODELOPT = 2, /* ModelOpt's NVFP4 (TensorRT-LLM, vLLM modelopt_fp4): W4A4 with a
                               calibrated static input_scale; modelopt_export.c */
} qw_export_layout;

/* The layout named `name` ("compressed-tensors", "gguf", "modelopt"). Errors: QS_EINVAL naming
 * the layouts. */
qs_status qw_export_layout_by_name(const char *name, qw_export_layout *out, qs_error *err);

/* Progress: `done` of `total` steps (the linears quantized, then the files written). */
typedef void (*qw_export_progress_fn)(void *ctx, size_t done, size_t total);

typedef struct qw_export_request {
    const char *model_path;  /* the source checkpoint (HF folder or GGUF file) */
    const qw_policy *policy; /* what to quantize, as an eval job names it (worker/jobs) */
    const struct qw_method_plan *method; /* the job's method (qw_export_method_from_spec), NULL
                                            for round-to-nearest: gptq, or per-linear with gptq
                                            linears only */
    qw_export_layout layout;
    const char *out_dir;            /* the folder to create; must not exist */
    int threads;                    /* 0 = all */
    qw_export_progress_fn progress; /* may be NULL */
    void *progress_ctx;
    /* modelopt: the calibration chunks its input_scale comes from, calib_chunks runs of
       calib_ctx tokens, each a fresh context (ignored by the other layouts) */
    const uint32_t *calib;
    size_t calib_chunks;
    int calib_ctx;
} qw_export_request;

/* Writes the checkpoint: every file into a fresh folder beside out_dir ("<out_dir>.tmp-XXXXXX"),
 * renamed to out_dir when complete, so an interrupted or failed export leaves nothing under
 * out_dir (and the temporary folder is removed on failure). Copies config.json (with its
 * quantization_config) and the tokenizer files (tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json, generation_config.json, tokenizer.model) of an HF source; a GGUF
 * source gets a config.json made from its llama.* keys and no tokenizer file.
 * modelopt runs the calibration chunks through the model before the policy is applied.
 * Errors: QS_EINVAL (out_dir exists; a policy whose layers differ from the model's; modelopt
 * without calibration chunks),
 * QS_EUNSUPPORTED naming the linear and what the layout cannot hold (a format other than
 * nvfp4/nvfp4_2d/mxfp4, quantized embeddings, a quantized lm_head tied to the embeddings,
 * NVFP4 activations (measured with a dynamic per-tensor scale that compressed-tensors stores
 * as a calibrated constant), activations quantized without weights, rows that are not whole
 * blocks, an NVFP4 tensor under tiny_amax exact; naming the method: a rotation or SmoothQuant,
 * whose online input transform no layout holds), QS_EIO naming the path (ENOSPC: the disk
 * is full), the checkpoint's and engine's errors. */
qs_status qw_export_write(const qw_export_request *r, qs_error *err);

/* The method of an eval job's spec (JSON; kinds/method.h) as a plan for
 * qw_export_request.method, its calibration chunks read from their token file as the worker
 * reads them (method_spec.h); *out NULL for round-to-nearest. Heap: qw_export_method_free.
 * Errors: QS_EFORMAT (the spec), method_spec.h's. */
qs_status qw_export_method_from_spec(const char *spec_json, struct qw_method_plan **out,
                                     qs_error *err);
void qw_export_method_free(struct qw_method_plan *plan);

#endif
