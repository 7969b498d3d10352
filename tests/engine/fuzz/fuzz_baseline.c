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
static int fd = -1;

/* One file for every input: made in $TMPDIR by mkstemp and unlinked at once, so nothing is
 * left behind however the run ends; the reader opens it again through /proc/self/fd. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (fd < 0) {
        const char *tmp = getenv("TMPDIR");
        char name[4096];
        snprintf(name, sizeof name, "%s/qsweep-fuzz-baseline.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        fd = mkstemp(name);
        if (fd < 0 || unlink(name) != 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0) abort();
    if (size && pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    qw_baseline_info info;
    qs_error err = {0};
    qs_status st = qw_baseline_info_read(path, &info, &err);
    if (st != QS_OK && err.msg[0] == '\0') abort(); /* every refusal says why */
    if (st == QS_OK && info.file_bytes != size) abort();
    return 0;
}
