"""Sweep configs for `python -m transformer.sweep` (see transformer/sweep.py)."""
