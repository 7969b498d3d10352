/* Internals of worker/export shared by its layouts. */
#ifndef QW_EXPORT_INTERNAL_H
#define QW_EXPORT_INTERNAL_H

#include "checkpoint.h"
#include "export.h"
#include "model.h"

/* Writes the GGUF layout of r into the folder tmp (gguf_export.c): the source GGUF with the
 * policy's MXFP4 linears. m holds the applied policy. Errors: export.h's. */
qs_status qw_export_gguf(const qw_export_request *r, qw_checkpoint *ck, qw_model *m,
                         const char *tmp, qs_error *err);

#endif
