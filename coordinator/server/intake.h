/* Reading the store while the coordinator runs (coordinator/server only). */
#ifndef QC_SERVER_INTAKE_H
#define QC_SERVER_INTAKE_H

#include "state.h"

/* Loads jobs submitted since the last load (all of them at start). */
qs_status qc_srv_load_new_jobs(server *s, qs_error *err);

/* Applies the store's unhandled cancel requests (server.h). */
qs_status qc_srv_poll_cancels(server *s, qs_error *err);

/* Answers the store's pin and unpin requests (store.h qc_store_poll_pin_requests), in memory
 * now and in the store with the answer.
 *   unpin: an experiment with a job running on its pinned path (one following its pin, in
 *     memory, or one of its jobs the store holds running there) keeps its pin and the request
 *     is refused, naming the job or count and a worker; else the pin goes.
 *   pin: a request for the path the experiment is pinned to changes nothing; one that
 *     qc_store_pin_conflict refuses, or while a job following its pin runs on another path or
 *     succeeded here on one (its result may not be committed yet), is refused naming them;
 *     else the experiment is pinned to the path (replacing its pin), and its pending jobs go
 *     only to workers of that path. */
qs_status qc_srv_poll_pin_requests(server *s, qs_error *err);

#endif
