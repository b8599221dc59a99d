/*
 * complete.c - Wait, Test and their any/some/all forms, Request_get_status,
 * Request_free and Cancel, over arrays that mix the plugin's requests, the
 * MPI library's and MPI_REQUEST_NULL.
 *
 * A call whose requests are all the library's goes to the library as it
 * is: the plugin's engine runs inside the library's progress loop.
 * Otherwise the plugin's requests are watched here and the library's are
 * handed to it as one compact array (MPI_Testany, MPI_Testsome, MPI_Testall
 * or MPI_Waitall keep their own semantics for null and inactive requests).
 */
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

static bool inactive(const struct pm_op *op)
{
	return op->persistent && op->state == ST_IDLE;
}

static MPI_Comm error_comm(const struct pm_op *op)
{
	return op->comm ? op->comm->comm : MPI_COMM_WORLD;
}

/* Report a finished op and retire what the user held. @return its error. */
static int finish(MPI_Request *req, struct pm_op *op, MPI_Status *status, bool multi)
{
	int rc = op->st_error;
	if (multi)
		pm_op_status(op, status);
	else
		pm_op_status_single(op, status);
	if (op->persistent) {
		op->state = ST_IDLE;
		pm_op_closed(op);
	} else {
		pm_op_release(op);
		*req = MPI_REQUEST_NULL;
	}
	return rc;
}

/*
 * An array of requests, split once per call: the plugin's op at each
 * position (NULL: the library's request or MPI_REQUEST_NULL), and the
 * library's requests compacted.  Ops stay valid through the call: only
 * finishing one (once) releases it.  Arrays of up to FEW requests live
 * in the struct itself (on the caller's stack).
 */
#define FEW 16

struct split {
	int ours;             /* requests of the plugin */
	int sent;             /* pm.sent requests left out of the library's (all_sent) */
	int pending;          /* ours_all_done(): ops before this one are done */
	struct pm_op **op;    /* per position */
	int n;                /* requests of the library */
	int *index;           /* their positions in the caller's array */
	MPI_Request *reqs;
	MPI_Status *st;
	int *done;            /* Testsome's indices */
	void *block;          /* allocated for the arrays above, or NULL */
	struct {
		struct pm_op *op[FEW];
		int index[FEW], done[FEW];
		MPI_Request reqs[FEW];
		MPI_Status st[FEW];
	} few;
};

/* @return MPI_SUCCESS or MPI_ERR_NO_MEM; when no request is the plugin's,
 * only s->ours (0) is meaningful: pass the call to the library.  With
 * @p all_sent, the library's completed send request (pm.sent) is left out
 * of the library's part: an "all" call finishes it itself (all_finish()). */
static int split_make(struct split *s, int count, const MPI_Request reqs[], bool all_sent)
{
	size_t c = count > 0 ? (size_t)count : 0;
	s->ours = s->n = s->pending = s->sent = 0;
	s->block = NULL;
	s->op = s->few.op;
	s->index = s->few.index;
	s->done = s->few.done;
	s->reqs = s->few.reqs;
	s->st = s->few.st;
	if (c > FEW) {
		char *b = s->block = malloc(c * (sizeof(struct pm_op *) + sizeof(MPI_Request) + sizeof(MPI_Status) +
						 2 * sizeof(int)));
		if (!b)
			return MPI_ERR_NO_MEM;
		s->op = (struct pm_op **)(void *)b;
		s->reqs = (MPI_Request *)(void *)(s->op + c);
		s->st = (MPI_Status *)(void *)(s->reqs + c);
		s->index = (int *)(void *)(s->st + c);
		s->done = s->index + c;
	}
	for (size_t i = 0; i < c; i++) {
		s->op[i] = pm_op_by_handle(reqs[i]);
		if (s->op[i]) {
			s->ours++;
		} else if (all_sent && reqs[i] == pm.sent && pm.sent != MPI_REQUEST_NULL) {
			s->sent++;
		} else if (reqs[i] != MPI_REQUEST_NULL) {
			s->index[s->n] = (int)i;
			s->reqs[s->n++] = reqs[i];
		}
	}
	return MPI_SUCCESS;
}

static void split_free(struct split *s)
{
	free(s->block);
}

/* Copy the library's handles back (it nulls or keeps them). */
static void library_back(const struct split *s, MPI_Request reqs[])
{
	for (int k = 0; k < s->n; k++)
		reqs[s->index[k]] = s->reqs[k];
}

static void wait_pass(unsigned *idle)
{
	if (pm_progress())
		*idle = 0;
	else
		pm_idle(idle, false);
}

/* ---- one request --------------------------------------------------------- */

