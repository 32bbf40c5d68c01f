"""Shared body of the seed stand-ins: append one JSON line (tool, argv, environment).

Called as ``_record.py <tool> <args...>`` by the ``ray``/``pkill``/``docker``/``sleep``
wrappers next to it. It runs nothing else, so the seed script can be executed for real
without touching any process, container or Ray cluster of this machine.
"""

import json
import os
import sys


def main() -> int:
    tool, argv = sys.argv[1], sys.argv[2:]
    record = {"tool": tool, "argv": argv, "env": dict(os.environ)}
    # One write per call, appended: the seed calls its tools one after another.
    with open(os.environ["CLAWGYM_STANDIN_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
