import sys

from clawgym.cli import main

sys.exit(main())