int MPI_Wait(MPI_Request *request, MPI_Status *status)
{
	struct pm_op *op = pm_op_by_handle(*request);
	if (!op)
		return PMPI_Wait(request, status);
	if (inactive(op)) {
		pm_status_empty(status);
		return MPI_SUCCESS;
	}
	pm_wait_op(op);
	MPI_Comm comm = error_comm(op);
	return pm_comm_error(comm, finish(request, op, status, false));
}

/* One look at @p op for Test and Request_get_status: progress both
 * engines unless it is done. @return whether it is done (an inactive
 * persistent op is, with an empty status). */
static bool test_once(struct pm_op *op)
{
	if (inactive(op))
		return true;
	if (op->state != ST_DONE)
		pm_progress();
	if (op->state == ST_DONE)
		return true;
	pm_mpi_progress();
	return false;
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status)
{
	struct pm_op *op = pm_op_by_handle(*request);
	if (!op)
		return PMPI_Test(request, flag, status);
	*flag = test_once(op);
	if (!*flag)
		return MPI_SUCCESS;
	if (inactive(op)) {
		pm_status_empty(status);
		return MPI_SUCCESS;
	}
	MPI_Comm comm = error_comm(op);
	return pm_comm_error(comm, finish(request, op, status, false));
}

int MPI_Request_get_status(MPI_Request request, int *flag, MPI_Status *status)
{
	struct pm_op *op = pm_op_by_handle(request);
	if (!op)
		return PMPI_Request_get_status(request, flag, status);
	*flag = test_once(op);
	if (*flag && inactive(op))
		pm_status_empty(status);
	else if (*flag)
		pm_op_status_single(op, status);
	return MPI_SUCCESS;
}

int MPI_Request_free(MPI_Request *request)
{
	struct pm_op *op = pm_op_by_handle(*request);
	if (!op) {
		pm_forget_passed(*request);
		return PMPI_Request_free(request);
	}
	*request = MPI_REQUEST_NULL;
	if (op->state == ST_DONE || inactive(op))
		pm_op_release(op);
	else
		op->user_freed = true; /* released when it completes */
	return MPI_SUCCESS;
}

int MPI_Cancel(MPI_Request *request)
{
	struct pm_op *op = pm_op_by_handle(*request);
	if (!op)
		return PMPI_Cancel(request);
	if (op->kind != OP_IDUP)
		pm_op_cancel(op);
	return MPI_SUCCESS;
}

/* ---- all ------------------------------------------------------------------- */

/* The first op of ours that failed in an "all" or "some" call. */
struct failure {
	MPI_Comm comm; /* its communicator, whose error handler reports it */
	int code;      /* its error; MPI_SUCCESS: none failed */
};

/* Finish @p op into @p st, noting it in @p f if it is the first to fail. */
static void finish_noting(MPI_Request *req, struct pm_op *op, MPI_Status *st, struct failure *f)
{
	MPI_Comm comm = error_comm(op);
	int code = finish(req, op, st, true);
	if (code != MPI_SUCCESS && f->code == MPI_SUCCESS)
		*f = (struct failure){comm, code};
}

/* Finish every op of ours (all done) into statuses[i], noting the first
 * that failed in @p f. */
static void finish_ours(const struct split *s, int count, MPI_Request reqs[], MPI_Status statuses[],
			struct failure *f)
{
	for (int i = 0; i < count; i++) {
		struct pm_op *op = s->op[i];
		if (!op)
			continue;
		MPI_Status *st = statuses == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &statuses[i];
		if (inactive(op)) {
			pm_status_empty(st);
			if (st != MPI_STATUS_IGNORE)
				st->MPI_ERROR = MPI_SUCCESS;
			continue;
		}
		finish_noting(&reqs[i], op, st, f);
	}
}

/* Ops finish mostly in the order they were started, and stay finished: a
 * pass looks from the first one it did not see done. */
static bool ours_all_done(struct split *s, int count)
{
	for (; s->pending < count; s->pending++) {
		struct pm_op *op = s->op[s->pending];
		if (op && !inactive(op) && op->state != ST_DONE)
			return false;
	}
	return true;
}

/* The last op of ours not done (ours_all_done() found one). */
static struct pm_op *last_pending(const struct split *s, int count)
{
	for (int i = count - 1; i > s->pending; i--) {
		struct pm_op *op = s->op[i];
		if (op && !inactive(op) && op->state != ST_DONE)
			return op;
	}
	return s->op[s->pending];
}

/* The library's part of a completed "all": statuses of its requests. */
static void library_statuses(const struct split *s, MPI_Status statuses[], int rc)
{
	if (statuses == MPI_STATUSES_IGNORE)
		return;
	for (int k = 0; k < s->n; k++) {
		statuses[s->index[k]] = s->st[k];
		if (rc == MPI_SUCCESS)
			statuses[s->index[k]].MPI_ERROR = MPI_SUCCESS;
	}
}

