/* The experiments' numerics pins (pins.h). */
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "pins.h"

qc_pin *qc_srv_pin_find(const qc_pin_table *t, int64_t experiment) {
    for (size_t i = t->n; i-- > 0;) /* a new job's experiment is most often the newest */
        if (t->all[i]->experiment == experiment) return t->all[i];
    return NULL;
}

qc_pin *qc_srv_pin_get(qc_pin_table *t, int64_t experiment, const char *stored) {
    qc_pin *p = qc_srv_pin_find(t, experiment);
    if (!p) {
        if (!(p = calloc(1, sizeof *p))) abort();
        p->experiment = experiment;
        t->all = qc_srv_grow(t->all, &t->cap, t->n + 1, sizeof *t->all);
        t->all[t->n++] = p;
    }
    if (stored && *stored && !p->cleared) qc_srv_pin_set(p, stored);
    return p;
}

int qc_srv_pin_clear(qc_pin *p) {
    int had = p->path != NULL;
    free(p->path);
    p->path = NULL;
    p->cleared = 1;
    return had;
}

int qc_srv_pin_set(qc_pin *p, const char *path) {
    if (p->path) return 0;
    if (!(p->path = strdup(path))) abort();
    return 1;
}

void qc_srv_pins_free(qc_pin_table *t) {
    for (size_t i = 0; i < t->n; i++) {
        free(t->all[i]->path);
        free(t->all[i]);
    }
    free(t->all);
    *t = (qc_pin_table){0};
}
