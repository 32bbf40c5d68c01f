"""Config snapshots: one per launch in the save dir, and a copy in every checkpoint.

Layout (``<save>`` is ``paths.save``)::

    <save>/clawgym/snapshots/<submission id>/   one per real launch, never overwritten
        config.yaml            composed config, interpolations kept
        config.resolved.yaml   the same, resolved (what the run used)
        overrides.yaml         command-line overrides (null when unknown)
        choices.yaml           chosen option of each config group (null when unknown)
        launch_plan.json       argv, runtime env (no secret), submission id
        meta.json              versions, git commits, host, time, secret *names*,
                               and the checkpoints present at launch
        manifest.json          size and sha256 of every file above; written last
        submitted.json         the submission, added once the job was submitted (a SLURM job
                               names its cluster: ClusterName and controller)
    <save>/clawgym/wandb_config.yaml            the W&B run config of the latest launch
    <save>/iter_0000009/clawgym_snapshot/       copy of the snapshot of the run that wrote it

A snapshot is written into a hidden temp dir and renamed into place, so a crash leaves
either a whole snapshot or none (hidden ``.tmp-*`` leftovers are never listed).
Its ``manifest.json`` (written last) records the size and sha256 of every file:
``show``, ``diff``, ``resume`` and ``stamp`` refuse a snapshot whose files are missing,
truncated or altered (:func:`~clawgym.snapshot.manifest.verify_snapshot`), rather than read a partial config.

A snapshot is written before the job is submitted. The launch then calls
:func:`~clawgym.snapshot.marks.mark_submitted` once Ray accepted the job, or :func:`~clawgym.snapshot.marks.discard_unsubmitted` when
it stops before submitting (a refused cluster, Ctrl-C). A snapshot without the mark
(a launcher killed in between) is not a launch: ``show`` lists it apart, and
``resume``, ``diff``, ``stamp`` and the checkpoint assignment ignore it.

Placing snapshots into checkpoints: slime has no post-save hook, so
:class:`~clawgym.snapshot.checkpoints.CheckpointWatcher` runs in the launcher while it follows the job. It polls
``<save>`` and stamps a checkpoint once it is complete, i.e. once Megatron's
``latest_checkpointed_iteration.txt`` (written after the save finished) reaches it;
stamping earlier could race Megatron's own writes into a fresh ``iter_`` dir. Only
checkpoints the current run wrote are stamped: those absent at launch (recorded in the
snapshot with their files' mtimes), and those present at launch that this run rewrote
(a run without ``--load`` restarts at iteration 0); a rewritten one gets the new
snapshot in place of the old. So after ``clawgym resume`` older checkpoints keep the
snapshot of the run that wrote them.

When the launcher cannot follow the job:

- detach mode (``ray.detach=true``) or a launcher that exits early: no watcher runs.
- a save dir on a filesystem the launcher cannot see (an existing remote cluster):
  the snapshot lands at that path on the launcher's machine, where the watcher sees no
  checkpoints (or, when the path cannot be created there, the launch stops before
  submitting and says so). The W&B config file is then not given to the job either
  (``wandb.config_file``, see :mod:`clawgym.trainer.wandb_env`).

In both cases run ``clawgym stamp <save>`` on a machine that sees the save dir
(``--follow`` keeps watching until interrupted; for a remote save dir, first copy
``<save>/clawgym/`` from the launcher's machine into it): it assigns each complete,
unstamped checkpoint to the snapshot of the launch that preceded it (using the
checkpoints each snapshot recorded at launch). ``clawgym show <save>`` lists checkpoints
without one.
"""
