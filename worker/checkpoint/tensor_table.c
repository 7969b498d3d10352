/* The checkpoint's tensor table: HF name -> storage entry. A few hundred to a thousand
 * entries per model, looked up once each when the model is built, so a linear scan suffices. */
#include "checkpoint_internal.h"

#include <stdlib.h>
#include <string.h>

qw_tensor_entry *qw_table_add(qw_tensor_table *t, const char *name) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        qw_tensor_entry *v = realloc(t->v, cap * sizeof *v);
        if (!v) return NULL;
        t->v = v;
        t->cap = cap;
    }
    qw_tensor_entry *e = &t->v[t->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    if (!e->name) return NULL;
    t->n++;
    return e;
}

qw_tensor_entry *qw_table_find(const qw_tensor_table *t, const char *name) {
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].name, name) == 0) return &t->v[i];
    return NULL;
}

void qw_table_free(qw_tensor_table *t) {
    for (size_t i = 0; i < t->n; i++) {
        free(t->v[i].name);
        free(t->v[i].owned);
    }
    free(t->v);
    memset(t, 0, sizeof *t);
}
