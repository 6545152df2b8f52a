"""`python -m bench [--quick]`: run the workloads; see docs/performance.md."""

import sys

from ._runner import main

sys.exit(main())
