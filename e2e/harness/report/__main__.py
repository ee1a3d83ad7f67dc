import sys

from e2e.harness.report.cli import main

sys.exit(main())
