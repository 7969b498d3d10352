/* One short data-parallel training run on the CPU (train_run.h). */
#include "train_run.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm.h"
#include "data.h"
#include "train_fixture.h"
#include "trainer.h"

void fixture_train(const fixture_run *r, float *p, fixture_outcome *out) {
    qs_error err = {0};
    memset(out, 0, sizeof *out);
    assert_true(r->ranks >= 1 && r->ranks <= 2 && r->steps <= 16);
    assert_true(r->ranks == 1 || (!r->ops && !r->single));
    qw_tmodel *m[2] = {NULL, NULL};
    qw_backend be;
    qw_recipe rc;
    assert_int_equal(qw_recipe_by_name(r->recipe, &rc, &err), QS_OK);
    for (int i = 0; i < r->ranks; i++) {
        if (r->ops) {
            assert_int_equal(qw_backend_cpu_init(&be, r->threads, r->cfg.hidden_dim, &err), QS_OK);
            be.ops = r->ops;
            assert_int_equal(qw_tmodel_create_on(&r->cfg, r->B, r->T, &be, &m[i], &err), QS_OK);
        } else {
            assert_int_equal(qw_tmodel_create(&r->cfg, r->B, r->T, r->threads, &m[i], &err), QS_OK);
        }
        if (qw_tmodel_set_recipe(m[i], &rc, r->seed, &err) != QS_OK) fail_msg("%s", err.msg);
        if (r->setup) r->setup(m[i], r->ctx);
    }
    /* only rank 0 is initialised: the trainer copies it to the others */
    assert_int_equal(qw_tmodel_init_random(m[0], 5, 0.05f, &err), QS_OK);
    qw_data d;
    assert_int_equal(qw_data_init(&d, r->stream, r->ntok, 0.0, r->T, 3, &err), QS_OK);
    qw_group g;
    assert_int_equal(qw_group_cpu(&g, r->ranks, r->threads, &err), QS_OK);
    qw_train_config tc = fixture_train_config(r->steps, r->accum);
    qw_trainer tr;
    if (r->single)
        assert_int_equal(qw_trainer_create(&tr, m[0], &d, &tc, r->threads, &err), QS_OK);
    else
        assert_int_equal(qw_trainer_create_dp(&tr, m, r->ranks, &g, &d, &tc, r->threads, &err),
                         QS_OK);
    qw_step_metrics mt = {0};
    while (tr.step < r->steps) {
        if (r->before_step) r->before_step(tr.step + 1, r->ctx);
        if (qw_trainer_step(&tr, &mt, &err) != QS_OK) fail_msg("%s", err.msg);
        out->loss[tr.step - 1] = mt.train_loss;
        if (r->after_step) r->after_step(tr.step, r->ctx);
    }
    assert_int_equal(qw_tmodel_fetch(m[0], QW_TMODEL_PARAMS, p, &err), QS_OK);
    if (r->ranks == 2) { /* the replicas stay equal */
        size_t n = qw_tmodel_n_params(m[0]);
        float *q = malloc(n * sizeof *q);
        assert_non_null(q);
        assert_int_equal(qw_tmodel_fetch(m[1], QW_TMODEL_PARAMS, q, &err), QS_OK);
        assert_memory_equal(p, q, n * sizeof *q);
        free(q);
    }
    out->cache_bytes = qw_tmodel_weight_cache_bytes(m[0]);
    out->tokens_seen = tr.tokens_seen;
    qw_trainer_free(&tr);
    qw_data_free(&d);
    qw_group_destroy(&g);
    for (int i = 0; i < r->ranks; i++)
        qw_tmodel_destroy(m[i]);
    if (r->ops) qw_backend_release(&be);
}
