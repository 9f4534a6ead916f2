"""The PostgreSQL store's answers to what the cluster tests found
(tests/test_cluster.py): an end recorded once, whoever records it later,
and a schedule's due time counted once, however many nodes record it."""

from twisted.internet import defer, reactor, task

from netweir_serve.schedules.records import ScheduleRecord

from .test_store_postgres import StoreCase, job


class FirstEndStandsTests(StoreCase):
    @defer.inlineCallbacks
    def test_an_end_recorded_after_the_job_was_lost_leaves_it_lost(self):
        # A node cut off from the table records its crawl's end once it is
        # back; the others had declared it dead and its job lost meanwhile.
        store = yield self.open()
        other = yield self.open()
        yield store.add(job("one"))
        yield store.claim_next("cut", ["shop"], 1.0)
        lost = yield other.mark_lost("cut", 5.0, "its node stopped answering")
        # The other store's change reaches this one's version by a notice:
        # wait for it, so that only the late end could move it after.
        for _ in range(500):
            if store.version == other.version:
                break
            yield task.deferLater(reactor, 0.01, lambda: None)
        version = store.version
        late = yield store.mark_finished("one", "finished", 4.0, exit_status=0,
                                         stats={"items": 3})
        self.assertEqual((late.outcome, late.end_time, late.reason),
                         ("lost", 5.0, "its node stopped answering"))
        found = yield other.get("one")
        self.assertEqual((found.state, found.outcome, found.end_time, found.exit_status),
                         ("finished", "lost", 5.0, None))
        self.assertEqual([r.id for r in lost], ["one"])
        self.assertEqual(store.version, version)

    @defer.inlineCallbacks
    def test_a_running_job_is_ended_as_before(self):
        store = yield self.open()
        yield store.add(job("one"))
        yield store.claim_next("a", ["shop"], 1.0)
        done = yield store.mark_finished("one", "failed", 2.0, exit_status=1)
        self.assertEqual((done.state, done.outcome, done.exit_status), ("finished", "failed", 1))


def schedule(name="tick"):
    return ScheduleRecord(name=name, project="shop", spider="books", kind="every",
                          rule="2s", tz="UTC", next_due=10.0, anchor=8.0)


class DueTimeCountedOnceTests(StoreCase):
    @defer.inlineCallbacks
    def test_three_nodes_recording_one_due_time_count_it_once(self):
        stores = []
        for _ in range(3):
            stores.append((yield self.open()))
        added = yield stores[0].add_schedule(schedule())
        # Every node's timer fires at the due time: each records it.
        yield defer.gatherResults([
            s.update_schedule("tick", seq=added.seq, next_due=12.0, last_due=10.0,
                              last_job="tick-10", error=None, runs_added=1)
            for s in stores])
        found = yield stores[1].get_schedule("tick")
        self.assertEqual((found.runs, found.last_due, found.next_due), (1, 10.0, 12.0))
        # The next due time counts again, once; so does a skip.
        for s in stores:
            yield s.update_schedule("tick", seq=added.seq, next_due=14.0, last_due=12.0,
                                    skipped_added=1)
        found = yield stores[2].get_schedule("tick")
        self.assertEqual((found.runs, found.skipped, found.last_due), (1, 1, 12.0))

    @defer.inlineCallbacks
    def test_counts_without_a_due_time_add_up(self):
        store = yield self.open()
        yield store.add_schedule(schedule())
        for _ in range(2):
            yield store.update_schedule("tick", runs_added=1)
        self.assertEqual((yield store.get_schedule("tick")).runs, 2)
