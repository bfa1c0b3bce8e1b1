"""A sweep config and what it means: `grid` builds variants as a cross product, `load_sweep`
reads and checks a sweep config file into a `Sweep` (override keys resolved to their full
'section.field' names against the base run config, found on disk by `find_base`)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from collections.abc import Iterable, Mapping

from transformer.common.errors import UserError
from transformer.common.fileio import atomic_write
from transformer.research.sweep.lr_grid import LrGrid, check_lr_grid
from transformer.training import run_config

KNOWN_FIELDS = {
    "base",
    "overrides",
    "variants",
    "seeds",
    "eval_split",
    "eval_overrides",
    "parallel",
    "name",
    "description",
    "eval_longer_than",
    "baseline",
    "matched",
    "lr_grid",
    "eval_score_references",
    "aa_arm",
}
AA_SEED_OFFSET = 1000  # the A/A arm's seeds: the sweep's own plus this, disjoint from them
SWEEP_FILE = "sweep.json"  # the Sweep a study's tables were written for, in its directory


def grid(*dicts: Mapping[str, Iterable], **axes: Iterable) -> dict[str, dict]:
    """Cross product of override values, as named variants.

    grid(norm_position=['pre', 'post'], activation=['relu', 'gelu']) ->
        {'norm_position=pre,activation=relu': {'norm_position': 'pre', 'activation': 'relu'},
         ...}  (4 variants). Dotted keys go in a positional dict: grid({'train.warmup_steps':
    [0, 200]}); the name then uses the field after the last dot.
    """
    merged: dict[str, list] = {}
    for d in dicts:
        merged.update({k: list(v) for k, v in d.items()})
    merged.update({k: list(v) for k, v in axes.items()})
    if not merged:
        raise ValueError("grid() needs at least one axis")
    keys = list(merged)
    variants = {}
    for values in itertools.product(*(merged[k] for k in keys)):
        chosen = dict(zip(keys, values, strict=True))
        name = ",".join(f"{k.rsplit('.', 1)[-1]}={short_value(v)}" for k, v in chosen.items())
        variants[name] = chosen
    return variants


def short_value(value) -> str:
    """A value as variant names and result tables show it: floats in %g form."""
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclasses.dataclass
class Sweep:
    path: str
    base: str
    overrides: dict[str, object]
    variants: dict[str, dict[str, object]]  # full 'section.field' keys
    seeds: list[int]
    eval_split: str
    eval_overrides: dict[str, object]
    parallel: int
    eval_longer_than: int | str | None = None
    base_file: str = ""  # `base` as found on disk (find_base)
    baseline: str = ""  # the variant every other one is tested against (default: the first)
    lr_grid: LrGrid = dataclasses.field(default_factory=lambda: LrGrid(scales={}))  # lr_grid.py
    eval_score_references: bool = False  # eval.py --score_references: test perplexity
    references: str | None = None  # transformer-sweep --references: where runs keep none
    aa_variant: str | None = None  # the baseline again under disjoint seeds (aa_arm)
    variant_seeds: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    def seeds_of(self, name: str) -> list[int]:
        """The variant's seeds: the sweep's, or the A/A arm's own disjoint ones."""
        return self.variant_seeds.get(name, self.seeds)


def _plain(value):
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return value


def _flatten(overrides: Mapping, prefix: str = "") -> dict[str, object]:
    """{'model': {'x': 1}} and {'model.x': 1} -> {'model.x': 1}."""
    out = {}
    for key, value in _plain(overrides).items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping) or hasattr(value, "to_dict"):
            out.update(_flatten(value, full + "."))
        else:
            out[full] = value
    return out


def load_base_config(path: str):
    """The ConfigDict of a run config file (what train.py --config PATH loads)."""
    return run_config.load_config_file(path)


def _resolve_keys(overrides: Mapping, base, where: str) -> dict[str, object]:
    """Bare field names -> 'section.field' (unique section); unknown keys are errors."""
    out = {}
    for key, value in _flatten(overrides).items():
        if "." in key:
            section, _, field = key.partition(".")
            if section not in base or field not in base[section]:
                raise UserError(
                    f"{where}: unknown config key {key!r}; see transformer/training/base_config.py"
                )
            out[key] = value
            continue
        owners = [s for s in base if key in base[s]]
        if len(owners) != 1:
            what = "unknown" if not owners else f"ambiguous ({', '.join(owners)})"
            raise UserError(f"{where}: config key {key!r} is {what}; write it as 'section.{key}'")
        out[f"{owners[0]}.{key}"] = value
    return out


