/* Shared between the files of worker/loop only. */
#ifndef QW_LOOP_INTERNAL_H
#define QW_LOOP_INTERNAL_H

#include "loop.h"

/* The function registered under name, or NULL. */
qw_job_fn qw_registry_find(const char *name);

/* Registers "sleep", "fail" and "echo" (builtin_kinds.c). */
qs_status qw_register_builtin_kinds(qs_error *err);

#endif
