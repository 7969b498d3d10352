/* The names of a sensitivity sweep (names.h). */
#include "names.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const qs_linear_kind_names[QS_LINEAR_KINDS] = {"q",    "k",  "v",   "o",
                                                           "gate", "up", "down"};
const char *const qs_linear_module_names[QS_LINEAR_KINDS] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

int qs_linear_kind_index(const char *name) {
    for (int k = 0; name && k < QS_LINEAR_KINDS; k++) {
        size_t n = strlen(qs_linear_kind_names[k]);
        if (!strcmp(name, qs_linear_kind_names[k]) ||
            (!strncmp(name, qs_linear_kind_names[k], n) && !strcmp(name + n, "_proj")))
            return k;
    }
    return -1;
}

int qs_block_linear_parse(const char *key, int *block, int *kind) {
    *block = *kind = -1;
    if (!key || *key < '0' || *key > '9') return -1;
    char *end;
    long b = strtol(key, &end, 10);
    if ((*key == '0' && end != key + 1) || b > 1000000 || *end != '.') return -1;
    int k = qs_linear_kind_index(end + 1);
    if (k < 0 || strcmp(end + 1, qs_linear_kind_names[k])) return -1;
    *block = (int)b;
    *kind = k;
    return 0;
}

static const char *const mode_names[QS_MODE_COUNT] = {
    "component",          "block", "layer", "leave_one_out", "cumulative", "leave_one_out_block",
    "leave_one_out_layer", "policy"};

const char *qs_mode_name(qs_mode m) {
    return ((unsigned)m < QS_MODE_COUNT) ? mode_names[m] : "?";
}

int qs_mode_by_name(const char *name) {
    if (!name) return -1;
    for (int m = 0; m < QS_MODE_COUNT; m++)
        if (!strcmp(name, mode_names[m])) return m;
    if (!strcmp(name, "leave_one_out_component")) return QS_MODE_LEAVE_ONE_OUT;
    return -1;
}

int qs_mode_has_block(qs_mode m) {
    return m == QS_MODE_BLOCK || m == QS_MODE_LAYER || m == QS_MODE_CUMULATIVE ||
           m == QS_MODE_LEAVE_ONE_OUT_BLOCK || m == QS_MODE_LEAVE_ONE_OUT_LAYER;
}

int qs_mode_has_kind(qs_mode m) {
    return m == QS_MODE_COMPONENT || m == QS_MODE_LAYER || m == QS_MODE_LEAVE_ONE_OUT ||
           m == QS_MODE_LEAVE_ONE_OUT_LAYER;
}

const char *qs_mode_list(void) {
    return "component, block, layer, leave_one_out, leave_one_out_block, leave_one_out_layer, "
           "cumulative or policy";
}

int qs_quantize_by_name(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "weights") || !strcasecmp(name, "w4a16")) return 0;
    if (!strcmp(name, "weights+activations") || !strcasecmp(name, "w4a4")) return 1;
    return -1;
}

const char *qs_quantize_name(int acts) {
    return acts ? "weights+activations" : "weights";
}

const char *const qs_metric_names[QS_METRICS] = {"kl", "ppl", "sqnr", "top1"};

unsigned qs_metric_bit(const char *name) {
    for (unsigned i = 0; name && i < QS_METRICS; i++)
        if (!strcmp(name, qs_metric_names[i])) return 1u << i;
    return 0;
}
