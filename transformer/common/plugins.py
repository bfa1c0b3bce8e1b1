"""The user's modules that add classes to the package's registries, imported by name.

A run config's `plugins.modules` names them; `training.run_config` imports them before it
validates a config and whenever it loads a run's recorded `config.json`, so every command
that builds or restores the model (train, eval, decode, sweep, analyze, interop export)
knows the names a run was trained with. A module registers its classes when imported
(`@SCHEMES.register("name")` and the like: docs/extending.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from transformer.common.errors import UserError

FIX = "install it or put the directory that holds it on PYTHONPATH"


def import_plugins(modules: Sequence[str] | None, where: str) -> None:
    """Imports each module named in `modules`; `where` names the config that lists them
    ('runs/x/config.json') in the one-line error for a module that cannot be imported."""
    for name in _checked_names(modules, where):
        _import(name, where)


def _checked_names(modules, where: str) -> list[str]:
    names = list(modules or ())
    if not all(isinstance(n, str) and n.strip() for n in names):
        raise UserError(f"plugins.modules of {where} must be module names (strings), got {names!r}")
    return [n.strip() for n in names]


def _import(name: str, where: str) -> None:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as e:
        missing = e.name or name
        if name == missing or name.startswith(missing + "."):
            raise UserError(
                f"plugin module {name!r} (plugins.modules of {where}) not found; {FIX}"
            ) from None
        raise UserError(
            f"plugin module {name!r} (plugins.modules of {where}) imports {missing!r}, which "
            f"is not installed; install {missing!r}"
        ) from None
