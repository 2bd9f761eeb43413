"""The fast tier compiles nothing (issue 34): conftest refuses, at collection, a test that reaches a fixture which
compiles llama.cpp without being marked slow."""

from __future__ import annotations

from dataclasses import dataclass, field

import conftest
import pytest


@dataclass
class Item:
    """What the check reads of a pytest item."""

    nodeid: str
    fixturenames: list[str]
    markers: list[str] = field(default_factory=list)

    def get_closest_marker(self, name: str):
        return name if name in self.markers else None


def test_an_unmarked_test_that_reaches_a_compiling_fixture_is_named():
    items = [Item("a", ["tmp_path", "pinned_source", "cpu_wheel"]),  # the closure pytest computes: direct or not
             Item("b", ["tmp_path", "cpu_wheel"], ["slow"]),
             Item("c", ["built_rpc_server"]),
             Item("d", ["tmp_path", "pinned_source"])]
    assert conftest.unmarked_compiling_tests(items) == ["a", "c"]


def test_the_compiling_fixtures_named_are_conftests_own():
    """A renamed fixture would leave the check looking for a name no test uses."""
    assert conftest.COMPILING_FIXTURES == {"cpu_wheel", "built_rpc_server"}
    for name in conftest.COMPILING_FIXTURES:
        assert name in vars(conftest), name


def test_the_hook_stops_the_session():
    with pytest.raises(pytest.UsageError, match="test_x"):
        conftest.pytest_collection_modifyitems(None, [Item("test_x", ["cpu_wheel"])])