static void null_statuses(int count, const MPI_Request before[], MPI_Status statuses[])
{
	if (statuses == MPI_STATUSES_IGNORE)
		return;
	for (int i = 0; i < count; i++)
		if (before[i] == MPI_REQUEST_NULL) {
			pm_status_empty(&statuses[i]);
			statuses[i].MPI_ERROR = MPI_SUCCESS;
		}
}

/* The completed sends left out of the library's part: what a wait on
 * them in the library does (the status it gives, the handle nulled). */
static void sent_finish(const struct split *s, int count, MPI_Request reqs[], MPI_Status statuses[])
{
	if (!s->sent)
		return;
	for (int i = 0; i < count; i++)
		if (reqs[i] == pm.sent && !s->op[i]) {
			reqs[i] = MPI_REQUEST_NULL;
			if (statuses != MPI_STATUSES_IGNORE) {
				statuses[i] = pm.sent_status;
				statuses[i].MPI_ERROR = MPI_SUCCESS;
			}
		}
}

/* The outcome of an "all" or "some" call, as Open MPI gives it: where one
 * of the library's requests failed, the library has called its handler and
 * says what the call returns; otherwise, where one of ours failed, the
 * handler of its communicator is called once with its own code, and the
 * call returns MPI_ERR_IN_STATUS. */
static int multi_error(const struct failure *ours, int lib_rc)
{
	if (lib_rc != MPI_SUCCESS)
		return lib_rc;
	if (ours->code == MPI_SUCCESS)
		return MPI_SUCCESS;
	pm_comm_error(ours->comm, ours->code);
	return MPI_ERR_IN_STATUS;
}

/* The end of an "all" call once every request is done, the library's with
 * result @p rc: statuses, handles, the split freed. @return the call's result. */
static int all_finish(struct split *s, int count, MPI_Request reqs[], MPI_Status statuses[], int rc)
{
	null_statuses(count, reqs, statuses);
	sent_finish(s, count, reqs, statuses);
	library_back(s, reqs);
	library_statuses(s, statuses, rc);
	struct failure ours = {MPI_COMM_NULL, MPI_SUCCESS};
	finish_ours(s, count, reqs, statuses, &ours);
	split_free(s);
	return multi_error(&ours, rc);
}

int MPI_Waitall(int count, MPI_Request reqs[], MPI_Status statuses[])
{
	struct split s;
	int rc = split_make(&s, count, reqs, true);
	if (rc != MPI_SUCCESS || !s.ours) {
		split_free(&s);
		return rc != MPI_SUCCESS ? rc : PMPI_Waitall(count, reqs, statuses);
	}
	/* Watch the last op not done (ops finish mostly in order): the engine
	 * stops taking records once it is, rather than polling on for more. */
	unsigned idle = 0;
	struct pm_op *outer = pm.watch;
	while (!ours_all_done(&s, count)) {
		pm.watch = last_pending(&s, count);
		wait_pass(&idle);
	}
	pm.watch = outer;
	if (s.n)
		rc = PMPI_Waitall(s.n, s.reqs, s.st);
	return all_finish(&s, count, reqs, statuses, rc);
}

int MPI_Testall(int count, MPI_Request reqs[], int *flag, MPI_Status statuses[])
{
	struct split s;
	int rc = split_make(&s, count, reqs, true);
	if (rc != MPI_SUCCESS || !s.ours) {
		split_free(&s);
		return rc != MPI_SUCCESS ? rc : PMPI_Testall(count, reqs, flag, statuses);
	}
	pm_progress();
	*flag = 0;
	if (!ours_all_done(&s, count)) {
		split_free(&s);
		pm_mpi_progress();
		return MPI_SUCCESS;
	}
	int lib_done = 1;
	if (s.n)
		rc = PMPI_Testall(s.n, s.reqs, &lib_done, s.st);
	if (rc == MPI_SUCCESS && !lib_done) {
		split_free(&s);
		return MPI_SUCCESS;
	}
	*flag = 1;
	return all_finish(&s, count, reqs, statuses, rc);
}

/* ---- any --------------------------------------------------------------------- */

/* One look for any completed request. @return 1 found (*index set), 0 none
 * yet, -1 none active at all. */
static int any_pass(int count, MPI_Request reqs[], struct split *s, int *index, MPI_Status *status, int *rc)
{
	bool active = false;
	for (int i = 0; i < count; i++) {
		struct pm_op *op = s->op[i];
		if (!op || inactive(op))
			continue;
		if (op->state == ST_DONE) {
			*index = i;
			MPI_Comm comm = error_comm(op);
			*rc = pm_comm_error(comm, finish(&reqs[i], op, status, false));
			return 1;
		}
		active = true;
	}
	if (s->n) {
		int k = MPI_UNDEFINED, flag = 0;
		*rc = PMPI_Testany(s->n, s->reqs, &k, &flag, status);
		if (*rc != MPI_SUCCESS || (flag && k != MPI_UNDEFINED)) {
			if (k != MPI_UNDEFINED) {
				reqs[s->index[k]] = s->reqs[k];
				*index = s->index[k];
			}
			return 1;
		}
		if (!flag)
			active = true;
	}
	return active ? 0 : -1;
}

