"""The Flower wait patches: applied to the installed Flower, refused on other internals."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fake_modules import module_from_source
from flwr.supercore.inflatable import inflatable_utils
from flwr.supernode import start_client_internal

from fedgs.deploy import flower_waits


def test_supernode_waits_refused_without_the_expected_sleeps(tmp_path: Path) -> None:
    module = module_from_source(tmp_path, "import time\n\ndef loop():\n    time.sleep(1)\n")
    with pytest.raises(flower_waits.FlowerInternalsChanged, match="time.sleep"):
        flower_waits.shorten_supernode_waits(module)
    assert module.time is time


def test_supernode_waits_shortened_in_a_module_that_has_them(tmp_path: Path) -> None:
    source = (
        "import time\n\ndef empty_pull():\n    time.sleep(3)\n\ndef reply():\n    time.sleep(0.5)\n"
    )
    module = module_from_source(tmp_path, source)
    flower_waits.shorten_supernode_waits(module)
    started = time.monotonic()
    module.empty_pull()
    module.reply()
    assert time.monotonic() - started < 1.0
    assert module.time.monotonic() > 0  # the rest of time is untouched


def test_object_pull_backoff_refused_without_the_keyword() -> None:
    def pull_objects(object_ids: list[str], *, initial_backoff: float = 1) -> None:
        del object_ids, initial_backoff

    def pull_and_inflate(tree: object, *, backoff: float = 1) -> None:
        del tree, backoff

    with pytest.raises(flower_waits.FlowerInternalsChanged, match="pull_and_inflate"):
        flower_waits.shorten_object_pulls(pull_objects, pull_and_inflate)
    assert pull_objects.__kwdefaults__ == {"initial_backoff": 1}  # all checked before any patch


def test_patches_apply_to_the_installed_flower(monkeypatch: pytest.MonkeyPatch) -> None:
    pulls = (inflatable_utils.pull_objects, inflatable_utils.pull_and_inflate_object_from_tree)
    monkeypatch.setattr(start_client_internal, "time", start_client_internal.time)  # restored
    for pull in pulls:  # restored after the test
        monkeypatch.setitem(pull.__kwdefaults__, "initial_backoff", 1.0)
    flower_waits.shorten_supernode_waits()
    flower_waits.shorten_object_pulls()
    assert isinstance(start_client_internal.time, flower_waits._ShortSleeps)
    for pull in pulls:
        assert pull.__kwdefaults__["initial_backoff"] == flower_waits.PULL_INITIAL_BACKOFF
