/* Internals of worker/export shared by its layouts. */
#ifndef QW_EXPORT_INTERNAL_H
#define QW_EXPORT_INTERNAL_H

#include <jansson.h>

#include "checkpoint.h"
#include "export.h"
#include "method_spec.h"
#include "model.h"
#include "st_writer.h"

/* One linear of the model: its HF module name and its spec in the policy. */
typedef struct ex_linear {
    char name[96];
    int index; /* the engine's tensor index (model.h qw_model_packed) */
    const qw_quant_spec *spec;
    int group; /* config group, -1 = written as stored (unquantized) */
} ex_linear;

/* The model's linears (block linears in order, then lm_head) with their HF names and specs in
 * p; *out is heap (free()), groups 0. Errors: QS_ENOMEM. */
qs_status qw_export_list_linears(const qw_model *m, const qw_policy *p, ex_linear **out, int *n,
                                 qs_error *err);

/* The packed form written for linear `index` (qw_model_packed's numbering): GPTQ's own codes
 * and scales where the job's method made the linear (ms, NULL without a method), else the
 * engine's; NULL where neither holds one. */
const qk_packed *qw_export_packed(const qw_model *m, const qw_method_state *ms, int index);

/* dir/name into out (cap bytes); 0, or -1 when it does not fit. */
int qw_export_path_join(char *out, size_t cap, const char *dir, const char *name);

/* j as indented JSON (a trailing newline) in the new file dir/name. Errors: QS_EIO, QS_ENOMEM. */
qs_status qw_export_write_json(const char *dir, const char *name, json_t *j, qs_error *err);

/* The Hugging Face files of a safetensors layout (hf_folder.c), after the caller added the packed tensors of
 * the linears with group >= 0 to w: every other tensor of ck as stored into w, w written as
 * tmp/model.safetensors, config.json (the source's, or one from a GGUF source's keys) with
 * qconfig as its quantization_config (taken: decref'd here), an HF source's tokenizer files.
 * Steps *done (3 of total) through r->progress. Errors: export.h's. */
qs_status qw_export_finish(const qw_export_request *r, qw_checkpoint *ck, qw_st_writer *w,
                           const ex_linear *lin, int n_lin, const char *tmp, json_t *qconfig,
                           size_t *done, size_t total, qs_error *err);

/* Writes the compressed-tensors layout of r into the folder tmp (ct_export.c): every linear the
 * policy quantizes in a config group of its (weight, activation) formats, the others in the
 * ignore list as stored. m holds the applied policy, ms its method (or NULL). Errors:
 * export.h's. */
qs_status qw_export_ct(const qw_export_request *r, qw_checkpoint *ck, qw_model *m,
                       const qw_method_state *ms, const char *tmp, qs_error *err);

/* Writes the GGUF layout of r into the folder tmp (gguf_export.c): the source GGUF with the
 * policy's MXFP4 linears. m holds the applied policy, ms its method (or NULL). Errors:
 * export.h's. */
qs_status qw_export_gguf(const qw_export_request *r, qw_checkpoint *ck, qw_model *m,
                         const qw_method_state *ms, const char *tmp, qs_error *err);

/* ModelOpt's layout (modelopt_export.c). Calibration runs on the model before the policy is
 * applied: *amax gets, for each linear the policy puts in NVFP4 (index as ex_linear.index;
 * others 0), the largest |x| its input took over r's calibration chunks (heap, free()).
 * Errors: QS_EINVAL (no calibration chunks), the forward's, QS_ENOMEM. */
qs_status qw_export_modelopt_calibrate(const qw_export_request *r, qw_model *m, float **amax,
                                       qs_error *err);
/* Writes the layout into tmp; m holds the applied policy, ms its method (or NULL), amax what
 * calibration found. */
qs_status qw_export_modelopt(const qw_export_request *r, qw_checkpoint *ck, qw_model *m,
                             const qw_method_state *ms, const float *amax, const char *tmp,
                             qs_error *err);

#endif
