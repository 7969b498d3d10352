/* Prints the thread count a model created with threads 0 runs with (qw_model_threads), for
 * default_threads_test.sh, which runs it under taskset and OMP_NUM_THREADS and compares the
 * count with coreutils' nproc in the same environment. Exit 1 with a message on error. */
#include <stdio.h>

#include "model.h"

int main(void) {
    qs_error err = {0};
    qw_model *m;
    if (qw_model_create_synthetic("synthetic:tiny-llama2:1", 8, 0, &m, &err) != QS_OK) {
        fprintf(stderr, "default_threads: %s\n", err.msg);
        return 1;
    }
    printf("%d\n", qw_model_threads(m));
    qw_model_destroy(m);
    return 0;
}
