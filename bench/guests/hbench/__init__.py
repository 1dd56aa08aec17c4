"""The guest benchmark harness. Its QMP client is the project's shared one (guest/hltharness/qmp.py)."""

import os
import sys

_GUEST = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                      "guest")
if _GUEST not in sys.path:
    sys.path.insert(0, _GUEST)