int MPI_Waitany(int count, MPI_Request reqs[], int *index, MPI_Status *status)
{
	struct split s;
	int rc = split_make(&s, count, reqs, false);
	if (rc != MPI_SUCCESS || !s.ours) {
		split_free(&s);
		return rc != MPI_SUCCESS ? rc : PMPI_Waitany(count, reqs, index, status);
	}
	unsigned idle = 0;
	while (rc == MPI_SUCCESS) {
		int got = any_pass(count, reqs, &s, index, status, &rc);
		if (got > 0)
			break;
		if (got < 0) {
			*index = MPI_UNDEFINED;
			pm_status_empty(status);
			break;
		}
		wait_pass(&idle);
	}
	split_free(&s);
	return rc;
}

int MPI_Testany(int count, MPI_Request reqs[], int *index, int *flag, MPI_Status *status)
{
	struct split s;
	int rc = split_make(&s, count, reqs, false);
	if (rc != MPI_SUCCESS || !s.ours) {
		split_free(&s);
		return rc != MPI_SUCCESS ? rc : PMPI_Testany(count, reqs, index, flag, status);
	}
	pm_progress();
	int got = any_pass(count, reqs, &s, index, status, &rc);
	*flag = got != 0;
	if (got <= 0)
		*index = MPI_UNDEFINED;
	if (got < 0)
		pm_status_empty(status);
	split_free(&s);
	return rc;
}

/* ---- some ------------------------------------------------------------------------ */

/* One look for every completed request. @return how many (*out), or -1
 * when none is active. */
static int some_pass(int count, MPI_Request reqs[], struct split *s, int indices[], MPI_Status statuses[],
		     struct failure *ours, int *lib_rc)
{
	int n = 0;
	bool active = false;
	for (int i = 0; i < count; i++) {
		struct pm_op *op = s->op[i];
		if (!op || inactive(op))
			continue;
		if (op->state != ST_DONE) {
			active = true;
			continue;
		}
		MPI_Status *st = statuses == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &statuses[n];
		finish_noting(&reqs[i], op, st, ours);
		indices[n++] = i;
	}
	if (s->n) {
		int out = MPI_UNDEFINED;
		int rc = PMPI_Testsome(s->n, s->reqs, &out, s->done, s->st);
		if (rc != MPI_SUCCESS)
			*lib_rc = rc;
		if (out != MPI_UNDEFINED) {
			active = true;
			for (int j = 0; j < out; j++) {
				int k = s->done[j];
				reqs[s->index[k]] = s->reqs[k];
				if (statuses != MPI_STATUSES_IGNORE) {
					statuses[n] = s->st[j];
					if (rc == MPI_SUCCESS)
						statuses[n].MPI_ERROR = MPI_SUCCESS;
				}
				indices[n++] = s->index[k];
			}
		}
	}
	return n ? n : active ? 0 : -1;
}

/* Waitsome (@p wait) or Testsome; @return -1 when no request is the
 * plugin's (pass the call to the library), else the call's result. */
static int some(int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[], bool wait)
{
	struct split s;
	int rc = split_make(&s, incount, reqs, false);
	if (rc == MPI_SUCCESS && !s.ours) {
		split_free(&s);
		return -1;
	}
	struct failure ours = {MPI_COMM_NULL, MPI_SUCCESS};
	int lib_rc = MPI_SUCCESS;
	unsigned idle = 0;
	if (!wait)
		pm_progress();
	while (rc == MPI_SUCCESS) {
		int n = some_pass(incount, reqs, &s, indices, statuses, &ours, &lib_rc);
		if (n != 0 || !wait) {
			*outcount = n < 0 ? MPI_UNDEFINED : n;
			break;
		}
		wait_pass(&idle);
	}
	split_free(&s);
	if (rc != MPI_SUCCESS)
		return rc;
	return multi_error(&ours, lib_rc);
}

int MPI_Waitsome(int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[])
{
	int rc = some(incount, reqs, outcount, indices, statuses, true);
	return rc != -1 ? rc : PMPI_Waitsome(incount, reqs, outcount, indices, statuses);
}

int MPI_Testsome(int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[])
{
	int rc = some(incount, reqs, outcount, indices, statuses, false);
	return rc != -1 ? rc : PMPI_Testsome(incount, reqs, outcount, indices, statuses);
}
