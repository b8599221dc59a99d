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
 * An array of requests is read in place, with no copy: a handle of the
 * plugin's op is, to the library, an inactive persistent request, which
 * its any, some and all calls skip (as they skip MPI_REQUEST_NULL).  So the
 * library's part of a call is the library's call over the caller's whole
 * array, made only where the array holds a request of the library; the
 * plugin's part is a scan that looks each handle up in the table of
 * handles.  Nothing is allocated per call.  Ops stay valid through a
 * call: only finishing one (once) releases it.
 */

/* What a scan counted. */
struct tally {
	int ours;    /* ops of the plugin */
	int pending; /* of which active and not done */
	int lib;     /* requests of the library, MPI_REQUEST_NULL and pm.sent left out */
	int sent;    /* pm.sent requests */
};

/*
 * The op last found at each position of an array, whichever array: a scan
 * that finds at reqs[i] the handle of the op remembered there (op->handle
 * == reqs[i]) takes that op without looking the handle up.  Sound because
 * a handle belongs to one op at a time and an op's memory is given back
 * only with the memo (pm_ops_teardown(), pm_complete_teardown()): an op
 * released since is recycled (ops.c), and its handle is no longer that
 * one (MPI_REQUEST_NULL, or the one of its next use).
 *
 * Beside it, hot[i]: the handle of an op that a scan found active and not
 * done at position i, which it stays until pm_complete_cool() (the op is
 * done, or over) sets hot[i] back to COLD, which no request equals; an op
 * is hot at one position at most (op->memo_at).  A scan passes a position
 * whose request is hot[i] reading neither the op nor the handle table:
 * over many requests that stay pending, a call reads the caller's array
 * and hot[], and no op.
 *
 * The memo grows to the longest array seen, not per call; only while the
 * plugin carries traffic (pm.active: never with MPI_THREAD_MULTIPLE, whose
 * threads would share it).
 */
static struct {
	struct pm_op **op;
	MPI_Request *hot;
	int len;
} memo;

#define COLD ((MPI_Request)(void *)&memo)

void pm_complete_teardown(void)
{
	free(memo.op);
	free(memo.hot);
	memo.op = NULL;
	memo.hot = NULL;
	memo.len = 0;
}

void pm_complete_cool(struct pm_op *op)
{
	if (op->memo_at <= memo.len)
		memo.hot[op->memo_at - 1] = COLD;
	op->memo_at = 0;
}

/* The memo for @p count positions, or NULL (no room: look every handle up). */
static struct pm_op **memo_for(int count)
{
	if (count > memo.len) {
		struct pm_op **m = realloc(memo.op, (size_t)count * sizeof(*m));
		if (m)
			memo.op = m;
		MPI_Request *h = m ? realloc(memo.hot, (size_t)count * sizeof(*h)) : NULL;
		if (!h)
			return NULL;
		memo.hot = h;
		for (int i = memo.len; i < count; i++) {
			m[i] = NULL;
			h[i] = COLD;
		}
		memo.len = count;
	}
	return memo.op;
}

/* Make @p op, found active and not done at position @p i of a scan with
 * the memo, hot there (and nowhere else). */
static void warm(struct pm_op *op, int i)
{
	if (op->memo_at)
		memo.hot[op->memo_at - 1] = COLD;
	memo.hot[i] = op->handle;
	op->memo_at = i + 1;
}

/* The plugin's op of @p r (not MPI_REQUEST_NULL), the handle at a
 * position whose memo is @p m. */
static inline struct pm_op *memo_op(struct pm_op **m, MPI_Request r)
{
	if (*m && (*m)->handle == r)
		return *m;
	return *m = pm_op_by_handle(r);
}

/* The plugin's op of reqs[i], or NULL, through the memo where it reaches. */
static inline struct pm_op *op_at(const MPI_Request reqs[], int i)
{
	if (reqs[i] == MPI_REQUEST_NULL)
		return NULL;
	return i < memo.len ? memo_op(&memo.op[i], reqs[i]) : pm_op_by_handle(reqs[i]);
}

/* The first position from @p i on whose request is not hot there. */
static inline int skip_hot(const MPI_Request reqs[], int i, int count)
{
	const MPI_Request *hot = memo.hot;
	while (i < count && reqs[i] == hot[i])
		i++;
	return i;
}

/*
 * Scan reqs[from..count) in order, counting into @p t, up to the first op
 * of the plugin's that is active and done: @return its position (*done:
 * the op), or count.
 */
