/* libFuzzer target for grid files: qc_grid_load (libfyaml parse, validation through the real
 * loaders) and, when a grid loads, qc_grid_expand. The input is written to a real file in a
 * directory that also holds a small checkpoint ("ckpt", 2 blocks, vocabulary 64) and a token
 * file ("toks.bin"), so inputs that name them reach validation and expansion.
 * Invariants checked: no crash, leak or undefined behaviour (ASan, UBSan), and every refusal
 * carries a message.
 * Build: cmake -DCMAKE_C_COMPILER=clang -DQSWEEP_FUZZ=ON; run:
 *   cli_fuzz_grid -max_total_time=60 <corpus dir> experiments/ */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "grid.h"
#include "probe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The folder of the run's files, in $TMPDIR, removed when the run exits. */
static char dir[4096];

static void remove_dir(void) {
    fx_rmtree(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char grid[4200];
    if (!grid[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/qsweep-fuzz-grid.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) abort();
        atexit(remove_dir);
        char path[4200];
        uint32_t ids[256];
        for (int i = 0; i < 256; i++) ids[i] = (uint32_t)(i * 5 % 64);
        snprintf(path, sizeof path, "%s/ckpt", dir);
        if (fx_write_checkpoint(path, 2, 64, 1)) abort();
        snprintf(path, sizeof path, "%s/toks.bin", dir);
        if (fx_write_tokens(path, ids, 256, 64)) abort();
        snprintf(grid, sizeof grid, "%s/grid.yaml", dir);
    }
    FILE *f = fopen(grid, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    qc_grid *g = NULL;
    qs_error err = {0};
    if (qc_grid_load(grid, NULL, 0, qsweep_probe(), &g, &err) != QS_OK) {
        if (!err.msg[0] || g) abort(); /* a refusal must say why and return nothing */
        return 0;
    }
    qc_job_list jobs = {0};
    if (qc_grid_expand(g, &jobs, &err) == QS_OK) qc_job_list_free(&jobs);
    qc_grid_free(g);
    return 0;
}
