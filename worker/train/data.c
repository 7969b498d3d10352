/* Seeded data order (data.h). */
#include "data.h"

#include <stdlib.h>

#include "philox.h"

static void shuffle(qw_data *d) {
    for (size_t i = 0; i < d->n_windows; i++)
        d->order[i] = (uint32_t)i;
    const uint32_t key[2] = {(uint32_t)d->seed, (uint32_t)(d->seed >> 32)};
    for (size_t i = d->n_windows; i > 1; i--) {
        uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)d->epoch,
                           0x44415441u /* "DATA" */};
        uint32_t o[4];
        qk_philox4x32_10(ctr, key, o);
        uint64_t r = ((uint64_t)o[0] << 32) | o[1];
        size_t j = (size_t)(r % i);
        uint32_t t = d->order[i - 1];
        d->order[i - 1] = d->order[j];
        d->order[j] = t;
    }
}

qs_status qw_data_init(qw_data *d, const uint32_t *tokens, size_t n, double val_fraction, int T,
                       uint64_t seed, qs_error *err) {
    d->order = NULL;
    if (T < 1) return qs_error_set(err, QS_EINVAL, "data: ctx %d < 1", T);
    if (!(val_fraction >= 0.0 && val_fraction < 1.0))
        return qs_error_set(err, QS_EINVAL, "data: validation fraction %g outside [0, 1)",
                            val_fraction);
    d->tokens = tokens;
    d->n = n;
    d->n_train = (size_t)((double)n * (1.0 - val_fraction));
    d->T = T;
    d->seed = seed;
    d->epoch = 0;
    d->pos = 0;
    if (d->n_train < (size_t)T + 1)
        return qs_error_set(err, QS_EINVAL, "data: %zu training tokens (of %zu), a window needs %d",
                            d->n_train, n, T + 1);
    d->n_windows = (d->n_train - 1) / (size_t)T;
    size_t nv = n - d->n_train;
    d->n_val_windows = nv >= (size_t)T + 1 ? (nv - 1) / (size_t)T : 0;
    if (val_fraction > 0 && d->n_val_windows == 0)
        return qs_error_set(err, QS_EINVAL,
                            "data: %zu validation tokens (fraction %g of %zu), a window needs %d",
                            nv, val_fraction, n, T + 1);
    d->order = malloc(d->n_windows * sizeof *d->order);
    if (!d->order) return qs_error_set(err, QS_ENOMEM, "data: order of %zu windows", d->n_windows);
    shuffle(d);
    return QS_OK;
}

void qw_data_free(qw_data *d) {
    free(d->order);
    d->order = NULL;
}

static void window(const uint32_t *base, size_t w, int T, uint32_t *in, uint32_t *tg) {
    const uint32_t *s = base + w * (size_t)T;
    for (int t = 0; t < T; t++) {
        in[t] = s[t];
        tg[t] = s[t + 1];
    }
}

void qw_data_next(qw_data *d, int B, uint32_t *in, uint32_t *tg) {
    for (int b = 0; b < B; b++) {
        if (d->pos == d->n_windows) {
            d->epoch++;
            d->pos = 0;
            shuffle(d);
        }
        window(d->tokens, d->order[d->pos++], d->T, in + (size_t)b * d->T, tg + (size_t)b * d->T);
    }
}

qs_status qw_data_seek(qw_data *d, uint64_t epoch, size_t pos, qs_error *err) {
    if (pos > d->n_windows)
        return qs_error_set(err, QS_EINVAL, "data: position %zu beyond %zu windows", pos,
                            d->n_windows);
    d->epoch = epoch;
    d->pos = pos;
    shuffle(d);
    return QS_OK;
}

qs_status qw_data_val(const qw_data *d, size_t index, int B, uint32_t *in, uint32_t *tg,
                      qs_error *err) {
    if (d->n_val_windows == 0) return qs_error_set(err, QS_ESTATE, "data: no validation windows");
    for (int b = 0; b < B; b++) {
        size_t w = (index * (size_t)B + (size_t)b) % d->n_val_windows;
        window(d->tokens + d->n_train, w, d->T, in + (size_t)b * d->T, tg + (size_t)b * d->T);
    }
    return QS_OK;
}
