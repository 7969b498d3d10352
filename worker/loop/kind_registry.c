/* The process-wide registry of job kinds (loop.h: qw_register_kind). */
#include <pthread.h>
#include <string.h>

#include "kind_registry.h"
#include "loop.h"

enum { REGISTRY_SLOTS = 64, KIND_NAME_MAX = 63 };

static struct {
    char name[KIND_NAME_MAX + 1];
    qw_job_fn fn;
} registry[REGISTRY_SLOTS];
static size_t registry_len;
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;

qs_status qw_register_kind(const char *name, qw_job_fn fn, qs_error *err) {
    if (!name || !name[0] || strlen(name) > KIND_NAME_MAX || !fn)
        return qs_error_set(err, QS_EINVAL,
                            "qw_register_kind: name must be 1..%d bytes and fn non-NULL",
                            KIND_NAME_MAX);
    qs_status st = QS_OK;
    pthread_mutex_lock(&registry_mu);
    size_t i = 0;
    while (i < registry_len && strcmp(registry[i].name, name) != 0)
        i++;
    if (i == registry_len) {
        if (registry_len == REGISTRY_SLOTS) {
            st = qs_error_set(err, QS_ENOMEM, "qw_register_kind: %s: all %d slots are used", name,
                              REGISTRY_SLOTS);
        } else {
            strcpy(registry[i].name, name);
            registry_len++;
        }
    }
    if (st == QS_OK) registry[i].fn = fn;
    pthread_mutex_unlock(&registry_mu);
    return st;
}

qw_job_fn qw_registry_find(const char *name) {
    qw_job_fn fn = NULL;
    pthread_mutex_lock(&registry_mu);
    for (size_t i = 0; i < registry_len && !fn; i++)
        if (strcmp(registry[i].name, name) == 0) fn = registry[i].fn;
    pthread_mutex_unlock(&registry_mu);
    return fn;
}

size_t qw_registry_kinds(const char **names, size_t cap) {
    pthread_mutex_lock(&registry_mu);
    size_t n = registry_len < cap ? registry_len : cap;
    for (size_t i = 0; i < n; i++)
        names[i] = registry[i].name; /* slots are never freed or renamed */
    pthread_mutex_unlock(&registry_mu);
    return n;
}

bool qw_kind_registered(const char *name) {
    return name && qw_registry_find(name) != NULL;
}
