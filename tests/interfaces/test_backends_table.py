"""`playbook backends`: every unit as it declares itself, read by code (its status, profile, settings, tables and
failure family), so that a unit's declarations are facts a person sees, not decoration."""

from __future__ import annotations

import subprocess
import sys

import pytest

from playbook import resources
from playbook.backends import registry
from playbook.interfaces.tables import backends_table
from playbook.knowledge.failures import load_knowledge_base


def test_every_unit_is_a_row_with_what_it_declares():
    table = backends_table().set_index("backend")
    assert list(table.index) == registry.names()
    families = load_knowledge_base().families()
    for unit in registry.units():
        row = table.loc[unit.name]
        assert row["status"] == unit.status
        assert (resources.params_dir().parent / row["profile"]).is_file()
        if unit.failure_family:
            assert row["failures"] == f"{families[unit.failure_family]} ({unit.failure_family})"
    assert table.loc["cuda", "settings"] == "cuda.architectures, cuda.toolkit"
    assert table.loc["cuda", "auto"] == "10" and table.loc["sycl", "auto"] == "asked for only"


@pytest.mark.long
def test_the_command_prints_it():
    out = subprocess.run([sys.executable, "-m", "playbook", "backends"], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    assert all(name in out for name in registry.names()) and "runs on the GPU machine" in out
