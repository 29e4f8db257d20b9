"""`python -m pskv ...` is the `pskv` command."""

import sys

from pskv.cli import main

sys.exit(main())
