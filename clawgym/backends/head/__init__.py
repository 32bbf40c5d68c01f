"""The local Ray head: one that clawgym starts, records, and stops through that record only.

``ray stop`` and ``pkill`` stop every Ray process on the machine, including other
people's clusters. Instead, a head started here is made identifiable and written
down, and stopping it touches nothing else:

- ``ray start`` runs in a new session (``setsid``): the head's daemons share that
  session id, and a terminal's Ctrl-C does not reach them directly.
- The head's environment carries a unique marker, ``CLAWGYM_HEAD_ID``; every process
  of the head inherits it, including job drivers that Ray moves into sessions of
  their own.
- It gets a dedicated short ``--temp-dir`` (its sockets, logs and
  ``ray_current_cluster`` stay out of the shared ``/tmp/ray``) and free ports for the
  services that otherwise default to fixed ones, so it coexists with other heads.
- The record, ``<state dir>/heads/<dashboard port>.json``, holds the pids with their
  create times, the session id, marker, temp dir and addresses.

Stopping verifies each process (pid + create time, or marker + start time) before
SIGTERM, then SIGKILLs what is left after a grace period, then removes the record.

Ownership: a head is *shared* by the launches that use it, and the record lists them
(``users``: pid + process start time, so a reused pid is not mistaken for a user).
The launch that starts a head is its first user; a later launch with the same settings
joins the list while it runs. Each launch leaves the list when it ends, and the last
one out stops the head, unless the head is *kept* (``ray.keep_head``, detached jobs, a
lost terminal, or jobs still running that a launcher no longer follows: ``kept`` and
``kept_reason`` in the record), in which case only ``clawgym jobs stop-head`` stops it.
A head that is neither kept nor used by a live launch is *orphaned* (its launcher was
killed): the next launch on it says so, lists what runs there and how to stop it.
Record updates are serialised by a lock file next to the record.

Modules, from the bottom up:

- :mod:`.records`: what a head was started with and the record of it on disk (``HeadRecord``,
  argv helpers, the state dir, ``HeadError``).
- :mod:`.processes`: the head's processes: found by record, session and marker, verified,
  terminated (psutil).
- :mod:`.users`: who uses a head: join, leave, ``ownership`` (in use, kept, orphaned).
- :mod:`.liveness`: asking a head whether it answers (dashboard, agent, GPUs, ``head_state``).
- :mod:`.ports`: the ports a head will bind, reserved until it listens on them.
- :mod:`.start`: ``ray start`` in the background (``HeadStart``, ``begin_head``, ``start_head``)
  and ``stop_head``.
- :mod:`.signals`: SIGTERM/SIGHUP as Ctrl-C while a head may start; signals held while it stops.
- :mod:`.settle`: what an earlier launch left on the head's dashboard port (reuse, clean up,
  replace or refuse).
- :mod:`.jobs`: the jobs still running on a cluster.
- :mod:`.lost`: a head lost mid-run (its recorded GCS or raylet gone): known dead without waiting,
  what is left of it stopped through its record, replaced by a head the run's supervisor owns.
"""
