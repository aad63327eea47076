"""Finding plug-ins: every module of a package, imported so that it registers itself.

The registries (trace backends, renderers, custom-call cost rules) each call `import_all` on
their package before they answer: a new plug-in is one new module there, and nothing else.
"""

from __future__ import annotations

import importlib
import pkgutil


def import_all(package_name: str) -> None:
    """Import every module of the package (imports are cached: cheap after the first call)."""
    package = importlib.import_module(package_name)
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package_name}.{info.name}")
