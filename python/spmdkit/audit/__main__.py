"""`python -m spmdkit.audit ...` (and the worker, `--worker FRAMEWORK`)."""

import sys

from spmdkit.audit.cli import main

sys.exit(main())
