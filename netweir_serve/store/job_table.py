"""The job table: IJobStore's methods written once for every backend.

A mixin of each job store (SQLiteJobStore, PostgresJobStore), as
schedule_table.ScheduleTable is, and run the same way: the statements are
written once, with psycopg's named placeholders; a store runs them through
``_write_statements`` and ``_read_statements`` (each a Deferred of
``work(tx)``, ``tx`` having ``one``, ``all`` and ``changed``), in its own
dialect. Every write sends the notice of what it changed with
``tx.changed`` (a store that is not shared tells nobody).

What a backend gives: its columns (``_jobs``, a JobColumns with its
converters), the error its database raises for a key taken
(``_name_taken``), and what is truly its own: how a claim keeps other
claims out until it commits (``_lock_claims``) and how the listing reads
its three lists (``_listed``).
"""

import random
from dataclasses import replace

from twisted.internet import defer
from twisted.logger import Logger

from ..names import fold
from .columns import (
    JOB_FIELDS, POLICY_FIELDS, TALLY, claim_candidates, columns_of, dump_json, record_of,
    select_list, without)
from .notices import CANCEL, CLAIMED, ENDED, PRUNED, QUEUED, SCHEDULE, STARTED
from .records import (
    CANCELLED_BY_USER, FINISHED, FINISHED_OUTCOME, LOST, OUTCOMES, PENDING, RUNNING, DuplicateJob, JobRecord)
from .retrying import retry_after
from . import chain_firings, schedule_streaks
from ..health.checks import RunCounts, judge
from ..health.counts import counts_of
from ..reliability.policy import JobPolicy
from .runpolicy import first_that_may_run


log = Logger()


class JobColumns:
    """The job table's columns as one backend reads and writes them: all of
    them, those a listing shows (not stats, the one large column), those
    the run policies read for a claim, and those an insert writes."""

    def __init__(self, kinds):
        self.all = columns_of(JOB_FIELDS, kinds)
        self.listed = without(self.all, "stats")
        self.policy = tuple(c for c in self.all if c.name in POLICY_FIELDS)
        self.inserted = without(self.all, "seq")


# The column lists (names alone: the same for every backend).
_NAMES = JobColumns({kind: (None, None) for _, kind in JOB_FIELDS})
SELECT_ALL = select_list(_NAMES.all)
# What a listing kept in memory holds of a finished job, in this order
# (web/paging.FinishedRow).
FINISHED_ROW = ("end_time", "seq", "id", "project", "spider", "outcome", "reason", "health",
                "node", "schedule")


def _key_chunks(ids):
    """The folded ``ids`` as parameter dicts of at most 500 (a statement's
    parameters are bounded: SQLite's at 32,766)."""
    keys = sorted({fold(jobid) for jobid in ids})
    return [{f"k{n}": key for n, key in enumerate(keys[start:start + 500])}
            for start in range(0, len(keys), 500)]


# What a listing reads, in this order (a backend's ``_listed``).
SELECT_LISTED = select_list(_NAMES.listed)
LISTED_STATE = [c.name for c in _NAMES.listed].index("state")
_SELECT_POLICY = select_list(_NAMES.policy)
_INSERT = (f"INSERT INTO jobs (key, project_key, {select_list(_NAMES.inserted)})"
           f" VALUES (%(key)s, %(project_key)s,"
           f" {', '.join(f'%({c.name})s' for c in _NAMES.inserted)})")
_ADD = f"{_INSERT} RETURNING seq"
# A schedule's job counted in its ``runs`` by the insert that queues it, so
# no job is counted twice or left out whatever queued it (a firing, a run
# asked now, a backfill, a chain) and wherever that stopped: the schedule of
# its name made no later than the job (a schedule deleted and added again
# does not count its predecessor's jobs). A retry (_ADD_RETRY) is not a run.
_COUNT_RUN = ("UPDATE schedules SET runs = runs + 1 WHERE key = %(key)s"
              " AND created <= %(created)s RETURNING seq")
# A retry's id taken already (a job a user named JOBID.r1 with jobid=)
# must not undo the end it is written with: that end queues no retry.
_ADD_RETRY = f"{_INSERT} ON CONFLICT (key) DO NOTHING RETURNING seq"

