/* libFuzzer target for job specs as a worker receives them: qs_job_spec_check (JSON parse,
 * the kind's typed decoder and validation) and, when a spec is accepted, encode(decode(spec))
 * must give a spec that is accepted again with the same job key (the canonical form is a
 * fixed point). Invariants: no crash, leak or undefined behaviour (ASan, UBSan); every refusal
 * carries a message. Build: cmake -DCMAKE_C_COMPILER=clang -DQSWEEP_FUZZ=ON; run:
 *   kinds_fuzz_spec -max_total_time=60 <corpus dir> tests/kinds/fuzz/seeds
 * (seeds: canonical specs of a baseline, evals of each mode family, a synthetic model, a spec
 * with resources). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"
#include "sensitivity.h"
#include "spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    qs_error err = {0};
    qs_status st = qs_job_spec_check(text, &err);
    if (st && !err.msg[0]) abort();
    json_t *spec = st ? NULL : json_loads(text, 0, NULL);
    qs_sensitivity_spec s;
    if (spec && !qs_sensitivity_decode(spec, &s, &err)) {
        json_t *again = NULL;
        char k1[65], k2[65];
        if (qs_sensitivity_encode(&s, &again, &err)) abort();
        if (qs_spec_key(spec, k1, &err) || qs_spec_key(again, k2, &err)) abort();
        /* decoding drops nothing that is keyed: the re-encoded spec has the same key */
        if (strcmp(k1, k2)) abort();
        char *canon = qs_spec_canonical(again);
        if (!canon || qs_job_spec_check(canon, &err)) abort();
        free(canon);
        json_decref(again);
        qs_sensitivity_clear(&s);
    }
    json_decref(spec);
    free(text);
    return 0;
}
