"""python -m rag_hier."""

import sys

from rag_hier.cli.main import main

sys.exit(main())
