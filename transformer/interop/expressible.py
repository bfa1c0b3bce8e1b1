"""What an export target can express of a ModelConfig: each target's table of the values
it handles per field, checked by one function so that every target refuses alike."""

from __future__ import annotations

from transformer.common.errors import UserError

# (field, the values a target handles); a target's table lists the fields it constrains.
FieldValues = tuple[tuple[str, tuple], ...]


def check_expressible(model_cfg, handled: FieldValues, target: str, needer: str) -> None:
    """Raises UserError naming the first field of model_cfg whose value `target` has no
    equivalent for ("... has no {target} equivalent; {needer} needs model.F=..."). Attention
    must be full multi-head (num_kv_heads None or num_heads) for every target."""
    full_heads = ("num_kv_heads", (None, model_cfg.num_heads))
    for field, values in (*handled, full_heads):
        value = getattr(model_cfg, field)
        if value not in values:
            needs = " or ".join(repr(v) for v in values)
            raise UserError(
                f"model.{field}={value!r} has no {target} equivalent; {needer} needs "
                f"model.{field}={needs}"
            )
