"""`--help` of train.py, eval.py and decode.py shows the command's usage (its module
docstring) and lists every flag that usage names, the shared ones from cli/app.py included;
not the wrapper file's docstring and an empty list."""

import ast
import os
import re

import pytest

from tests.helpers import ROOT, run

COMMANDS = {"train.py": "train", "eval.py": "evaluate", "decode.py": "decode"}


def usage(module: str) -> str:
    """The command module's docstring, read without importing it (its flags would be
    defined in this process)."""
    with open(os.path.join(ROOT, "transformer", "cli", f"{module}.py")) as f:
        return ast.get_docstring(ast.parse(f.read()))


def usage_flags(doc: str) -> set[str]:
    """The flags a usage docstring names: `--name`, not `--config.section.key` overrides."""
    return set(re.findall(r"--([a-z_]+)(?![.\w])", doc))


@pytest.mark.parametrize("script", COMMANDS)
def test_help_shows_the_usage_and_every_flag_it_names(script):
    doc = usage(COMMANDS[script])
    proc = run([script, "--help"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(doc.strip().splitlines()[0]), proc.stdout[:300]
    listed = set(re.findall(r"^  --(?:\[no\])?([a-z_]+):", proc.stdout, flags=re.M))
    named = usage_flags(doc)
    assert named and named <= listed, sorted(named - listed)
