"""Plugins: a user's module named in `plugins.modules` adds positional schemes, activations,
normalisations and sampling filters to the registries, and every command that reads the
run's config imports it.

The worked example (examples/plugin_lab: a KERPLE-log scheme, squared ReLU, min-p sampling)
is run as a user runs it: commands in subprocesses that find `my_lab` only through
PYTHONPATH. The in-process tests register uniquely named classes from modules written to
tmp_path.
"""

import csv
import json
import os
import textwrap
import uuid

import pytest

from tests.helpers import ROOT, run, tiny_config, tiny_model_config
from tests.test_sweep import TINY
from transformer.common.errors import UserError
from transformer.common.plugins import import_plugins
from transformer.common.registry import PLUGIN_HINT
from transformer.inference.filters import FILTERS, MinLength, Temperature, TopK, TopP
from transformer.inference.filters import filters_from_settings as chain_of
from transformer.inference.translator import DecodeSettings
from transformer.model.activations import ACTIVATIONS
from transformer.model.normalization import NORMS, PLACEMENTS
from transformer.model.position_schemes import SCHEMES
from transformer.training import run_config

EXAMPLE = os.path.join(ROOT, "examples", "plugin_lab")


def _plugin_module(tmp_path, monkeypatch, body: str) -> str:
    """A uniquely named module holding `body`, importable from tmp_path; its name."""
    name = f"lab_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_validation_imports_the_configs_plugins_before_it_checks_names(tmp_path, monkeypatch):
    scheme = f"scheme_{uuid.uuid4().hex[:8]}"
    module = _plugin_module(
        tmp_path,
        monkeypatch,
        f"""
        from transformer.model.position_schemes import SCHEMES, PositionScheme

        @SCHEMES.register("{scheme}")
        class Nothing(PositionScheme):
            pass
        """,
    )
    config = tiny_config(model__position=scheme)
    with pytest.raises(UserError, match=f"unknown position '{scheme}'; valid: 'sinusoidal'"):
        run_config.validate(config)  # the module is not named: its scheme is unknown
    config.plugins.modules = (module,)
    assert run_config.validate(config).model.position == scheme
    assert SCHEMES[scheme].__module__ == module


def test_a_restored_run_imports_the_plugins_its_config_records(tmp_path, monkeypatch):
    name = f"act_{uuid.uuid4().hex[:8]}"
    module = _plugin_module(
        tmp_path,
        monkeypatch,
        f"""
        from transformer.model.activations import ACTIVATIONS, Activation

        @ACTIVATIONS.register("{name}")
        class Identity(Activation):
            def __call__(self, x):
                return x
        """,
    )
    config = tiny_config(model__activation="relu")
    config.plugins.modules = (module,)
    run_config.save(config, str(tmp_path))
    assert name not in ACTIVATIONS
    assert tuple(run_config.load(str(tmp_path)).plugins.modules) == (module,)
    assert name in ACTIVATIONS  # loading config.json imported the module


def test_a_missing_plugin_is_one_line_naming_the_module_the_run_and_the_fix(tmp_path):
    config = tiny_config()
    config.plugins.modules = ("no_such_lab.positions",)
    run_config.save(config, str(tmp_path))
    with pytest.raises(UserError) as e:
        run_config.load(str(tmp_path))
    message = str(e.value)
    assert "\n" not in message
    assert "plugin module 'no_such_lab.positions'" in message
    assert os.path.join(str(tmp_path), "config.json") in message
    assert "PYTHONPATH" in message


def test_a_plugin_whose_own_import_fails_names_what_it_lacks(tmp_path, monkeypatch):
    module = _plugin_module(tmp_path, monkeypatch, "import not_installed_dependency\n")
    with pytest.raises(UserError, match=f"'{module}'.*imports 'not_installed_dependency'"):
        import_plugins([module], "runs/x/config.json")
    with pytest.raises(UserError, match="must be module names"):
        import_plugins(["", 3], "runs/x/config.json")


@pytest.mark.parametrize(
    "registry,field",
    [
        (ACTIVATIONS, "activation"),
        (NORMS, "norm_type"),
        (PLACEMENTS, "norm_position"),
        (SCHEMES, "position"),
    ],
)
def test_a_models_allowed_values_are_its_registries_names(registry, field):
    for name in registry.names():
        assert getattr(tiny_model_config(**{field: name}), field) == name
    with pytest.raises(ValueError) as e:
        tiny_model_config(**{field: "nonsense"})
    listed = ", ".join(repr(n) for n in registry.names())
    assert str(e.value) == f"unknown {field} 'nonsense'; valid: {listed} ({PLUGIN_HINT})"


