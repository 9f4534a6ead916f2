"""Answering with a value that may come later (a Deferred from the job core).

A Deferred that has fired before the handler returns (a cached answer, a
store answering at once in unit tests) is answered in the same call, as a
plain value would be. One that has not (the store answers from its own
thread) is answered when it fires, and cancelled if the client goes away
first (a reader process checking a spider stops then), unless it is
``shielded``: a write goes on to its end whoever waits for it.
"""

from twisted.internet import defer
from twisted.python.failure import Failure
from twisted.web.server import NOT_DONE_YET


def render_result(request, result, write, fail):
    """What ``render`` returns for ``result``: ``write(value)`` gives the
    body of a value, ``fail(failure)`` the body of an error."""
    if not isinstance(result, defer.Deferred):
        return write(result)
    settled, waiting, gone = [], [], []

    def settle(outcome):
        if not waiting:
            settled.append(outcome)
        elif not gone:
            body = fail(outcome) if isinstance(outcome, Failure) else write(outcome)
            request.write(body)
            request.finish()

    result.addBoth(settle)
    if settled:
        outcome = settled[0]
        return fail(outcome) if isinstance(outcome, Failure) else write(outcome)
    waiting.append(True)

    def went_away(failure):
        gone.append(True)
        result.cancel()

    request.notifyFinish().addErrback(went_away)
    return NOT_DONE_YET


def shielded(deferred):
    """A Deferred of ``deferred``'s outcome whose cancel does not reach
    ``deferred``: the one cancelling hears CancelledError at once, the work
    goes on to its end (its outcome, once it has one, goes nowhere).

    For a write: a store's Deferred cancelled mid-way may say
    CancelledError of a transaction that commits (adbapi's runInteraction
    has no canceller), so a write is never cancelled, only left."""
    out = defer.Deferred()

    def passed(outcome):
        # Once ``out`` is cancelled nobody waits: a failure ends here.
        if not out.called:
            out.callback(outcome)

    deferred.addBoth(passed)
    return out
