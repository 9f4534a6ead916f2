"""Warm starts: a job's parent forked from a process that has imported
Netweir already, instead of a fresh interpreter that imports it again.

A fresh ``python`` that imports Netweir takes most of a short job's start
(80-odd ms of it, where the crawl's own work to its first line of spider
code is a few). Here the service keeps one *warm process* (``_zygote``):
started as a job's parent would be (the same interpreter, the same
environment but for the run's mark, the service's control group), it
imports what ``python -m netweir`` imports before any spider code runs,
and forks idle *spares* ahead of time. A job is handed to a spare
(``starter``): it takes the job's standard streams, working directory,
environment and command line, and from there runs exactly the lines a
fresh parent runs (``_crawlparent.main``): a session of its own, a
subreaper, the crawl forked and run by ``runpy`` as ``python -m netweir``
would run it, its control group joined, its exit status written.

Why that is safe (``tests.test_warmstart`` checks each):

- Importing Netweir starts no thread, opens no file or socket, sets no
  signal handler, adds no logging handler, emits no warning and prints
  nothing, and makes no random generator of its own: so a fork shares no
  lock held by another thread, no descriptor, no stream and no random
  sequence with the process it came from. The warm process checks the
  first two again at every start and refuses to serve otherwise (the
  service then starts jobs cold, saying so once). What the import
  registers to run at exit or after a fork is logging's and
  multiprocessing's, and Netweir's native module's, which is written for
  forks (``_forked`` forgets the parent's Rust threads in a child;
  ``_wait_for_rust_threads`` waits at exit for this process's own): a
  cold crawl imports the same modules, so registers the same.
- What the import reads from its surroundings is the same as a cold
  start's: the environment is the job's, byte for byte, but for the run's
  mark (read by no module at import); a spare given another environment
  (the service's changed) runs the cold command line instead, by exec.
- What differs after a fork is put right in the spare before the job
  runs: the mark written into the environment the kernel shows in
  ``/proc/PID/environ`` (how leftovers of a job are found), sys.path,
  sys.argv and sys.orig_argv as a cold parent's, the import system's
  caches emptied (a spider file edited since is read afresh: the warm
  process never imports a project's files), multiprocessing's start
  directory and key renewed, the signal dispositions of a fresh start.
  ``random`` reseeds itself in every fork (os.register_at_fork).
- What cannot be put right makes the spare exec the cold command line in
  place (same pid, so the service notices nothing): a project whose
  folder holds a module of the same name as one the warm process has
  imported (a cold start would import the project's), or an interpreter
  whose site-packages changed since the warm process started (Netweir
  upgraded: the cold start would import the new one).
- Jobs with a memory limit start cold: the pages a warm crawl shares with
  the warm process were charged to the service's control group, not the
  job's, so its limit would hold more than it says.

What stays different: the hash seed of str and bytes (``PYTHONHASHSEED``
unset) is the warm process's, the same for every job it starts until the
service restarts, where a cold start draws one per job; and a job's
``/proc/PID/cmdline`` is the warm process's, which names the service's
directory (never a job's settings, as before).
"""