def find_base(base: str, sweep_path: str) -> str:
    """A relative base path is looked up in the working directory, then beside the sweep
    config and in each directory above it (configs/sweeps/x.py names 'configs/default.py')."""
    if os.path.isabs(base) or os.path.exists(base):
        return base
    directory = os.path.dirname(os.path.abspath(sweep_path))
    while True:
        candidate = os.path.join(directory, base)
        if os.path.exists(candidate):
            return candidate
        parent = os.path.dirname(directory)
        if parent == directory:
            return base  # not found: load_base_config names it
        directory = parent


def _read_sweep_fields(path: str) -> Mapping:
    """The mapping that the sweep config's get_config() returns, its field names checked."""
    raw = _plain(run_config.load_config_module(path, "sweep config").get_config())
    if not isinstance(raw, Mapping):
        raise UserError(f"{path}: get_config() must return a dict or ConfigDict")
    unknown = sorted(set(raw) - KNOWN_FIELDS)
    if unknown:
        raise UserError(f"{path}: unknown sweep field(s) {unknown}; valid: {sorted(KNOWN_FIELDS)}")
    if "base" not in raw or "variants" not in raw:
        raise UserError(f"{path}: a sweep config needs 'base' and 'variants'")
    return raw


def _resolve_variants(raw_variants, base, path: str) -> dict[str, dict[str, object]]:
    variants = {}
    for name, ov in _plain(raw_variants).items():
        if not name or "/" in name or name.startswith("."):
            raise UserError(f"{path}: variant name {name!r} must be a plain directory name")
        variants[name] = _resolve_keys(ov or {}, base, f"variant {name!r}")
    if not variants:
        raise UserError(f"{path}: no variants")
    return variants


def _check_seeds(raw: Mapping, path: str) -> list[int]:
    seeds = [int(s) for s in raw.get("seeds", [0])]
    if not seeds or len(set(seeds)) != len(seeds):
        raise UserError(f"{path}: seeds must be a non-empty list of distinct ints, got {seeds}")
    return seeds


def _check_eval_overrides(raw: Mapping, base, path: str) -> dict[str, object]:
    eval_overrides = _resolve_keys(raw.get("eval_overrides", {}) or {}, base, "eval_overrides")
    if any(not k.startswith("decode.") for k in eval_overrides):
        raise UserError(f"{path}: eval_overrides may only set decode.* keys")
    return eval_overrides


def _check_parallel(raw: Mapping, path: str) -> int:
    parallel = int(raw.get("parallel", 1))
    if parallel < 1:
        raise UserError(f"{path}: parallel must be >= 1, got {parallel}")
    return parallel


def _check_longer_than(raw: Mapping, path: str) -> int | str | None:
    longer_than = raw.get("eval_longer_than")
    if longer_than is not None and longer_than != "train":
        if not isinstance(longer_than, int) or isinstance(longer_than, bool) or longer_than < 0:
            raise UserError(
                f"{path}: eval_longer_than must be a token count or 'train', got {longer_than!r}"
            )
    return longer_than


def _check_baseline(raw: Mapping, variants: Mapping, path: str) -> str:
    baseline = str(raw.get("baseline", next(iter(variants))))
    if baseline not in variants:
        raise UserError(f"{path}: baseline {baseline!r} is not a variant; valid: {list(variants)}")
    return baseline


def _check_flag(raw: Mapping, field: str, path: str) -> bool:
    value = raw.get(field, False)
    if not isinstance(value, bool):
        raise UserError(f"{path}: {field} must be True or False, got {value!r}")
    return value


def set_overrides(config, overrides: Mapping[str, object]):
    """Sets each 'section.field' of `overrides` on the ConfigDict `config`; returns it."""
    for key, value in overrides.items():
        section, _, field = key.partition(".")
        config[section][field] = value
    return config


def _with_matched(raw: Mapping, variants: dict, base, overrides: dict, baseline: str) -> dict:
    """The variants with the compute-matched arms (research/sweep/matching.py) each placed
    right after the variant it resizes."""
    from transformer.research.sweep.matching import matched_variants

    if not raw.get("matched"):
        return variants

    def config_of(variant_overrides):
        return set_overrides(base.copy_and_resolve_references(), {**overrides, **variant_overrides})

    matched = matched_variants(raw["matched"], variants, config_of, baseline)
    out = {}
    for name, ov in variants.items():
        out[name] = ov
        out.update({m: matched[m] for m, spec in raw["matched"].items() if spec["variant"] == name})
    return out


def aa_variant_name(baseline: str) -> str:
    return f"{baseline}_aa"


