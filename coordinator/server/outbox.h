/* What the coordinator sends to workers (coordinator/server only): encoding, the ROUTER send,
 * and one function per message (ACK, CANCEL, REREGISTER, ASSIGN in parts). ACKs and ASSIGNs
 * wait as actions for the open batch's commit (commit.h sends them); the others go at once. */
#ifndef QC_SERVER_OUTBOX_H
#define QC_SERVER_OUTBOX_H

#include "envelope.h"
#include "state.h"

/* Encodes env into a malloc'd *buf of *len bytes; false (logged) on failure. */
bool qc_srv_encode(Qsweep__Envelope *env, uint8_t **buf, size_t *len);

/* Sends [rid][body]; false when the peer is gone (ROUTER_MANDATORY) or its queue is full. */
bool qc_srv_send_raw(server *s, const char *rid, size_t rid_len, const uint8_t *buf, size_t len);

/* Encodes and sends env to rid at once (not waiting for any commit). */
void qc_srv_send_now(server *s, const char *rid, size_t rid_len, Qsweep__Envelope *env);

/* Queues env for rid until the open batch is durable; assign: the job whose ASSIGN this is
 * (its lease starts when it goes out), else NULL. */
void qc_srv_send_after_commit(server *s, const char *rid, size_t rid_len, Qsweep__Envelope *env,
                              job *assign);

/* Queues an ACK of (job_id, attempt, seq, final) until the open batch is durable. */
void qc_srv_send_ack(server *s, const char *rid, size_t rid_len, int64_t job_id, uint32_t attempt,
                     uint64_t seq, bool final);

/* Sends CANCEL of (job_id, attempt) with reason at once. */
void qc_srv_send_cancel(server *s, const char *rid, size_t rid_len, int64_t job_id,
                        uint32_t attempt, const char *reason);

/* Sends REREGISTER with reason at once (an unknown peer must send HELLO). */
void qc_srv_send_reregister(server *s, const char *rid, size_t rid_len, const char *reason);

/* Sends job j's ASSIGN to w: after the batch's commit (the attempt row must be durable
 * first; the lease starts when the first part goes out), or at once (a re-send to a worker
 * that got only part of it). A spec over QS_PROTO_CHUNK_BYTES goes in parts cut at UTF-8
 * character boundaries (proto: Assign.chunks), so no frame holds the link for long. */
void qc_srv_send_assign(server *s, worker *w, job *j, bool after_commit);

#endif
