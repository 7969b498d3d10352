/* The table of grid kinds (grid_kind.h). One line per kind. */
#include "grid_kind.h"

#include <string.h>

extern const qc_grid_kind qc_grid_kind_sensitivity; /* grid_sensitivity.c */
extern const qc_grid_kind qc_grid_kind_training;    /* grid_training.c */
extern const qc_grid_kind qc_grid_kind_pipeline;    /* grid_pipeline.c */

static const qc_grid_kind *const kinds[] = {
    &qc_grid_kind_sensitivity,
    &qc_grid_kind_training,
    &qc_grid_kind_pipeline,
};

const qc_grid_kind *qc_grid_kind_find(const char *name) {
    for (size_t i = 0; name && i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

const char *qc_grid_kind_names(void) {
    static char list[256];
    if (!list[0])
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
            if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
            strncat(list, kinds[i]->name, sizeof list - strlen(list) - 1);
        }
    return list;
}
