"""How the service itself is doing, as operators of a Twisted service ask
it: the reactor's lateness, and how often listings are built from the job
table rather than answered from a cache. /metrics shows both."""
