"""Compute-matched arms: a variant resized so that its parameter count or forward FLOPs per
target token equal the baseline's (within 1%), by solving for one named integer field.

A sweep config's `matched` field maps new variant names to
``{'variant': NAME, 'match': 'params' | 'flops', 'solve': 'model.d_ff'}``: the new variant has
NAME's overrides plus the solved field. SwiGLU's three FFN matrices, for example, come out at
about 2/3 of the baseline's d_ff. Parameters are counted on the model built abstractly
(`model.transformer.param_shapes`), FLOPs by the analytic `model.flops.forward_flops` at
(data.max_source_len, data.max_target_len); both use data.vocab_size where model.vocab_size
follows the tokenizer, the same size for every variant of a sweep.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from transformer.common.errors import UserError
from transformer.training import run_config

MEASURES = ("params", "flops")
TOLERANCE = 0.01


def model_size(config, measure: str) -> float:
    """Parameters, or forward FLOPs per target token, of the run config's model."""
    import jax

    from transformer.model.flops import forward_flops
    from transformer.model.transformer import param_shapes

    cfg = run_config.validate(config).model
    if cfg.vocab_size is None:
        cfg = dataclasses.replace(cfg, vocab_size=int(config.data.vocab_size))
    if measure == "params":
        return float(sum(x.size for x in jax.tree.leaves(param_shapes(cfg))))
    src, tgt = int(config.data.max_source_len), int(config.data.max_target_len)
    return forward_flops(cfg, 1, src, tgt) / tgt


def solve(size_at: Callable[[int], float], target: float, start: int, what: str) -> int:
    """The integer value v >= 1 whose size_at(v) is closest to target, for a size that grows
    with v; a UserError if the closest misses target by more than TOLERANCE."""
    low, high = 1, max(2, 2 * start)
    while size_at(high) < target:
        high *= 2
        if high > 1 << 24:
            raise UserError(f"{what}: no value reaches the baseline's size {target:,.0f}")
    while high - low > 1:  # size_at(low) < target <= size_at(high), or low is 1
        mid = (low + high) // 2
        low, high = (mid, high) if size_at(mid) < target else (low, mid)
    best = min((low, high), key=lambda v: abs(size_at(v) - target))
    if abs(size_at(best) - target) > TOLERANCE * target:
        raise UserError(
            f"{what}: the closest value {best} gives {size_at(best):,.0f}, more than "
            f"{TOLERANCE:.0%} from the baseline's {target:,.0f}; solve for a finer field"
        )
    return best


def matched_variants(raw: Mapping, variants: dict, config_of: Callable, baseline: str) -> dict:
    """{new name: overrides} for the sweep config's `matched` field (see the module doc).

    config_of(overrides) is the run config of a variant with those overrides."""
    out = {}
    for name, spec in dict(raw or {}).items():
        source, measure, field = _check_spec(name, spec, variants)
        target = model_size(config_of(variants[baseline]), measure)
        section, _, key = field.partition(".")
        start = int(config_of(variants[source])[section][key])

        def size_at(value, source=source, field=field, measure=measure):
            return model_size(config_of({**variants[source], field: value}), measure)

        value = solve(size_at, target, start, f"matched variant {name!r} ({field})")
        out[name] = {**variants[source], field: value}
    return out


def _check_spec(name: str, spec, variants: Mapping) -> tuple[str, str, str]:
    if name in variants:
        raise UserError(f"matched variant {name!r} has the name of a variant")
    if not isinstance(spec, Mapping) or set(spec) != {"variant", "match", "solve"}:
        raise UserError(
            f"matched variant {name!r}: give {{'variant': NAME, 'match': 'params' or 'flops', "
            f"'solve': 'section.field'}}"
        )
    if spec["variant"] not in variants:
        raise UserError(f"matched variant {name!r}: no variant {spec['variant']!r}")
    if spec["match"] not in MEASURES:
        raise UserError(f"matched variant {name!r}: match must be one of {MEASURES}")
    if "." not in str(spec["solve"]):
        raise UserError(f"matched variant {name!r}: solve must be 'section.field'")
    return spec["variant"], spec["match"], str(spec["solve"])
