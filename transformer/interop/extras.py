"""The optional packages interop needs, imported on first use: the core install has no
PyTorch or Hugging Face transformers, and a missing one is a one-line error naming the
extra that installs it."""

from __future__ import annotations

import importlib

from transformer.common.errors import UserError

# Module -> the pyproject extra that installs it.
EXTRAS = {
    "torch": "bench",
    "transformers": "bench",
    "safetensors": "bench",
    "ctranslate2": "bench",
}


def optional_import(name: str):
    """The module `name`, or a UserError telling which extra to install."""
    try:
        return importlib.import_module(name)
    except ImportError:
        extra = EXTRAS[name.split(".")[0]]
        raise UserError(
            f"{name} is not installed and interop needs it here; install it with "
            f"pip install -e '.[{extra}]' (or pip install '.[{extra}]')"
        ) from None
