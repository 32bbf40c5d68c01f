"""``python -m clawgym.supervisor <save dir> --id ID``: a run's supervisor (clawgym/supervisor/daemon.py)."""

import sys

from clawgym.supervisor.daemon import main

if __name__ == "__main__":
    sys.exit(main())
