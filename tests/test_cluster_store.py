"""The PostgreSQL store's answers to what the cluster tests found
(tests/test_cluster.py): a schedule's due time counted once, however many
nodes record it. (The first end standing is in the contract,
tests/test_store_contract.py.)"""

from twisted.internet import defer, reactor, task

from netweir_serve.schedules.records import ScheduleRecord

from .test_store_postgres import StoreCase, job


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
