/* The process-wide registry of job kinds, as the loop reads it (internal to worker/loop;
 * registering is loop.h's qw_register_kind). */
#ifndef QW_LOOP_KIND_REGISTRY_H
#define QW_LOOP_KIND_REGISTRY_H

#include "loop.h"

/* The function registered under name, or NULL. */
qw_job_fn qw_registry_find(const char *name);

/* The registered job kinds' names (at most cap, into names; they stay valid for the process's
 * life), for HELLO. Returns the count. */
size_t qw_registry_kinds(const char **names, size_t cap);

#endif
