"""`pip install .` gives a working install: the wheel holds the `transformer` package alone,
and its console scripts train, evaluate and decode from a directory outside the checkout.

The wheel is built offline from a copy of the checkout's files (tracked, or untracked and not
ignored) and installed with --no-deps into a fresh virtual environment; the environment
finds the dependencies (JAX, Flax, ...) through a path entry to this interpreter's
site-packages, which puts them on sys.path without running that directory's .pth files, so
the checkout's editable install stays out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from tests.helpers import ROOT, tiny_args

pytestmark = pytest.mark.slow
SCRIPTS = [
    "transformer-train",
    "transformer-eval",
    "transformer-decode",
    "transformer-sweep",
    "transformer-analyze",
    "transformer-report",
    "transformer-interop",
    "transformer-verify",
]


def _sh(args, **kwargs):
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900, **kwargs)
    assert proc.returncode == 0, f"{args[:3]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    """The wheel built from the checkout's files, once for the module's tests."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    source = tmp_path / "source"
    for name in _source_files():
        os.makedirs(source / os.path.dirname(name), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, name), source / name)
    dist = tmp_path / "dist"
    _sh(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(dist),
            str(source),
        ]
    )
    (built,) = dist.glob("transformer-*.whl")
    return str(built)


def _source_files() -> list[str]:
    """The checkout's files, tracked or untracked and not ignored, as plain files: a virtual
    environment inside the checkout under a name .gitignore does not list (its folder holds
    pyvenv.cfg) is left out, and so are links and anything else that is not a file."""
    listed = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]
    names = _sh(listed, cwd=ROOT).stdout.splitlines()
    venvs = {n.split("/")[0] for n in names if n.count("/") == 1 and n.endswith("/pyvenv.cfg")}
    return [
        n
        for n in names
        if n.split("/")[0] not in venvs
        and os.path.isfile(os.path.join(ROOT, n))
        and not os.path.islink(os.path.join(ROOT, n))
    ]


def _fresh_venv(tmp_path, wheel: str) -> str:
    venv = tmp_path / "venv"
    _sh([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    _sh([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel])
    purelib = _sh([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    with open(os.path.join(purelib.stdout.strip(), "host_dependencies.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    return str(venv / "bin")


def test_wheel_holds_the_package_alone_and_its_scripts(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == {"transformer"}
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    listed = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert all(f"{script} = transformer.cli." in listed for script in SCRIPTS)
    assert "transformer/training/base_config.py" in names


def test_installed_wheel_trains_evaluates_and_decodes_outside_the_checkout(tmp_path, wheel):
    bin_dir = _fresh_venv(tmp_path, wheel)
    work = tmp_path / "elsewhere"
    work.mkdir()
    shutil.copy(os.path.join(ROOT, "configs", "default.py"), work / "my_config.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["JAX_PLATFORMS"] = "cpu"

    def script(name, *args, stdin=None):
        return _sh([os.path.join(bin_dir, name), *args], cwd=work, env=env, input=stdin)

    show_package = "import transformer; print(transformer.__file__)"
    where = _sh([os.path.join(bin_dir, "python"), "-c", show_package], cwd=work, env=env).stdout
    assert where.startswith(str(tmp_path / "venv")), where
    script("transformer-train", "--config", "my_config.py", "--workdir", "run", *tiny_args())
    script("transformer-eval", "--workdir", "run", "--split", "valid")
    assert (work / "run" / "eval" / "valid.json").exists()
    out = script("transformer-decode", "--workdir", "run", stdin="The boy sees the dog.\n\n")
    assert out.stdout.count("\n") == 2 and "translated 2 lines" in out.stderr
