"""Patch a module of the program once it has been imported: at once where it already is, else by an import hook that
runs the patch right after the module's own code, before anything else can use it (nsightflow.capture.inside.
hook_tuning: inductor's autotuners; nsightflow.capture.inside.hook_steps: a program's step functions)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class _Finder(importlib.abc.MetaPathFinder):
    """Runs each named module's patch once the module has been executed at its import."""

    def __init__(self, patches: dict[str, Callable[[ModuleType], None]]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        patch = self.patches.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def patch_on_import(patches: dict[str, Callable[[ModuleType], None]]) -> None:
    """Run ``patches[name](module)`` on each named module: now where it is imported, else when it is."""
    for name, patch in patches.items():
        module = sys.modules.get(name)
        if module is not None:
            patch(module)
    later = {name: patch for name, patch in patches.items() if name not in sys.modules}
    if later:
        sys.meta_path.insert(0, _Finder(later))
