"""``clawgym stamp <save dir>``: place snapshots into checkpoints after the fact.

For runs whose launcher did not follow the job (``ray.detach=true``, a launcher that
exited, or a save dir the launcher could not see): each complete checkpoint without a
snapshot gets the one of the launch that preceded it (the first launch that did not
find it in the save dir). ``--follow`` then keeps placing the latest launch's snapshot
into new checkpoints until interrupted, as the launcher's watcher would.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any
from clawgym.common.exit_codes import REFUSED


def run(args: argparse.Namespace) -> int:
    from clawgym.snapshot.checkpoints import CheckpointWatcher, stamp_save_dir
    from clawgym.snapshot.layout import SnapshotError
    from clawgym.snapshot.read import find_snapshot

    try:
        snap, save = find_snapshot(args.save_dir)
    except SnapshotError as exc:
        print(str(exc), file=sys.stderr)
        return REFUSED
    if save is None:
        print(f"clawgym stamp: {args.save_dir} is a snapshot, not a save dir", file=sys.stderr)
        return REFUSED
    placed = stamp_save_dir(save)
    for it, sid in placed:
        print(f"iter_{it:07d}: placed snapshot {sid}", flush=True)
    if not placed:
        print("every complete checkpoint already carries its snapshot", flush=True)
    if not args.follow:
        return 0
    watcher = CheckpointWatcher(save, snap.path, poll_interval=args.interval)
    print(f"following {save} with snapshot {snap.id} (Ctrl-C to stop)", flush=True)
    watcher.start()
    seen = 0
    try:
        while True:
            time.sleep(args.interval)
            for it in watcher.stamped[seen:]:
                print(f"iter_{it:07d}: placed snapshot {snap.id}", flush=True)
            seen = len(watcher.stamped)
    except KeyboardInterrupt:
        pass
    for it in watcher.stop()[seen:]:
        print(f"iter_{it:07d}: placed snapshot {snap.id}", flush=True)
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("stamp", help="place config snapshots into checkpoints after the fact",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("save_dir", help="the run's save dir (paths.save)")
    p.add_argument("--follow", action="store_true", help="keep stamping new checkpoints until Ctrl-C")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between scans with --follow")
    p.set_defaults(func=run)
