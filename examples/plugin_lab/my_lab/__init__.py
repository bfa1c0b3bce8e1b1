"""my_lab: a lab's own model pieces, kept in its own package outside `transformer`.

Importing it registers them with the transformer package's registries, which is all a run
config's `plugins.modules = ("my_lab",)` asks for: a positional scheme (positions), an
activation (activations) and a sampling filter (filters).
"""

from my_lab import activations, filters, positions

__all__ = ["activations", "filters", "positions"]
