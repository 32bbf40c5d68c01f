"""Body of the stand-ins ``clawgym import`` puts first on a launch script's PATH.

Run as ``python -S recorder.py TOOL ARGS...`` by the small wrappers that
:mod:`clawgym.importer.capture` writes (one per tool). It appends one JSON line
(tool, argv, cwd, environment) to ``$CLAWGYM_IMPORT_LOG`` and does nothing else, so
running a launch script kills no process, starts no Ray head and submits no job:
what the script *would* do is read back from the log. Standard library only, no
site-packages (``-S``): it runs once per command the script calls.
"""

import json
import os
import shutil
import sys

#: Tools whose stdout the script pipes onward: the stand-in passes stdin through
#: (``exec > >(tee -a log)`` keeps printing, nothing is written).
PASS_THROUGH = {"tee"}


def main() -> int:
    tool, argv = sys.argv[1], sys.argv[2:]
    record = {"tool": tool, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    # One append per call; the script calls its tools one after another.
    with open(os.environ["CLAWGYM_IMPORT_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")
    if tool in PASS_THROUGH:
        shutil.copyfileobj(sys.stdin.buffer, sys.stdout.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
