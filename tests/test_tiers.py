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


def test_a_linked_cache_compiles_into_the_shared_ccache(tmp_path):
    """The slow tier's builds share one compiler cache through conftest.link_ccache, which relies on the build
    step putting ccache's folder at <cache>/ccache: should that move, this fails instead of the builds going cold."""
    from pathlib import Path

    from playbook.steps.caches import ccache_env

    shared = tmp_path / "shared" / "ccache"
    conftest.link_ccache(tmp_path / "fresh", shared)
    assert Path(ccache_env(tmp_path / "fresh")["CCACHE_DIR"]).resolve() == shared.resolve()
    assert shared.is_dir() and not any(shared.iterdir())


def test_a_long_test_is_slow_too_and_a_build_is_not_long():
    items = [Item("chain", [], ["long"]), Item("build", ["cpu_wheel"], ["slow"]), Item("unit", [])]

    class Marked(Item):
        def add_marker(self, mark) -> None:
            self.markers.append(mark.name)

    items = [Marked(i.nodeid, i.fixturenames, list(i.markers)) for i in items]
    conftest.mark_long_tests_slow(items)
    assert [i.markers for i in items] == [["long", "slow"], ["slow"], []]
    assert conftest.unmarked_compiling_tests(items) == []
