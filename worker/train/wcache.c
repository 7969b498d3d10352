/* Quantized weights kept from one optimizer step to the next (wcache.h). */
#include "wcache.h"

#include <stdlib.h>
#include <string.h>

#include "format.h"

int qw_wcache_keeps(const qw_operand_spec *spec) {
    return spec->mode == QW_MODE_QUANT && spec->rounding != QK_ROUND_SR && !spec->rht;
}

int qw_wcache_dgrad_is_transpose(const qw_operand_spec *fw, const qw_operand_spec *dw) {
    if (!qw_wcache_keeps(fw) || !qw_wcache_keeps(dw)) return 0;
    if (fw->fmt != dw->fmt || fw->rounding != dw->rounding) return 0;
    const qk_format *f = fw->fmt;
    /* square blocks from the origin partition W and W^T alike; a tensor-wide scale has no
     * direction at all */
    return (f->block_rows > 1 && f->block_rows == f->block) || f->rule == QK_RULE_TENSOR;
}

/* Bytes of one slot of a [out x in] weight, rounded to 64 so that every slot is aligned. */
static size_t slot_bytes(int in, int out) {
    return ((size_t)in * (size_t)out * sizeof(float) + 63) & ~(size_t)63;
}

/* Which slots of block `layer`'s linears r keeps: bit 0 fprop's, bit 1 dgrad's. */
static int kept(const qw_recipe *r, int layer, int n_layers) {
    qw_operand_spec fw, dw;
    qw_recipe_operand(r, layer, n_layers, QW_FPROP_W, &fw);
    qw_recipe_operand(r, layer, n_layers, QW_DGRAD_W, &dw);
    int bits = qw_wcache_keeps(&fw);
    if (qw_wcache_keeps(&dw) && !qw_wcache_dgrad_is_transpose(&fw, &dw)) bits |= 2;
    return bits;
}

qs_status qw_wcache_init(qw_wcache *c, qw_backend *be, const qw_recipe *r, int n_layers, int kinds,
                         const int *ins, const int *outs, qs_error *err) {
    memset(c, 0, sizeof *c);
    c->be = be;
    c->n_linears = n_layers * kinds;
    size_t bytes = 0;
    /* a backend that quantizes both inputs on the device (ops.h gemm_abt_quant) takes the
     * source weight, so nothing kept would be read */
    for (int l = 0; l < n_layers && !be->ops->gemm_abt_quant; l++) {
        int bits = kept(r, l, n_layers);
        for (int k = 0; k < kinds; k++)
            for (int s = 0; s < 2; s++)
                if (bits >> s & 1) bytes += slot_bytes(ins[k], outs[k]);
    }
    c->slot = calloc((size_t)c->n_linears * 2, sizeof *c->slot);
    c->valid = calloc((size_t)c->n_linears * 2, 1);
    if (!c->slot || !c->valid) {
        qw_wcache_release(c);
        return qs_error_set(err, QS_ENOMEM, "weight cache: %d linears", n_layers * kinds);
    }
    if (bytes == 0) return QS_OK;
    c->mem = be->ops->alloc(be, bytes);
    if (!c->mem) {
        qw_wcache_release(c);
        return qs_error_set(err, QS_ENOMEM, "weight cache: %zu bytes of %s memory", bytes,
                            be->ops->name);
    }
    c->bytes = bytes;
    char *p = c->mem;
    for (int l = 0; l < n_layers && !be->ops->gemm_abt_quant; l++) {
        int bits = kept(r, l, n_layers);
        for (int k = 0; k < kinds; k++)
            for (int s = 0; s < 2; s++)
                if (bits >> s & 1) {
                    c->slot[2 * (l * kinds + k) + s] = (float *)(void *)p;
                    p += slot_bytes(ins[k], outs[k]);
                }
    }
    return QS_OK;
}

void qw_wcache_release(qw_wcache *c) {
    if (c->mem) c->be->ops->free(c->be, c->mem);
    free(c->slot);
    free(c->valid);
    c->mem = NULL;
    c->slot = NULL;
    c->valid = NULL;
    c->bytes = 0;
    c->n_linears = 0;
}

void qw_wcache_invalidate(qw_wcache *c) {
    if (c && c->valid) memset(c->valid, 0, (size_t)c->n_linears * 2);
}

float *qw_wcache_slot(const qw_wcache *c, int linear, qw_gemm_operand op) {
    if (!c || !c->slot || linear < 0 || linear >= c->n_linears) return NULL;
    if (op != QW_FPROP_W && op != QW_DGRAD_W) return NULL;
    return c->slot[2 * linear + (op == QW_DGRAD_W)];
}
