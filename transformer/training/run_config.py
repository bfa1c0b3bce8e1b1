"""Run configs: validation against the base config, and the copy saved in each workdir."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from typing import TYPE_CHECKING

import ml_collections

from transformer.common.errors import UserError
from transformer.common.fileio import atomic_write
from transformer.common.plugins import import_plugins
from transformer.model.config import ModelConfig
from transformer.model.dropout import BIT_SOURCES
from transformer.training import early_stopping
from transformer.training.base_config import get_base_config
from transformer.training.optim import check_schedule
from transformer.training.parallel import check_parallelism

if TYPE_CHECKING:  # the translator module loads JAX, which config checks do not need
    from transformer.inference.translator import DecodeSettings

CONFIG_FILE = "config.json"


def _base():
    return get_base_config()


def load_config_module(path: str | os.PathLike, what: str = "config"):
    """The Python module of a config file, loaded by path (the config files live outside the
    package, so they are not imported by name); it must define get_config()."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise UserError(f"{what} {path} not found")
    name = "_config_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
        raise UserError(f"{path} has no get_config()")
    return module


def load_config_file(path: str | os.PathLike) -> ml_collections.ConfigDict:
    """The ConfigDict of a run config file: what train.py --config PATH loads."""
    return load_config_module(path).get_config()


REMAT_MODES = ("none", "block")
HAND_WRITTEN_VJPS = ("auto", "on", "off")


def _check_attention_backend(model_cfg: ModelConfig) -> None:
    import jax

    if model_cfg.attention_impl == "cudnn" and jax.default_backend() != "gpu":
        raise UserError(
            f"model.attention_impl='cudnn' needs an NVIDIA GPU, and JAX runs on "
            f"{jax.default_backend()}; use model.attention_impl='xla' (same results) or 'einsum'"
        )


@dataclasses.dataclass(frozen=True)
class Validated:
    """The typed settings `validate` builds from a run config's sections."""

    model: ModelConfig  # vocab_size None while it follows the tokenizer: `resolve_vocab_size`
    decode: DecodeSettings


def validate(config: ml_collections.ConfigDict) -> Validated:
    """Rejects unknown sections/keys and invalid values with one-line errors; returns the
    model and decode settings it built on the way, so nothing builds them twice. Runs before
    any work starts; imports the config's plugins first, since they define names it checks."""
    _check_sections_and_keys(config)
    import_plugins(config.plugins.modules, "the config")
    try:
        model_cfg = ModelConfig.from_dict(config.model)
    except (ValueError, TypeError) as e:
        raise UserError(f"config.model: {e}") from None
    _check_attention_backend(model_cfg)
    _check_train_section(config.train)
    if config.model.share_embeddings and not config.data.shared_vocab:
        raise UserError(
            "model.share_embeddings=True needs data.shared_vocab=True (one vocabulary); "
            "set one of them differently"
        )
    from transformer.data import check_subword_sampling, check_vocab_config, make_layout
    from transformer.inference.translator import DecodeSettings

    check_vocab_config(config.data)
    check_subword_sampling(config.data)
    make_layout(config)  # batching and length limits
    return Validated(model_cfg, DecodeSettings.from_config(config.decode))


def _check_sections_and_keys(config: ml_collections.ConfigDict) -> None:
    """The sections and keys are the base config's (transformer.get_base_config)."""
    base = _base()
    for section in config:
        if section not in base:
            raise UserError(f"unknown config section {section!r}; valid: {', '.join(base)}")
    for section in base:
        if section not in config:
            raise UserError(
                f"config has no {section!r} section; start from transformer.get_base_config()"
            )
        unknown = sorted(set(config[section]) - set(base[section]))
        if unknown:
            raise UserError(
                f"unknown config key(s) {', '.join(f'{section}.{k}' for k in unknown)}; "
                f"valid keys: {', '.join(sorted(base[section]))}"
            )


POSITIVE_TRAIN_INTS = (
    "num_steps",
    "log_every",
    "eval_every",
    "checkpoint_every",
    "keep_checkpoints",
    "grad_accum_steps",
    "batch_size",
)


def _check_train_section(t: ml_collections.ConfigDict) -> None:
    check_schedule(t.schedule)
    check_parallelism(t.parallelism, t.fsdp)
    _check_choice("train.remat", t.remat, REMAT_MODES)
    _check_choice("train.hand_written_vjps", t.hand_written_vjps, HAND_WRITTEN_VJPS)
    _check_choice("train.dropout_bits", t.dropout_bits, ("auto", *BIT_SOURCES))
    for name in POSITIVE_TRAIN_INTS:
        if not isinstance(t[name], int) or t[name] < 1:
            raise UserError(f"train.{name} must be a positive integer, got {t[name]!r}")
    if t.batch_size % t.grad_accum_steps:
        raise UserError(
            f"train.batch_size={t.batch_size} must be divisible by "
            f"train.grad_accum_steps={t.grad_accum_steps}"
        )
    if not 0 <= t.label_smoothing < 1:
        raise UserError(f"train.label_smoothing must be in [0, 1), got {t.label_smoothing}")
    if not 0 <= t.scheduled_sampling_rate <= 1:
        raise UserError(
            f"train.scheduled_sampling_rate must be in [0, 1], got {t.scheduled_sampling_rate}"
        )
    if t.learning_rate <= 0:
        raise UserError(f"train.learning_rate must be > 0, got {t.learning_rate}")
    early_stopping.check_config(t)


