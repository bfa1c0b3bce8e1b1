"""Where dropout's bits come from is chosen when the training model is built
(train.dropout_bits, model/dropout.py): the setting resolves per platform, travels in the
graphdef, leaves every dropout-free value untouched and changes only the masks."""

import jax
import numpy as np
import pytest

from tests.helpers import tiny_config
from transformer.common.errors import UserError
from transformer.model.dropout import BIT_SOURCES, PhiloxBits, ThreefryBits
from transformer.training import run_config, steps
from transformer.training.base_config import get_base_config
from transformer.training.optim import make_optimizer
from transformer.training.run_state import build_train_model, dropout_bits

BATCH_SHAPE = (4, 7)


@pytest.mark.parametrize(
    "setting,platform,expected",
    [
        ("auto", "cpu", ThreefryBits),
        ("auto", "gpu", PhiloxBits),
        ("auto", "tpu", ThreefryBits),
        ("philox", "cpu", PhiloxBits),
        ("threefry", "gpu", ThreefryBits),
    ],
)
def test_train_setting_resolves_per_platform(setting, platform, expected):
    assert type(dropout_bits(setting, platform)) is expected


def test_a_bad_setting_names_the_choices_from_the_registry():
    config = get_base_config()
    config.train.dropout_bits = "mersenne"
    choices = ", ".join(("auto", *BIT_SOURCES))
    with pytest.raises(UserError, match=f"train.dropout_bits must be one of {choices}"):
        run_config.validate(config)


def batch(seed=0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for side in ("src", "tgt"):
        out[side] = rng.integers(4, 60, BATCH_SHAPE, dtype=np.int32)
        out[f"{side}_segments"] = np.ones(BATCH_SHAPE, np.int32)
        out[f"{side}_positions"] = np.tile(np.arange(BATCH_SHAPE[1], dtype=np.int32), (4, 1))
    return out


def train_losses(source: str, dropout_rate: float, n_steps: int = 3) -> list[float]:
    """Per-step losses of the tiny model trained with train.dropout_bits=source."""
    config = tiny_config(
        train__dropout_bits=source, model__dropout_rate=dropout_rate, model__vocab_size=64
    )
    settings = run_config.validate(config)
    model = build_train_model(settings.model, config.train)
    assert model.dropout_bits == BIT_SOURCES[source]  # the choice is the model's own
    optimizer, schedule = make_optimizer(config.train)
    graphdef, state = steps.init_state(model, optimizer)
    step = jax.jit(steps.make_train_step(graphdef, optimizer, schedule, config.train))
    losses = []
    for i in range(n_steps):
        state, metrics = step(state, batch(i), jax.random.key(0))
        losses.append(float(metrics["loss"]))
    return losses


def test_without_dropout_the_bit_source_changes_nothing():
    """Dropout off: both sources train to the same losses, bit for bit (the source touches
    nothing but the masks)."""
    assert train_losses("philox", 0.0) == train_losses("threefry", 0.0)


def test_with_dropout_each_source_repeats_itself_and_they_differ():
    """Dropout on: a source gives the same losses when rerun from the same key (what a
    resumed run relies on), and the two sources draw different masks."""
    philox = train_losses("philox", 0.3)
    assert philox == train_losses("philox", 0.3)
    assert philox != train_losses("threefry", 0.3)


def test_a_run_saved_before_the_setting_keeps_threefry_bits(tmp_path):
    """config.json of a run trained before train.dropout_bits existed has no such field: it
    loads as 'threefry' (what it drew with), not 'auto' (Philox on a GPU); a saved setting
    loads as saved."""
    import json

    config = tiny_config(train__dropout_bits="philox")
    run_config.save(config, str(tmp_path))
    assert run_config.load(str(tmp_path)).train.dropout_bits == "philox"
    path = tmp_path / run_config.CONFIG_FILE
    values = json.loads(path.read_text())
    del values["train"]["dropout_bits"]
    path.write_text(json.dumps(values))
    assert run_config.load(str(tmp_path)).train.dropout_bits == "threefry"
