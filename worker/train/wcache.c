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

/* Bytes of one slot: the backend's operand of spec for a [rows x k] input, rounded to 256 so
 * that every slot is aligned as cuBLASLt's operands need; 0 where nothing is kept. */
static size_t slot_bytes(qw_backend *be, const qw_operand_spec *spec, int rows, int k) {
    size_t n = be->ops->quant_operand_bytes(be, spec->fmt, (size_t)rows, (size_t)k);
    return (n + 255) & ~(size_t)255;
}

/* Bytes of the slots of block `layer`'s linear of shape out x in under r: fprop's into *fb,
 * dgrad's into *db (0: not kept). */
static void kept(qw_backend *be, int packed, const qw_recipe *r, int layer, int n_layers, int in,
                 int out, size_t *fb, size_t *db) {
    qw_operand_spec fx, fw, dy, dw;
    qw_recipe_operand(r, layer, n_layers, QW_FPROP_X, &fx);
    qw_recipe_operand(r, layer, n_layers, QW_FPROP_W, &fw);
    qw_recipe_operand(r, layer, n_layers, QW_DGRAD_DY, &dy);
    qw_recipe_operand(r, layer, n_layers, QW_DGRAD_W, &dw);
    *fb = *db = 0;
    /* a packed operand is read only by the block-scaled GEMM, which quantizes both inputs */
    if (qw_wcache_keeps(&fw) && (!packed || fx.mode == QW_MODE_QUANT))
        *fb = slot_bytes(be, &fw, out, in);
    if (qw_wcache_keeps(&dw) && (!packed || dy.mode == QW_MODE_QUANT) &&
        (packed || !qw_wcache_dgrad_is_transpose(&fw, &dw)))
        *db = slot_bytes(be, &dw, in, out);
}

qs_status qw_wcache_init(qw_wcache *c, qw_backend *be, const qw_recipe *r, int n_layers, int kinds,
                         const int *ins, const int *outs, qs_error *err) {
    memset(c, 0, sizeof *c);
    c->be = be;
    c->n_linears = n_layers * kinds;
    c->packed = be->ops->gemm_abt_quant_kept != NULL;
    c->slot = calloc((size_t)c->n_linears * 2, sizeof *c->slot);
    c->valid = calloc((size_t)c->n_linears * 2, 1);
    size_t *sizes = calloc((size_t)c->n_linears * 2 + 1, sizeof *sizes);
    if (!c->slot || !c->valid || !sizes) {
        free(sizes);
        qw_wcache_release(c);
        return qs_error_set(err, QS_ENOMEM, "weight cache: %d linears", n_layers * kinds);
    }
    size_t bytes = 0;
    for (int l = 0; l < n_layers && be->ops->quant_operand; l++)
        for (int k = 0; k < kinds; k++) {
            size_t *s = &sizes[2 * (l * kinds + k)];
            kept(be, c->packed, r, l, n_layers, ins[k], outs[k], &s[0], &s[1]);
            bytes += s[0] + s[1];
        }
    if (bytes == 0) {
        free(sizes);
        return QS_OK;
    }
    c->mem = be->ops->alloc(be, bytes);
    if (!c->mem) {
        free(sizes);
        qw_wcache_release(c);
        return qs_error_set(err, QS_ENOMEM, "weight cache: %zu bytes of %s memory", bytes,
                            be->ops->name);
    }
    c->bytes = bytes;
    char *p = c->mem;
    for (int i = 0; i < 2 * c->n_linears; i++)
        if (sizes[i]) {
            c->slot[i] = p;
            p += sizes[i];
        }
    free(sizes);
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

/* Index of the slot of (linear, op), or -1 when there is none. */
static int slot_index(const qw_wcache *c, int linear, qw_gemm_operand op) {
    if (!c || !c->slot || linear < 0 || linear >= c->n_linears) return -1;
    if (op != QW_FPROP_W && op != QW_DGRAD_W) return -1;
    int i = 2 * linear + (op == QW_DGRAD_W);
    return c->slot[i] ? i : -1;
}

void *qw_wcache_slot(const qw_wcache *c, int linear, qw_gemm_operand op) {
    int i = slot_index(c, linear, op);
    return i < 0 ? NULL : c->slot[i];
}

unsigned char *qw_wcache_valid(const qw_wcache *c, int linear, qw_gemm_operand op) {
    int i = slot_index(c, linear, op);
    return i < 0 ? NULL : &c->valid[i];
}
