"""One source of truth for defaults: the base config's (transformer/training/base_config.py)
`model` and `decode` sections hold exactly the fields of ModelConfig and DecodeSettings, with
the same default values, and the config sections are the ones run_config and the sweep
accept."""

import dataclasses

import pytest

from transformer import DecodeSettings, ModelConfig
from transformer.training.base_config import get_base_config


@pytest.mark.parametrize("section,cls", [("model", ModelConfig), ("decode", DecodeSettings)])
def test_base_section_matches_the_dataclass_field_by_field(section, cls):
    base = get_base_config()[section]
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    assert sorted(base.keys()) == sorted(fields), (section, cls.__name__)
    differ = {k: (base[k], v) for k, v in fields.items() if base[k] != v}
    assert not differ, f"base config {section} vs {cls.__name__} defaults: {differ}"


def test_dataclass_defaults_build_and_validate():
    # A default-constructed DecodeSettings and the base decode section are one thing.
    assert DecodeSettings.from_config(get_base_config().decode) == DecodeSettings()
    assert ModelConfig.from_dict(get_base_config().model) == ModelConfig()


def test_validate_returns_the_model_and_decode_settings_it_built():
    from tests.helpers import tiny_config
    from transformer.training import run_config

    config = tiny_config()
    config.decode.beam_size = 3
    settings = run_config.validate(config)
    assert settings.model == ModelConfig.from_dict(config.model)
    assert settings.decode == DecodeSettings.from_config(config.decode)
    assert settings.decode.beam_size == 3


def test_unknown_section_is_named_with_the_valid_ones():
    from transformer.common.errors import UserError
    from transformer.training import run_config

    config = get_base_config()
    config.extra = {"x": 1}
    expected = "unknown config section 'extra'; valid: data, decode, model, plugins, train"
    with pytest.raises(UserError, match=expected):
        run_config.validate(config)
