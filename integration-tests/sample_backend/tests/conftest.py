"""Make the backend importable from a checkout and registered, whether or not it is pip-installed.

Installed (the normal case for a vendor's CI, and in integration-tests/test_plugins.py) the entry point
registers PYREF; from a bare checkout the source folder is put on sys.path and the plugin is registered
by hand, as `Device.register_plugin` allows for tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import tg_backend_pyref
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import tg_backend_pyref

from tinygrad import Device

if "PYREF" not in Device.backends:
    Device.register_plugin(tg_backend_pyref, name="pyref", package="tg-backend-pyref",
                           version=tg_backend_pyref.__version__)