def _check_choice(name: str, value, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise UserError(f"{name} must be one of {', '.join(valid)}, got {value!r}")


def resolve_vocab_size(config: ml_collections.ConfigDict, src_tok, tgt_tok) -> int:
    """The one vocabulary-size rule: the model's embedding rows (`model.vocab_size`) are the
    tokenizers' piece count unless set, and a set value must cover every piece.
    `data.vocab_size` only asks SentencePiece for a size, which a small corpus may not reach.
    Sets config.model.vocab_size and returns it."""
    pieces = max(src_tok.vocab_size, tgt_tok.vocab_size)
    rows = config.model.vocab_size
    if rows is None:
        rows = config.model.vocab_size = pieces
    elif rows < pieces:
        raise UserError(
            f"the vocabulary has {pieces} pieces but model.vocab_size={rows}; leave "
            f"model.vocab_size unset to follow the tokenizer, or set it to at least {pieces}"
        )
    return rows


def save(config: ml_collections.ConfigDict, workdir: str) -> None:
    atomic_write(os.path.join(workdir, CONFIG_FILE), config.to_json(indent=2, sort_keys=True))


def load(workdir: str) -> ml_collections.ConfigDict:
    path = os.path.join(workdir, CONFIG_FILE)
    if not os.path.exists(path):
        raise UserError(
            f"{path} not found: {workdir} is not a training workdir; train first with "
            f"python train.py --config CONFIG --workdir {workdir}"
        )
    return load_file(path)


def load_file(path: str) -> ml_collections.ConfigDict:
    """A config saved as JSON by `save` (a run's config.json, or a copy of it), fields
    added since filled as the run that saved it trained, its plugins imported."""
    with open(path) as f:
        values = json.load(f)
    config = _base()
    for section, fields in values.items():
        for key, value in fields.items():
            if section in config and key in config[section]:
                setattr(config[section], key, value)
    if "vocab_size" not in values.get("data", {}):
        # A run saved before data.vocab_size existed asked SentencePiece for model.vocab_size.
        config.data.vocab_size = config.model.vocab_size
    if "dropout_bits" not in values.get("train", {}):
        # A run saved before train.dropout_bits existed drew its masks with threefry: a
        # resume on a GPU (where 'auto' means Philox) keeps drawing them so.
        config.train.dropout_bits = "threefry"
    import_plugins(config.plugins.modules, path)
    return config


def check_same_model(config, workdir: str) -> None:
    """On resume, the model section must match the one the checkpoints were trained with."""
    if not os.path.exists(os.path.join(workdir, CONFIG_FILE)):
        return
    saved = load(workdir).model
    # An unset model.vocab_size is resolved from the tokenizer later and compared then.
    diffs = [
        f"{k}: {saved[k]!r} -> {config.model[k]!r}"
        for k in config.model
        if saved.get(k) != config.model[k] and not (k == "vocab_size" and config.model[k] is None)
    ]
    if diffs:
        raise UserError(
            f"the model config differs from the one {workdir} was trained with "
            f"({'; '.join(diffs)}); use a new --workdir or the original model settings"
        )


def apply_overrides(config, overrides: list[str]) -> None:
    """`section.key=value` strings (eval.py/decode.py `--config.decode.x=...`)."""
    for item in overrides:
        key, _, value = item.partition("=")
        section, _, field = key.partition(".")
        if section not in config or field not in config[section]:
            raise UserError(f"unknown config key {key!r}; valid sections: {', '.join(config)}")
        # A placeholder field (None until set, e.g. model.vocab_size) keeps its declared type.
        kind = config[section].get_ref(field).get_type()
        config[section][field] = _parse_as(value, kind, key)


def _parse_as(value: str, kind: type, key: str):
    if value.lower() in ("none", "null") and kind is not str:
        return None
    try:
        if kind is bool:
            if value.lower() in ("true", "1", "yes"):
                return True
            if value.lower() in ("false", "0", "no"):
                return False
            raise ValueError
        if kind in (int, float):
            return kind(value)
    except ValueError:
        raise UserError(f"--config.{key}={value!r}: expected type {kind.__name__}") from None
    return value
