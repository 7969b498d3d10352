/* libFuzzer target: the baseline log-probability file reader (worker/engine/eval.h,
 * qw_baseline_info_read). Each input is written to a real file and read back; any input must
 * give QS_OK or an error with a message, never a crash or an out-of-bounds read.
 * Run: engine_fuzz_baseline -max_total_time=600 corpus/ tests/engine/fuzz/seeds */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval.h"

static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!path[0]) snprintf(path, sizeof path, "/tmp/qsweep-fuzz-baseline-%d.blp", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f) != 0) abort();
    qw_baseline_info info;
    qs_error err = {0};
    qs_status st = qw_baseline_info_read(path, &info, &err);
    if (st != QS_OK && err.msg[0] == '\0') abort(); /* every refusal says why */
    if (st == QS_OK && info.file_bytes != size) abort();
    return 0;
}
