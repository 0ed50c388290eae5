"""Tests of the flybus Python package; see _router for the router they run against.

They run either way: `python3 -m unittest discover -s python/tests` (each
module at top level) or with `-t python` (as the package `tests`, which
puts this directory on the path for the shared _router module).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