static int scan(const MPI_Request reqs[], int from, int count, struct tally *t, struct pm_op **done)
{
	const MPI_Request sent = pm.sent;
	struct pm_op **m = pm.active ? memo_for(count) : NULL;
	int nulls = 0, idle = 0, lib = 0, nsent = 0, i = from;
	for (; (i = m ? skip_hot(reqs, i, count) : i) < count; i++) {
		MPI_Request r = reqs[i];
		if (r == MPI_REQUEST_NULL) {
			nulls++;
			continue;
		}
		struct pm_op *op = m ? memo_op(&m[i], r) : pm_op_by_handle(r);
		if (!op) {
			nsent += r == sent;
			lib += r != sent;
			continue;
		}
		if (op->state == ST_DONE) {
			*done = op;
			break;
		}
		if (inactive(op))
			idle++;
		else if (m && r == op->handle)
			warm(op, i);
	}
	/* The ops of ours seen, the done one it stopped at included. */
	int ours = (i < count ? i + 1 : i) - from - nulls - lib - nsent;
	t->ours += ours;
	t->pending += ours - idle - (i < count);
	t->lib += lib;
	t->sent += nsent;
	return i;
}

/* Whether one of the requests is the plugin's (else the call goes to the
 * library as it is): the first one usually says. */
static bool any_ours(int count, const MPI_Request reqs[])
{
	for (int i = 0; i < count; i++)
		if (op_at(reqs, i))
			return true;
	return false;
}

/* One pass of a wait.  @p colls: what it waits for is nonblocking
 * collectives only, so it looks at their flags first, as MPI_Wait on one
 * does (pm_coll_nb_look()), and takes the engine's pass only when they
 * have not come. */
static void wait_pass(unsigned *idle, bool colls)
{
	if (colls && pm_coll_nb_look())
		return;
	if (pm_progress())
		*idle = 0;
	else
		pm_idle(idle, false);
}

/* Whether every request of the array is the plugin's and those still to
 * finish are nonblocking collectives, one at least (a wait on them may
 * look at their flags alone: nothing else needs the engine). */
