"""``python -m sectionmark`` runs the command-line interface."""

import sys

from sectionmark.cli import main

sys.exit(main())
