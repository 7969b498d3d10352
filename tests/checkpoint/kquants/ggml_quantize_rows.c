/* Test-data tool (not part of qsweep): quantizes FP32 rows with llama.cpp's own quantizer,
 * ggml_quantize_chunk (ggml.h) -- the function llama-quantize calls for every tensor -- so
 * make_kquants.py can store them in a GGUF file.
 * Usage: ggml_quantize_rows TYPE N_PER_ROW IN.f32 OUT.bin
 *   TYPE: a ggml type name as ggml_type_name() spells it ("q4_K", "iq4_nl", ...);
 *   IN.f32: rows x N_PER_ROW little-endian floats; OUT.bin: the quantized rows.
 * Built by build_ggml_quantize.sh against libggml-base from the llama-cpp-python sdist. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s TYPE N_PER_ROW IN.f32 OUT.bin\n", argv[0]);
        return 2;
    }
    int type = -1;
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char *name = ggml_type_name((enum ggml_type)t);
        if (name && strcmp(name, argv[1]) == 0) type = t;
    }
    long n_per_row = strtol(argv[2], NULL, 10);
    if (type < 0 || n_per_row <= 0) {
        fprintf(stderr, "%s: unknown type %s or bad row length %s\n", argv[0], argv[1], argv[2]);
        return 2;
    }
    if (ggml_quantize_requires_imatrix((enum ggml_type)type)) {
        fprintf(stderr, "%s: %s needs an importance matrix\n", argv[0], argv[1]);
        return 2;
    }
    FILE *in = fopen(argv[3], "rb");
    if (!in) {
        perror(argv[3]);
        return 1;
    }
    fseek(in, 0, SEEK_END);
    long bytes = ftell(in);
    fseek(in, 0, SEEK_SET);
    long n = bytes / (long)sizeof(float), rows = n / n_per_row;
    if (rows * n_per_row * (long)sizeof(float) != bytes) {
        fprintf(stderr, "%s: %ld bytes are not whole rows of %ld floats\n", argv[3], bytes,
                n_per_row);
        return 1;
    }
    float *src = malloc((size_t)bytes);
    size_t row_size = ggml_row_size((enum ggml_type)type, n_per_row);
    void *dst = malloc(row_size * (size_t)rows);
    if (!src || !dst || fread(src, 1, (size_t)bytes, in) != (size_t)bytes) {
        fprintf(stderr, "%s: cannot read\n", argv[3]);
        return 1;
    }
    fclose(in);
    size_t out_bytes = ggml_quantize_chunk((enum ggml_type)type, src, dst, 0, rows, n_per_row, NULL);
    if (out_bytes != row_size * (size_t)rows ||
        !ggml_validate_row_data((enum ggml_type)type, dst, out_bytes)) {
        fprintf(stderr, "%s: quantization to %s failed\n", argv[0], argv[1]);
        return 1;
    }
    FILE *out = fopen(argv[4], "wb");
    if (!out || fwrite(dst, 1, out_bytes, out) != out_bytes || fclose(out) != 0) {
        perror(argv[4]);
        return 1;
    }
    free(src);
    free(dst);
    return 0;
}
