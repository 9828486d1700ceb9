"""gc_paused: the collector is off inside a compile and back to its old state after."""

from __future__ import annotations

import gc

import pytest

from formcast.gc_pause import gc_paused


@pytest.fixture(autouse=True)
def _restore_collector():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_collector_is_off_inside_and_back_on_after() -> None:
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():  # nested: the inner exit must not turn it back on
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled_and_errors_restore_it() -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()
    gc.enable()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("compile failed")
    assert gc.isenabled()