def _with_aa_arm(raw: Mapping, variants: dict, baseline: str, seeds: list[int], path: str):
    """(variants, {A/A arm: its seeds}): with aa_arm True, the baseline's overrides again as
    an arm right after the baseline, under seeds disjoint from the sweep's, so that its
    comparison with the baseline measures the table's own false-positive rate."""
    if not _check_flag(raw, "aa_arm", path):
        return variants, {}
    name = aa_variant_name(baseline)
    if name in variants:
        raise UserError(f"{path}: variant {name!r} clashes with the A/A arm's name; rename it")
    out = {}
    for key, overrides in variants.items():
        out[key] = overrides
        if key == baseline:
            out[name] = dict(overrides)
    return out, {name: [s + AA_SEED_OFFSET for s in seeds]}


def _check_disjoint_seeds(seeds: list[int], variant_seeds: dict, path: str) -> None:
    for name, own in variant_seeds.items():
        shared = sorted(set(own) & set(seeds))
        if shared:
            raise UserError(
                f"{path}: seeds {shared} are both the sweep's and the A/A arm {name!r}'s "
                f"(the sweep's seeds + {AA_SEED_OFFSET}); use seeds below {AA_SEED_OFFSET}"
            )


def _grid_with_aa(
    raw: Mapping, variants: dict, path: str, seeds: dict, baseline: str, aa_name: str | None
) -> LrGrid:
    """The lr_grid, the A/A arm tuned wherever the baseline is: it repeats the baseline's
    whole procedure, its learning-rate search included, on tuning seeds shifted as its
    compared seeds are. `seeds`: {variant: its compared seeds}."""
    spec = raw.get("lr_grid")
    listed = spec.get("variants") if isinstance(spec, Mapping) else None
    if listed and aa_name and baseline in listed and aa_name not in listed:
        raw = {**raw, "lr_grid": {**spec, "variants": [*listed, aa_name]}}
    offsets = {aa_name: AA_SEED_OFFSET} if aa_name else {}
    return check_lr_grid(raw, variants, path, seeds, offsets)


def load_sweep(path: str) -> Sweep:
    """The sweep config file at `path`, checked against its base run config."""
    raw = _read_sweep_fields(path)
    base_path = find_base(raw["base"], path)
    base = load_base_config(base_path)
    variants = _resolve_variants(raw["variants"], base, path)
    seeds = _check_seeds(raw, path)
    eval_overrides = _check_eval_overrides(raw, base, path)
    parallel = _check_parallel(raw, path)
    longer_than = _check_longer_than(raw, path)
    overrides = _resolve_keys(raw.get("overrides", {}) or {}, base, "overrides")
    baseline = _check_baseline(raw, variants, path)
    variants = _with_matched(raw, variants, base, overrides, baseline)
    variants, variant_seeds = _with_aa_arm(raw, variants, baseline, seeds, path)
    _check_disjoint_seeds(seeds, variant_seeds, path)
    compared = {name: variant_seeds.get(name, seeds) for name in variants}
    aa_name = next(iter(variant_seeds), None)
    return Sweep(
        path=path,
        base=raw["base"],
        overrides=overrides,
        variants=variants,
        seeds=seeds,
        eval_split=str(raw.get("eval_split", "test")),
        eval_overrides=eval_overrides,
        parallel=parallel,
        eval_longer_than=longer_than,
        base_file=base_path,
        baseline=baseline,
        lr_grid=_grid_with_aa(raw, variants, path, compared, baseline, aa_name),
        eval_score_references=_check_flag(raw, "eval_score_references", path),
        aa_variant=aa_name,
        variant_seeds=variant_seeds,
    )


def save_sweep(sweep: Sweep, workdir: str) -> None:
    """DIR/sweep.json: the Sweep as loaded, so that the study's files can be read again (its
    HTML page) without the config file, which may have changed since."""
    fields = dataclasses.asdict(sweep)
    if sweep.references:
        fields["references"] = os.path.abspath(sweep.references)
    text = json.dumps(fields, indent=2, sort_keys=True, default=str) + "\n"
    atomic_write(os.path.join(workdir, SWEEP_FILE), text)


def read_saved_sweep(workdir: str) -> Sweep | None:
    """The Sweep of DIR/sweep.json (None where the file is absent)."""
    path = os.path.join(workdir, SWEEP_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            fields = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}; rerun transformer-sweep --report_only") from None
    try:
        fields["lr_grid"] = LrGrid(**fields["lr_grid"])
        return Sweep(**fields)
    except (KeyError, TypeError) as e:
        raise UserError(
            f"{path} is not a sweep description ({e}); rerun transformer-sweep --report_only"
        ) from None
