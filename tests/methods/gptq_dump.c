/* Writes small GPTQ problems and qsweep's answers for tools/methods_gptq_reference.py, which
 * solves them again from the paper with its own quantizers. Little-endian binary, per case:
 *   char format[16], char method[16] (NUL-padded: "gptq" or "mr-gptq"); u32 rows, k, t;
 *   f32 x[t][k] (calibration inputs); f32 w[rows][k]; f32 rtn[rows][k] (qk_fake_quant of w);
 *   f32 q[rows][k]: gptq: qk_gptq (damp 0.01, block 128, no act_order) of w with H = 2 x^T x;
 *   mr-gptq: the same of w R with H from x R, R the block Hadamard of the format's group
 *   (qk_block_hadamard), as worker/method makes it; mr-gptq+search: mr-gptq with the group
 *   scales of MR-GPTQ's scale search (scale_search.h).
 * Usage: methods_gptq_dump OUT */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_hadamard.h"
#include "gptq.h"
#include "group_scale.h"
#include "quant.h"

static double uni(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) * 0x1p-52 - 1.0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "wb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    const char *formats[] = {"nvfp4", "mxfp4", "int4_group"};
    const uint32_t rows = 32, k = 256, t = 384;
    float *x = malloc(sizeof(float) * t * k), *w = malloc(sizeof(float) * rows * k);
    float *r = malloc(sizeof(float) * rows * k), *q = malloc(sizeof(float) * rows * k);
    double *h = calloc((size_t)k * k, sizeof *h);
    if (!x || !w || !r || !q || !h) return 1;
    float *xr = malloc(sizeof(float) * t * k);
    if (!xr) return 1;
    for (int c = 0; c < 7; c++) {
        /* gptq on 3 formats, then mr-gptq on nvfp4, mxfp4, then those with the scale search */
        const int fi = c < 5 ? c % 3 : c - 5, mr = c >= 3, search = c >= 5;
        uint64_t s = 0x1234567ull + (uint64_t)fi;
        float base[6][256];
        for (int d = 0; d < 6; d++)
            for (uint32_t j = 0; j < k; j++)
                base[d][j] = (float)uni(&s);
        for (uint32_t i = 0; i < t; i++)
            for (uint32_t j = 0; j < k; j++) {
                double v = 0.1 * uni(&s);
                for (int d = 0; d < 6; d++)
                    v += base[d][j] * uni(&s);
                x[i * k + j] = (float)(j % 29 == 5 ? 6.0 * v : v);
            }
        for (size_t i = 0; i < (size_t)rows * k; i++)
            w[i] = (float)(0.05 * uni(&s));
        const qk_format *fmt = qk_format_by_name(formats[fi]);
        qk_quant_options o = {0};
        qs_error err = {0};
        memcpy(q, w, sizeof(float) * rows * k);
        memcpy(xr, x, sizeof(float) * t * k);
        if (mr) {
            size_t tile = qk_group_cols(fmt, &o, k);
            if (qk_block_hadamard(q, rows, k, tile, 1, &err) ||
                qk_block_hadamard(xr, t, k, tile, 1, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
        }
        memset(h, 0, sizeof *h * k * k);
        qk_gptq_hessian_add(h, k, xr, t, 0);
        if (qk_fake_quant_into(fmt, &o, w, r, rows, k, NULL, &err) ||
            qk_gptq(fmt, &o, q, rows, k, h, &(qk_gptq_options){.scale_search = search}, &err)) {
            fprintf(stderr, "%s: %s\n", formats[fi], err.msg);
            return 1;
        }
        char name[16] = {0}, method[16] = {0};
        strncpy(name, formats[fi], sizeof name - 1);
        strncpy(method, search ? "mr-gptq+search" : mr ? "mr-gptq" : "gptq", sizeof method - 1);
        uint32_t dims[3] = {rows, k, t};
        fwrite(name, 1, 16, f);
        fwrite(method, 1, 16, f);
        fwrite(dims, 4, 3, f);
        fwrite(x, 4, (size_t)t * k, f);
        fwrite(w, 4, (size_t)rows * k, f);
        fwrite(r, 4, (size_t)rows * k, f);
        fwrite(q, 4, (size_t)rows * k, f);
    }
    free(x);
    free(xr);
    free(w);
    free(r);
    free(q);
    free(h);
    return fclose(f) ? 1 : 0;
}