_CLAIM = (
    "UPDATE jobs SET state = 'running', node = %(node)s, start_time = %(now)s"
    f" WHERE seq = %(seq)s AND state = 'pending' RETURNING {SELECT_ALL}")

# The finished jobs one node's --keep counts: its own and those no node
# ran (cancelled while pending: they have no files), or (no node given)
# all of them.
_PRUNED = "(CAST(%(node)s AS TEXT) IS NULL OR node = %(node)s OR node IS NULL)"
_FINISHED_PRUNED = f"state = %(finished)s AND {_PRUNED}"

_BY_KEY = "key = %(key)s"

# The jobs a schedule queued: jobs.schedule holds its name as spelt then;
# a name ignores case, as the schedule's key does, and a name is ASCII
# (names.is_name), which SQL's lower() folds as names.fold does. The
# parameter is the folded name (``schedule_key``).
_SCHEDULE_IS = "lower(schedule) = %(schedule_key)s"
# Whose runs a run is compared with: its schedule's, or (no schedule
# queued it) its spider's. A schedule's are also its project's and
# spider's: a name deleted and used again for another spider is not
# compared with the old one's runs. Each an index of migration 9
# (jobs_runs, jobs_schedule_runs) reads newest first.
_OF_SPIDER = "project_key = %(project)s AND spider = %(spider)s"
_OF_SCHEDULE = f"{_OF_SPIDER} AND {_SCHEDULE_IS}"
_COUNTS = "items, pages, errors, end_time - start_time"
# The last healthy runs of one owner, newest first. 'healthy' is written
# out, not a parameter, so a plan made once for every value still knows it.
_HISTORY = (f"SELECT {_COUNTS} FROM jobs WHERE {{owner}} AND health = 'healthy'"
            " AND seq != %(seq)s ORDER BY end_time DESC, seq DESC LIMIT %(size)s")


def _among(projects):
    """(``IN (...)``, its parameters) choosing the folded names of
    ``projects``; (None, {}) for none."""
    keys = sorted({fold(p) for p in projects})
    if not keys:
        return None, {}
    params = {f"p{i}": key for i, key in enumerate(keys)}
    return f"IN ({', '.join(f'%({name})s' for name in params)})", params


def _real(value):
    # SQLite gives back an integral REAL as an int.
    return float(value) if value is not None else None


def _schedule_key(name):
    return fold(name) if name is not None else None


def where_all(conditions):
    """The WHERE clause of ``conditions`` (a list), all to hold."""
    return f"WHERE {' AND '.join(conditions)}" if conditions else ""


