/* The readers `qsweep` hands to the grid module (coordinator/grid/grid.h, qc_grid_probe):
 * models through the checkpoint loader (worker/checkpoint/checkpoint.h), token files through
 * qw_tokens_load, format names through the numeric core (qk_format_by_name). */
#ifndef QSWEEP_PROBE_H
#define QSWEEP_PROBE_H

#include "grid.h"

/* The probe of the real loaders. Stateless; the returned struct is static. */
const qc_grid_probe *qsweep_probe(void);

#endif
