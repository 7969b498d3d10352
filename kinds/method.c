/* The method table (method.h). */
#include "method.h"

#include <math.h>
#include <string.h>

static const qs_method methods[] = {
    {"rtn", false, QS_ROTATE_NONE, false, false},
    {"gptq", true, QS_ROTATE_NONE, true, false},
    {"rotate16", false, 16, false, false},
    {"rotate32", false, 32, false, false},
    {"rotate128", false, 128, false, false},
    {"rotate-full", false, QS_ROTATE_FULL, false, false},
    {"mr-gptq", true, QS_ROTATE_GROUP, true, false},
    {"smoothquant", true, QS_ROTATE_NONE, false, true},
};
#define N_METHODS ((int)(sizeof methods / sizeof methods[0]))

int qs_method_count(void) {
    return N_METHODS;
}

const qs_method *qs_method_at(int i) {
    return i >= 0 && i < N_METHODS ? &methods[i] : NULL;
}

int qs_method_by_name(const char *name) {
    for (int i = 0; name && i < N_METHODS; i++)
        if (!strcmp(methods[i].name, name)) return i;
    return -1;
}

const char *qs_method_list(void) {
    return "rtn, gptq, rotate16, rotate32, rotate128, rotate-full, mr-gptq, smoothquant";
}

qs_status qs_method_options(int i, const json_t *given, json_t **out, qs_error *err) {
    *out = NULL;
    const qs_method *m = qs_method_at(i);
    if (!m) return qs_error_set(err, QS_EINVAL, "method: index %d is not a method", i);
    if (given && !json_is_object(given))
        return qs_error_set(err, QS_EINVAL, "method_options: expected an object");
    if (!m->gptq && !m->smooth) {
        if (given && json_object_size(given))
            return qs_error_set(err, QS_EINVAL, "method_options: method %s has no options",
                                m->name);
        return QS_OK;
    }
    json_t *o = json_object();
    if (!o) return qs_error_set(err, QS_ENOMEM, "out of memory");
    if (m->gptq) {
        json_object_set_new(o, "act_order", json_false());
        json_object_set_new(o, "damp", json_real(0.01));
    } else {
        json_object_set_new(o, "alpha", json_real(0.5));
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)given, key, v) {
        json_t *have = json_object_get(o, key);
        double x = json_number_value(v);
        const char *bad = NULL;
        if (!have)
            bad = m->gptq ? "unknown option (expected act_order, damp)"
                          : "unknown option (expected alpha)";
        else if (!strcmp(key, "act_order") && !json_is_boolean(v))
            bad = "expected true or false";
        else if (!strcmp(key, "alpha") && (!json_is_number(v) || !(x >= 0.0 && x <= 1.0)))
            bad = "expected a number in [0, 1]";
        else if (!strcmp(key, "damp") && (!json_is_number(v) || !(x > 0.0 && x < 1.0)))
            bad = "expected a number in (0, 1)";
        if (bad) {
            json_decref(o);
            return qs_error_set(err, QS_EINVAL, "method_options.%s: %s (method %s)", key, bad,
                                m->name);
        }
        json_object_set_new(o, key,
                            json_is_boolean(v) ? json_boolean(json_is_true(v))
                                               : json_real(json_number_value(v)));
    }
    *out = o;
    return QS_OK;
}
