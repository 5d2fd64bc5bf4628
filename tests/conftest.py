"""Shared test set-up: every cache a test builds goes to one temporary folder per session."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _fedgs_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Datasets and domain classifiers are cached under FEDGS_CACHE; CI sets it, else a temp dir.

    Subprocesses started by tests inherit it, so a dataset decoded once serves the whole session.
    """
    if "FEDGS_CACHE" not in os.environ:
        os.environ["FEDGS_CACHE"] = str(tmp_path_factory.mktemp("fedgs-cache"))