class JobTable:
    """IJobStore's methods, for a job store (see the module)."""

    _jobs = None          # the JobColumns, with the store's converters
    _name_taken = None    # the exception class of a unique key taken

    # -- what the methods share ------------------------------------------------

    def _record(self, columns, row):
        return record_of(JobRecord, columns, row)

    def _one(self, tx, where, params):
        row = tx.one(f"SELECT {SELECT_ALL} FROM jobs WHERE {where}", params)
        return self._record(self._jobs.all, row) if row else None

    def _ended(self, tx, row):
        """The job a change ended (``row``), its ENDED notice sent; or None.
        Its retry, when its policy asks for one, is queued in the same
        transaction and comes on the record (``retry``): every way a job
        ends comes through here, so none forgets it (store.retrying)."""
        if row is None:
            return None
        record = self._judged(tx, self._record(self._jobs.all, row))
        tx.changed(ENDED, record.id, record.node)
        retry = retry_after(record, self._jitter())
        added = None if retry is None else tx.one(_ADD_RETRY, self._inserted(retry))
        if added is None:
            # Its final attempt: counted in its schedule's streak of bad
            # runs, and the chains after it are owed their firing.
            record = schedule_streaks.counted(tx, record, self._schedule_columns,
                                              self._schedule)
            return chain_firings.write_owed(tx, record, self._schedule)
        tx.changed(QUEUED, retry.id)
        return replace(record, retry=replace(retry, seq=added[0]))

    def _judged(self, tx, record):
        """``record`` (just ended) with its counts and health written: both
        judged once, here, in the transaction of its end (health.checks),
        against the runs before it when a check of its policy compares.
        Judging never loses the end: should it fail, the end is written
        with no counts and no health, and the error logged with the job's
        id."""
        try:
            items, pages, errors, health, reasons = self._judgement(tx, record)
        except Exception:
            log.failure("job {job}'s counts and health could not be judged: its end is"
                        " recorded without them", job=record.id)
            items, pages, errors, health, reasons = None, None, None, None, ()
        judged = replace(record, items=items, pages=pages, errors=errors, health=health,
                         health_reasons=reasons)
        columns = {c.name: c for c in self._jobs.all}
        tx.one("UPDATE jobs SET items = %(items)s, pages = %(pages)s, errors = %(errors)s,"
               " health = %(health)s, health_reasons = %(reasons)s WHERE seq = %(seq)s"
               " RETURNING seq",
               {"items": items, "pages": pages, "errors": errors, "health": health,
                "reasons": columns["health_reasons"].to_db(judged.health_reasons),
                "seq": record.seq})
        return judged

    def _judgement(self, tx, record):
        """(items, pages, errors, health, reasons) of ``record``, just ended."""
        items, pages, errors = counts_of(record.stats)
        health, reasons = None, ()
        if record.outcome == FINISHED_OUTCOME:
            policy = JobPolicy.from_json(record.policy)
            runtime = (record.end_time - record.start_time
                       if record.start_time is not None and record.end_time is not None
                       else None)
            history = self._history(tx, record, policy.history_size) if policy.compares else ()
            health, reasons = judge(RunCounts(items, pages, errors, runtime), policy, history)
        return items, pages, errors, health, reasons

    def _history(self, tx, record, size, seq=None):
        """The RunCounts of the last ``size`` healthy runs ``record`` is
        compared with (of its schedule, or of its spider), newest first;
        not ``record`` itself."""
        params = {"schedule_key": _schedule_key(record.schedule),
                  "project": fold(record.project),
                  "spider": record.spider, "size": size,
                  "seq": record.seq if seq is None else seq}
        owner = _OF_SCHEDULE if record.schedule is not None else _OF_SPIDER
        return [RunCounts(*row[:3], runtime=_real(row[3]))
                for row in tx.all(_HISTORY.format(owner=owner), params)]

    def _jitter(self):
        """0 to 1, the part of a retry's 10 % jitter it gets (a test may
        set one of its own)."""
        return random.random()

    def _inserted(self, record):
        values = {c.name: c.to_db(getattr(record, c.name)) for c in self._jobs.inserted}
        values.update(key=fold(record.id), project_key=fold(record.project))
        return values

    def _running(self, tx, node):
        where, params = "state = %(running)s", {"running": RUNNING, "node": node}
        if node is not None:
            where += " AND (node = %(node)s OR node IS NULL)"
        return [self._record(self._jobs.all, row) for row in tx.all(
            f"SELECT {SELECT_ALL} FROM jobs WHERE {where} ORDER BY seq", params)]

    def _lock_claims(self, tx):
        """Keeps every other claim out until this one commits (the backend's)."""
        raise NotImplementedError

    def _lock_prunes(self, tx):
        """Keeps every other prune out until this one commits (the backend's)."""
        raise NotImplementedError

    def _listed(self, tx, where, params):
        """(pending, running, finished): the rows (SELECT_LISTED) of the jobs
        the conditions ``where`` (a list, empty for all) choose, each list
        in IJobStore.jobs's order (the backend's)."""
        raise NotImplementedError

    # -- IJobStore: writes -----------------------------------------------------

    def add(self, record):
        values = self._inserted(record)

        def insert(tx):
            try:
                seq = tx.one(_ADD, values)[0]
            except self._name_taken:
                raise DuplicateJob(record.id) from None
            tx.changed(QUEUED, record.id)
            if record.schedule is not None and tx.one(_COUNT_RUN, {
                    "key": fold(record.schedule), "created": record.created}) is not None:
                tx.changed(SCHEDULE)
            return replace(record, seq=seq)

        return self._write_statements(insert)

    def claim_next(self, node, projects, now, max_per_spider=None, can_run=None):
        among, params = _among(projects)
        if among is None:
            return defer.succeed(None)
        candidates = claim_candidates(self._jobs.policy, among)
        # A retry is no candidate before its due time (``now``, a time of day).
        params["now"] = now

        def claim(tx):
            self._lock_claims(tx)
            policy = self._jobs.policy
            running = [self._record(policy, row) for row in tx.all(
                f"SELECT {_SELECT_POLICY} FROM jobs WHERE state = 'running'", {})]
            pending = [self._record(policy, row) for row in tx.all(candidates, params)]
            while True:
                # The run policies decide as on every backend (store.runpolicy).
                chosen = first_that_may_run(running, pending, max_per_spider, can_run)
                if chosen is None:
                    return None
                row = tx.one(_CLAIM, {"node": node, "now": now, "seq": chosen.seq})
                if row is not None:
                    break
                # Cancelled (ended) since it was read: the next may run.
                pending.remove(chosen)
            claimed = self._record(self._jobs.all, row)
            tx.changed(CLAIMED, claimed.id, node)
            return claimed

        return self._write_statements(claim)

    def release_claim(self, jobid, node, claimed_at):
        def release(tx):
            row = tx.one(
                "UPDATE jobs SET state = %(pending)s, node = NULL, start_time = NULL"
                " WHERE key = %(key)s AND state = %(running)s AND node = %(node)s"
                f" AND start_time = %(claimed_at)s AND pid IS NULL RETURNING {SELECT_ALL}",
                {"pending": PENDING, "running": RUNNING, "key": fold(jobid), "node": node,
                 "claimed_at": claimed_at})
            if row is None:
                return None
            record = self._record(self._jobs.all, row)
            # Queued again: the other nodes' pollers wake for it.
            tx.changed(QUEUED, record.id)
            return record

        return self._write_statements(release)

    def mark_started(self, jobid, pid, proc_start=None):
        key = {"key": fold(jobid)}

        def started(tx):
            row = tx.one(
                "UPDATE jobs SET pid = %(pid)s, proc_start = %(proc_start)s"
                f" WHERE key = %(key)s AND state = %(running)s RETURNING {SELECT_ALL}",
                {"pid": pid, "proc_start": proc_start, "running": RUNNING, **key})
            if row is None:
                return self._one(tx, _BY_KEY, key)
            record = self._record(self._jobs.all, row)
            tx.changed(STARTED, record.id, record.node)
            return record

        return self._write_statements(started)

    def mark_finished(self, jobid, outcome, end_time, exit_status=None, stats=None,
                      reason=None, detail=None):
        if outcome not in OUTCOMES:
            return defer.fail(ValueError(f"not an outcome: {outcome!r}"))
        values = {"finished": FINISHED, "outcome": outcome, "end_time": end_time,
                  "exit_status": exit_status, "stats": dump_json(stats), "reason": reason,
                  "detail": detail, "key": fold(jobid)}

        # The first end recorded stands (IJobStore.mark_finished).
        return self._write_statements(lambda tx: self._ended(tx, tx.one(
            "UPDATE jobs SET state = %(finished)s, outcome = %(outcome)s,"
            " end_time = %(end_time)s, exit_status = %(exit_status)s, stats = %(stats)s,"
            " reason = %(reason)s, detail = %(detail)s"
            " WHERE key = %(key)s AND state != %(finished)s"
            f" RETURNING {SELECT_ALL}", values)))

    def cancel_pending(self, jobid, end_time, reason=CANCELLED_BY_USER):
        values = {"finished": FINISHED, "end_time": end_time, "pending": PENDING,
                  "reason": reason, "key": fold(jobid)}

        # One statement: a claim holding the row makes it wait, then finds
        # the job no longer pending.
        return self._write_statements(lambda tx: self._ended(tx, tx.one(
            "UPDATE jobs SET state = %(finished)s, outcome = 'cancelled',"
            " end_time = %(end_time)s, reason = %(reason)s"
            f" WHERE key = %(key)s AND state = %(pending)s RETURNING {SELECT_ALL}", values)))

    def mark_cancel_requested(self, jobid, kill=False, reason=CANCELLED_BY_USER):
        # A flag as the backend holds one; a kill asked once stays asked,
        # and the reason of the first cancel stands (a user's second cancel
        # of a job timed out kills it; it still ends for its timeout).
        flags = {c.name: c for c in self._jobs.all}
        values = {"yes": flags["cancel_requested"].to_db(True), "key": fold(jobid),
                  "reason": reason, "running": RUNNING}
        kills = ", kill_requested = %(yes)s" if kill else ""

        def requested(tx):
            row = tx.one(f"UPDATE jobs SET cancel_requested = %(yes)s{kills},"
                         " reason = CASE WHEN state = %(running)s THEN COALESCE(reason,"
                         " %(reason)s) ELSE reason END"
                         " WHERE key = %(key)s RETURNING id, node", values)
            if row is not None:
                tx.changed(CANCEL, *row)

        return self._write_statements(requested)

    def recover(self, node, end_time, stats_of):
        # ``stats_of`` reads the service's files: it runs on the reactor
        # thread, between reading the running jobs and ending them (each
        # only if it still runs then).
        def end(records):
            if not records:
                return []
            plan = [(r, stats_of(r), "the service stopped while the job ran"
                     if r.pid is not None
                     else "the service stopped before the job's process started")
                    for r in records]
            lost_reason = {"reason": LOST}

            def lost(tx):
                ended = []
                for record, stats, reason in plan:
                    row = tx.one(
                        "UPDATE jobs SET state = %(finished)s, outcome = 'lost',"
                        " end_time = %(end_time)s, stats = %(stats)s, reason = %(reason)s,"
                        " detail = %(detail)s"
                        f" WHERE seq = %(seq)s AND state = %(running)s RETURNING {SELECT_ALL}",
                        {"finished": FINISHED, "end_time": end_time,
                         "stats": dump_json(stats), "detail": reason, "seq": record.seq,
                         "running": RUNNING, **lost_reason})
                    if row is not None:
                        ended.append(self._ended(tx, row))
                return ended

            return self._write_statements(lost)

        return self.running(node).addCallback(end)

    def prune(self, keep, node=None):
        whose = {"finished": FINISHED, "node": node, "keep": int(keep)}
        # Every node's jobs (node None: one service on its own table): the
        # state alone, which the index jobs_finished_order answers by itself.
        pruned = _FINISHED_PRUNED if node is not None else "state = %(finished)s"

        # Called after every job ends: the count, from the index, spares a
        # sort of the whole finished list (and a write) when nothing is to go.
        def count(tx):
            return tx.one(f"SELECT COUNT(*) FROM jobs WHERE {pruned}", whose)[0]

        def forget(tx):
            self._lock_prunes(tx)
            # Counted again in the write: another prune may have come first.
            finished = count(tx)
            if finished <= keep:
                return []
            # The newest of the jobs to forget: counted from the oldest end
            # (index jobs_finished_order), usually the first step, where the
            # newest ``keep`` counted from the other end would walk past
            # every job kept. Every job up to it in that order goes.
            # A job with no end time (none is written so; an old or edited
            # table) counts as the oldest, on both backends.
            cut = tx.one(
                f"SELECT end_time, seq FROM jobs WHERE {pruned}"
                " ORDER BY end_time NULLS FIRST, seq LIMIT 1 OFFSET %(past)s",
                {**whose, "past": finished - int(keep) - 1})
            if cut is None:
                return []
            # Each a range of the index (an OR of them would not be).
            up_to = (["end_time IS NULL AND seq <= %(seq)s"] if cut[0] is None else
                     ["end_time IS NULL",
                      "end_time <= %(end)s AND (end_time < %(end)s OR seq <= %(seq)s)"])
            old = [self._record(self._jobs.listed, row) for condition in up_to
                   for row in tx.all(f"DELETE FROM jobs WHERE {pruned} AND {condition}"
                                     f" RETURNING {SELECT_LISTED}",
                                     {**whose, "end": cut[0], "seq": cut[1]})]
            # One notice per job forgotten, each naming it: a listing kept
            # in memory (store/journal.py) drops exactly those.
            for record in old:
                tx.changed(PRUNED, record.id, record.node)
            return old

        return self._read_statements(count).addCallback(
            lambda finished: self._write_statements(forget) if finished > keep else [])

    # -- IJobStore: reads ------------------------------------------------------

    def next_retry(self, projects, after):
        among, params = _among(projects)
        if among is None:
            return defer.succeed(None)
        params.update(pending=PENDING, after=after)
        return self._read_statements(lambda tx: _real(tx.one(
            "SELECT MIN(not_before) FROM jobs WHERE state = %(pending)s"
            f" AND project_key {among} AND not_before > %(after)s", params)[0]))

    def get(self, jobid):
        return self._read_statements(lambda tx: self._one(tx, _BY_KEY, {"key": fold(jobid)}))

    def schedule_jobs(self, name):
        def count(tx):
            found = dict(tx.all(
                f"SELECT state, COUNT(*) FROM jobs WHERE {_SCHEDULE_IS}"
                " AND state != %(finished)s GROUP BY state",
                {"schedule_key": fold(name), "finished": FINISHED}))
            return found.get(PENDING, 0), found.get(RUNNING, 0)

        return self._read_statements(count)

    def runs(self, project, spider, schedule=None, limit=50, history=5):
        params = {"schedule_key": _schedule_key(schedule), "project": fold(project),
                  "spider": spider,
                  "limit": int(limit), "finished": FINISHED}
        owner = _OF_SCHEDULE if schedule is not None else _OF_SPIDER

        def read(tx):
            listed = [self._record(self._jobs.listed, row) for row in tx.all(
                f"SELECT {SELECT_LISTED} FROM jobs WHERE {owner} AND state = %(finished)s"
                " ORDER BY end_time DESC, seq DESC LIMIT %(limit)s", params)]
            of = JobRecord(id="", project=project, spider=spider, spider_file="",
                           schedule=schedule)
            return listed, self._history(tx, of, int(history), seq=-1)

        return self._read_statements(read)

    def unfinished_schedule_jobs(self, name):
        return self._read_statements(lambda tx: [row[0] for row in tx.all(
            f"SELECT id FROM jobs WHERE {_SCHEDULE_IS} AND state != %(finished)s"
            " ORDER BY seq", {"schedule_key": fold(name), "finished": FINISHED})])

    def jobs(self, project=None):
        where, params = [], {}
        if project is not None:
            where, params = ["project_key = %(project)s"], {"project": fold(project)}

        def listing(tx):
            listed = self._jobs.listed
            return tuple([self._record(listed, row) for row in rows]
                         for rows in self._listed(tx, where, params))

        return self._read_statements(listing)

    def unfinished_jobs(self, project=None):
        """(pending, running) as ``jobs`` gives them: what a listing kept in
        memory reads whole at each change (they are few)."""
        where, params = ["state != %(finished)s"], {"finished": FINISHED}
        if project is not None:
            where.append("project_key = %(project)s")
            params["project"] = fold(project)

        def listing(tx):
            listed = self._jobs.listed
            pending, running, _ = (
                [self._record(listed, row) for row in rows]
                for rows in self._listed(tx, where, params))
            return pending, running

        return self._read_statements(listing)

    def finished_rows(self, project=None, ids=None, make=tuple):
        """The finished jobs (of ``project``; among ``ids`` when given, else
        all) as ``make(row)`` of each row of FINISHED_ROW's columns (made as
        they are read, so the rows are never all in memory at once): what a
        listing kept in memory holds of each, a tenth of a record
        (store/journal.py)."""
        where, params = ["state = %(finished)s"], {"finished": FINISHED}
        if project is not None:
            where.append("project_key = %(project)s")
            params["project"] = fold(project)
        select = f"SELECT {', '.join(FINISHED_ROW)} FROM jobs WHERE {' AND '.join(where)}"

        def read(tx):
            if ids is None:
                return [make(row) for row in tx.each(select, params)]
            return [make(row) for chunk in _key_chunks(ids) for row in tx.all(
                f"{select} AND key IN ({', '.join(f'%({name})s' for name in chunk)})",
                {**params, **chunk})]

        return self._read_statements(read)

    def listed_jobs(self, ids):
        """The records (as listings read them) of the jobs ``ids`` still
        kept, in no order."""
        def read(tx):
            listed = self._jobs.listed
            return [self._record(listed, row) for chunk in _key_chunks(ids) for row in tx.all(
                f"SELECT {SELECT_LISTED} FROM jobs"
                f" WHERE key IN ({', '.join(f'%({name})s' for name in chunk)})", chunk)]

        return self._read_statements(read)

    def counts(self):
        def count(tx):
            found = {PENDING: 0, RUNNING: 0, FINISHED: 0}
            found.update(tx.all("SELECT state, COUNT(*) FROM jobs GROUP BY state", {}))
            return found

        return self._read_statements(count)

    def tally(self):
        return self._read_statements(lambda tx: {
            (state, project, node): n for state, project, node, n in tx.all(TALLY, {})})

    def running(self, node=None):
        return self._read_statements(lambda tx: self._running(tx, node))