static bool only_colls_pending(int count, const MPI_Request reqs[])
{
	bool any = false;
	for (int i = 0; i < count; i++) {
		if (reqs[i] == MPI_REQUEST_NULL)
			continue;
		struct pm_op *op = op_at(reqs, i);
		if (!op)
			return false;
		if (inactive(op) || op->state == ST_DONE)
			continue;
		if (op->kind != OP_COLL)
			return false;
		any = true;
	}
	return any;
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
	if (op->kind == OP_COLL && op->state != ST_DONE) /* erroneous (MPI-3.1 5.12): refused, as Open MPI does */
		return pm_comm_error(error_comm(op), MPI_ERR_REQUEST);
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
	if (op->kind == OP_COLL && op->state != ST_DONE) /* erroneous, as above */
		return pm_comm_error(error_comm(op), MPI_ERR_REQUEST);
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

/* Finish @p op (done, or an inactive persistent one: an empty status) of
 * an "all" call into @p st, noting it in @p f if it is the first to fail. */
static void finish_in_all(MPI_Request *req, struct pm_op *op, MPI_Status *st, struct failure *f)
{
	if (!inactive(op)) {
		finish_noting(req, op, st, f);
		return;
	}
	pm_status_empty(st);
	if (st != MPI_STATUS_IGNORE)
		st->MPI_ERROR = MPI_SUCCESS;
}

/* Finish every op of ours (all done) into statuses[i], noting the first
 * that failed in @p f. */
static void finish_ours(int count, MPI_Request reqs[], MPI_Status statuses[], struct failure *f)
{
	for (int i = 0; i < count; i++) {
		struct pm_op *op = op_at(reqs, i);
		if (op)
			finish_in_all(&reqs[i], op, statuses == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &statuses[i],
				      f);
	}
}

/* Whether the op of ours at @p i, if any, is still to finish. */
static bool pending_at(const MPI_Request reqs[], int i)
{
	if (i < memo.len && reqs[i] == memo.hot[i])
		return true;
	struct pm_op *op = op_at(reqs, i);
	return op && !inactive(op) && op->state != ST_DONE;
}

/* Ops finish mostly in the order they were started, and stay finished: a
 * pass looks from the first one it did not see done (*pending). */
static bool ours_all_done(const MPI_Request reqs[], int count, int *pending)
{
	for (; *pending < count; ++*pending)
		if (pending_at(reqs, *pending))
			return false;
	return true;
}

/* The last op of ours not done (ours_all_done() found one at @p pending). */
static struct pm_op *last_pending(const MPI_Request reqs[], int count, int pending)
{
	int i = count - 1;
	while (i > pending && !pending_at(reqs, i))
		i--;
	return op_at(reqs, i);
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
static void sent_finish(int count, MPI_Request reqs[], MPI_Status statuses[])
{
	for (int i = 0; i < count; i++)
		if (reqs[i] == pm.sent && !pm_op_by_handle(reqs[i])) {
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

/* The end of an "all" call once every request is done: the library's
 * call over the array (lib) has returned @p rc and written the statuses,
 * or (no lib) the null and sent requests are finished here; then ours.
 * @return the call's result. */
static int all_finish(const struct tally *l, int count, MPI_Request reqs[], MPI_Status statuses[], int rc)
{
	if (!l->lib) {
		null_statuses(count, reqs, statuses);
		if (l->sent)
			sent_finish(count, reqs, statuses);
	} else if (rc == MPI_SUCCESS && statuses != MPI_STATUSES_IGNORE) {
		for (int i = 0; i < count; i++)
			statuses[i].MPI_ERROR = MPI_SUCCESS;
	}
	struct failure ours = {MPI_COMM_NULL, MPI_SUCCESS};
	finish_ours(count, reqs, statuses, &ours);
	return multi_error(&ours, rc);
}

/* MPI_Waitall of one request of the plugin's (@p op, at reqs[0]): what
 * the general path does for it, as MPI_Wait waits, without the scans of
 * the array and the finishing loops. */
static int wait_all_one(MPI_Request reqs[], struct pm_op *op, MPI_Status statuses[])
{
	struct failure ours = {MPI_COMM_NULL, MPI_SUCCESS};
	if (!inactive(op))
		pm_wait_op(op);
	finish_in_all(&reqs[0], op, statuses == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &statuses[0], &ours);
	return multi_error(&ours, MPI_SUCCESS);
}

int MPI_Waitall(int count, MPI_Request reqs[], MPI_Status statuses[])
{
	struct pm_op *one = count == 1 ? op_at(reqs, 0) : NULL;
	if (one)
		return wait_all_one(reqs, one, statuses);
	struct tally l = {0, 0, 0, 0};
	struct pm_op *done;
	for (int i = 0; (i = scan(reqs, i, count, &l, &done)) < count; i++)
		;
	if (!l.ours)
		return PMPI_Waitall(count, reqs, statuses);
	/* Watch the last op not done (ops finish mostly in order): the engine
	 * stops taking records once it is, rather than polling on for more. */
	unsigned idle = 0;
	int pending = 0, rc = MPI_SUCCESS;
	struct pm_op *outer = pm.watch;
	while (l.pending && !ours_all_done(reqs, count, &pending)) {
		pm.watch = last_pending(reqs, count, pending);
		wait_pass(&idle, op_at(reqs, pending)->kind == OP_COLL);
	}
	pm.watch = outer;
	if (l.lib)
		rc = PMPI_Waitall(count, reqs, statuses);
	return all_finish(&l, count, reqs, statuses, rc);
}

int MPI_Testall(int count, MPI_Request reqs[], int *flag, MPI_Status statuses[])
{
	struct tally l = {0, 0, 0, 0};
	struct pm_op *done;
	for (int i = 0; (i = scan(reqs, i, count, &l, &done)) < count; i++)
		;
	if (!l.ours)
		return PMPI_Testall(count, reqs, flag, statuses);
	pm_progress();
	*flag = 0;
	int pending = 0, rc = MPI_SUCCESS;
	if (!ours_all_done(reqs, count, &pending)) {
		pm_mpi_progress();
		return MPI_SUCCESS;
	}
	int lib_done = 1;
	if (l.lib)
		rc = PMPI_Testall(count, reqs, &lib_done, statuses);
	if (rc == MPI_SUCCESS && !lib_done)
		return MPI_SUCCESS;
	*flag = 1;
	return all_finish(&l, count, reqs, statuses, rc);
}

/* ---- any --------------------------------------------------------------------- */

/* One look for any completed request: ours, then the library's (its
 * Testany over the whole array).  @return 1 found (*index set), 0 none
 * yet, -1 none active at all, -2 none of the requests is the plugin's
 * (pass the call to the library). */
static int any_pass(int count, MPI_Request reqs[], int *index, MPI_Status *status, int *rc)
{
	struct tally t = {0, 0, 0, 0};
	struct pm_op *op;
	int i = scan(reqs, 0, count, &t, &op);
	if (i < count) {
		*index = i;
		MPI_Comm comm = error_comm(op);
		*rc = pm_comm_error(comm, finish(&reqs[i], op, status, false));
		return 1;
	}
	if (!t.ours)
		return -2;
	bool active = t.pending;
	if (t.lib + t.sent) {
		int k = MPI_UNDEFINED, flag = 0;
		*rc = PMPI_Testany(count, reqs, &k, &flag, status);
		if (*rc != MPI_SUCCESS || (flag && k != MPI_UNDEFINED)) {
			*index = k;
			return 1;
		}
		if (!flag)
			active = true;
	}
	return active ? 0 : -1;
}

int MPI_Waitany(int count, MPI_Request reqs[], int *index, MPI_Status *status)
{
	unsigned idle = 0;
	int rc = MPI_SUCCESS, colls = -1; /* -1: not yet known */
	for (;;) {
		int got = any_pass(count, reqs, index, status, &rc);
		if (got == -2)
			return PMPI_Waitany(count, reqs, index, status);
		if (got > 0)
			return rc;
		if (got < 0) {
			*index = MPI_UNDEFINED;
			pm_status_empty(status);
			return MPI_SUCCESS;
		}
		if (colls < 0) /* what is pending changes only as one finishes, which ends the call */
			colls = only_colls_pending(count, reqs);
		wait_pass(&idle, colls);
	}
}

int MPI_Testany(int count, MPI_Request reqs[], int *index, int *flag, MPI_Status *status)
{
	int rc = MPI_SUCCESS;
	if (!any_ours(count, reqs))
		return PMPI_Testany(count, reqs, index, flag, status);
	pm_progress();
	int got = any_pass(count, reqs, index, status, &rc);
	*flag = got != 0;
	if (got <= 0)
		*index = MPI_UNDEFINED;
	if (got < 0)
		pm_status_empty(status);
	return rc;
}

/* ---- some ------------------------------------------------------------------------ */

/* One look for every completed request: ours first, then the library's
 * (its Testsome over the array, into what follows ours in @p indices and
 * @p statuses).  @return how many, -1 when none is active, -2 when none is
 * the plugin's (pass the call to the library). */
static int some_pass(int count, MPI_Request reqs[], int indices[], MPI_Status statuses[], struct failure *ours,
		     int *lib_rc)
{
	struct tally t = {0, 0, 0, 0};
	struct pm_op *op;
	int n = 0;
	for (int i = 0; (i = scan(reqs, i, count, &t, &op)) < count; i++) {
		MPI_Status *st = statuses == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &statuses[n];
		finish_noting(&reqs[i], op, st, ours);
		indices[n++] = i;
	}
	if (!t.ours)
		return -2;
	bool active = t.pending;
	if (t.lib + t.sent) {
		int out = MPI_UNDEFINED;
		MPI_Status *st = statuses == MPI_STATUSES_IGNORE ? MPI_STATUSES_IGNORE : &statuses[n];
		int rc = PMPI_Testsome(count, reqs, &out, &indices[n], st);
		if (rc != MPI_SUCCESS)
			*lib_rc = rc;
		if (out != MPI_UNDEFINED) {
			active = true;
			for (int j = 0; rc == MPI_SUCCESS && st != MPI_STATUSES_IGNORE && j < out; j++)
				st[j].MPI_ERROR = MPI_SUCCESS;
			n += out;
		}
	}
	return n ? n : active ? 0 : -1;
}

/* Waitsome (@p wait) or Testsome; @return -2 when no request is the
 * plugin's (pass the call to the library), else the call's result. */
static int some(int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[], bool wait)
{
	struct failure ours = {MPI_COMM_NULL, MPI_SUCCESS};
	int lib_rc = MPI_SUCCESS, colls = -1; /* as in MPI_Waitany */
	unsigned idle = 0;
	if (!wait) {
		if (!any_ours(incount, reqs))
			return -2;
		pm_progress();
	}
	for (;;) {
		int n = some_pass(incount, reqs, indices, statuses, &ours, &lib_rc);
		if (n == -2)
			return -2;
		if (n != 0 || !wait) {
			*outcount = n < 0 ? MPI_UNDEFINED : n;
			break;
		}
		if (colls < 0)
			colls = only_colls_pending(incount, reqs);
		wait_pass(&idle, colls);
	}
	return multi_error(&ours, lib_rc);
}

int MPI_Waitsome(int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[])
{
	int rc = some(incount, reqs, outcount, indices, statuses, true);
	return rc != -2 ? rc : PMPI_Waitsome(incount, reqs, outcount, indices, statuses);
}

int MPI_Testsome(int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[])
{
	int rc = some(incount, reqs, outcount, indices, statuses, false);
	return rc != -2 ? rc : PMPI_Testsome(incount, reqs, outcount, indices, statuses);
}
