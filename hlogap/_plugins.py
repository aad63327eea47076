"""Finding plug-ins: every module of a package, imported so that it registers itself.

The registries (trace backends, renderers, custom-call cost rules) each call `import_all` on
their package before they answer: a new plug-in is one new module there, and nothing else.
"""

from __future__ import annotations

import importlib
import pkgutil

# The (package, search path) pairs whose modules are imported: the registries ask on every
# lookup (a backend's platform for each op row, a custom call's rule for each op), and listing
# the package's folder took ~50 us a time. A folder added to the package's path (a plug-in
# folder) is a new pair, listed once.
_IMPORTED: set[tuple[str, tuple[str, ...]]] = set()


def import_all(package_name: str) -> None:
    """Import every module of the package, once for each search path it has."""
    package = importlib.import_module(package_name)
    key = (package_name, tuple(package.__path__))
    if key in _IMPORTED:
        return
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package_name}.{info.name}")
    _IMPORTED.add(key)
