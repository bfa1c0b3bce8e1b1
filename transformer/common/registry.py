"""`Registry`: the names of one kind of variation point and the classes they build.

Each kind the config chooses by name (positional schemes, activations, normalisations and
their placement, sampling filters) has one registry beside its base class. A class joins it
with the registry's `register("name")` decorator, in the package or in a user's module that
the run's `plugins.modules` imports (common/plugins.py); the config's allowed values are
the registered names, so an unknown name is an error that lists them.
"""

from __future__ import annotations

from collections.abc import Iterator

# Appended to an unknown name's error: where a name from the user's own module comes from.
PLUGIN_HINT = "a name from your own module needs that module in config.plugins.modules"


class Registry:
    """Names -> classes of one kind; `what` names the kind in errors ('position')."""

    def __init__(self, what: str):
        self.what = what
        self._classes: dict[str, type] = {}

    def register(self, name: str):
        """Class decorator: makes the class available under `name` and sets its `name`."""

        def add(cls: type) -> type:
            if self._classes.get(name, cls) is not cls:
                raise ValueError(f"{self.what} {name!r} is already registered")
            cls.name = name
            self._classes[name] = cls
            return cls

        return add

    def names(self) -> tuple[str, ...]:
        """The registered names, the package's own first (they register on import)."""
        return tuple(self._classes)

    def check(self, name: str) -> None:
        """Raises ValueError, listing the registered names, when `name` is not one of them."""
        if name not in self._classes:
            valid = ", ".join(repr(n) for n in self._classes)
            raise ValueError(f"unknown {self.what} {name!r}; valid: {valid} ({PLUGIN_HINT})")

    def __getitem__(self, name: str) -> type:
        self.check(name)
        return self._classes[name]

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)
