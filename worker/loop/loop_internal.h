/* Shared between the files of worker/loop only. */
#ifndef QW_LOOP_INTERNAL_H
#define QW_LOOP_INTERNAL_H

#include "loop.h"

/* The function registered under name, or NULL. */
qw_job_fn qw_registry_find(const char *name);

#endif