def test_a_name_registers_one_class_only():
    for registry in (ACTIVATIONS, NORMS, PLACEMENTS, SCHEMES, FILTERS):
        taken = registry.names()[0]
        with pytest.raises(ValueError, match="already registered"):
            registry.register(taken)(type("Other", (), {}))
        registry.register(taken)(registry[taken])  # the same class again is no change


def test_decode_filters_go_between_temperature_and_top_k_in_the_order_given():
    settings = DecodeSettings(temperature=0.5, top_k=4, top_p=0.9, filters="top_p=0.5, min_len=2")
    kinds = [type(f) for f in chain_of(settings).filters]
    assert kinds == [MinLength, Temperature, TopP, MinLength, TopK, TopP]
    assert chain_of(settings).filters[2].p == 0.5


@pytest.mark.parametrize(
    "spec,message",
    [
        ("nucleus=0.5", "unknown decode filter 'nucleus'; valid: 'min_len', 'temperature'"),
        ("top_k=2.5", "filter 'top_k=2.5': top_k must be a static Python int"),
        ("top_k=many", "filter 'top_k=many': 'many' is not a number"),
        ("temperature", "filter 'temperature': "),  # its one number is missing
    ],
)
def test_a_bad_decode_filter_is_a_user_error_naming_it(spec, message):
    with pytest.raises(UserError, match=f"decode.filters='{spec}': {message}"):
        DecodeSettings(filters=spec)


def _example(*args, pythonpath=EXAMPLE, timeout=600):
    """A command run as a user runs it: my_lab importable through PYTHONPATH alone."""
    return run(list(args), env={"PYTHONPATH": pythonpath}, timeout=timeout)


def _write_tiny_sweep(tmp_path) -> str:
    """examples/plugin_lab/lab_sweep.py's arms and base, shrunk by tests/test_sweep.py's
    TINY overrides to one seed and a few steps."""
    spec = run_config.load_config_module(os.path.join(EXAMPLE, "lab_sweep.py")).get_config()
    spec.update(
        base=os.path.join(ROOT, spec["base"]),
        overrides={
            **TINY,
            "train.num_steps": 8,
            "train.eval_every": 8,
            "train.checkpoint_every": 8,
        },
        seeds=[0],
        parallel=2,
    )
    path = tmp_path / "lab_sweep.py"
    path.write_text(f"def get_config():\n    return {spec!r}\n")
    return str(path)


@pytest.mark.slow  # seven subprocesses: about a minute on 2 cores
def test_the_example_plugin_sweeps_evaluates_and_decodes_from_outside_the_package(tmp_path):
    workdir = str(tmp_path / "sweep")
    config = _write_tiny_sweep(tmp_path)
    sweep_args = ["--config", config, "--workdir", workdir, "--poll_s", "1"]
    sweep = _example("-m", "transformer.cli.sweep", *sweep_args)
    assert sweep.returncode == 0, sweep.stdout[-2000:] + sweep.stderr[-2000:]
    rows = {r["variant"]: r for r in csv.DictReader(open(os.path.join(workdir, "results.csv")))}
    assert set(rows) == {"kerple_log", "alibi"} and all(r["done"] == "1" for r in rows.values())
    run_dir = os.path.join(workdir, "kerple_log", "0")
    recorded = json.load(open(os.path.join(run_dir, "config.json")))
    assert recorded["plugins"]["modules"] == ["my_lab"]
    assert recorded["model"]["position"] == "kerple_log"
    assert json.load(open(os.path.join(run_dir, "eval", "test.json")))["step"] == 8

    sources = os.path.join(run_dir, "eval", "test.src.txt")
    decode = _example(
        "decode.py", "--workdir", run_dir, "--input", sources, "--config.decode.strategy=sample"
    )
    assert decode.returncode == 0, decode.stderr[-2000:]
    assert len(decode.stdout.splitlines()) == int(TINY["data.synthetic_eval_size"])

    checks = _example("tests/scripts/plugin_run.py", run_dir)
    assert checks.returncode == 0, checks.stderr[-2000:]
    result = json.loads(checks.stdout.splitlines()[-1])
    assert (result["position"], result["activation"]) == ("KerpleLog", "SquaredReLU")
    assert result["cache_max_abs_diff"] <= 1e-5
    assert max(abs(w) for w in result["slope_weights"]) > 0  # the slopes trained from 0
    # min-p at 1 keeps only the best token: sampling hot becomes greedy; at 0 it does not.
    assert result["min_p_1"] == result["greedy"]
    assert result["min_p_0"] != result["greedy"]

    missing = _example("eval.py", "--workdir", run_dir, pythonpath="")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines()[-1] == (
        f"error: plugin module 'my_lab' (plugins.modules of {run_dir}/config.json) not found; "
        "install it or put the directory that holds it on PYTHONPATH"
    )
