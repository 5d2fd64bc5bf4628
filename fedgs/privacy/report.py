"""The privacy.json schema: one layout for every strategy, built and read here only.

Version 2 (this one): ``version``, ``strategy``, ``steps``, ``delta``, ``accountant``,
``neighbouring`` and ``neighbouring_relation`` at the top; one block per threat model, keyed by
its name with underscores (``untrusted_server``, ``trusted_sampler``, ``trusted_server``,
``trusted_aggregator``), each with its ``epsilon`` (null when the strategy gives no such
guarantee, with a ``note``), ``threat_model``, ``accountant`` and ``neighbouring``; a figure that
rests on secret sampling carries ``"holds": false`` and the sampling note when a sampling seed
was set; then the strategy's own counts and parameters, and the ``sampling`` block.

Version 1 (no ``version`` field) is what fedgs wrote before: the same blocks, with the
``strategy`` tag only for Fed-Avg GAN and the teachers and, in the oldest files, no neighbouring
relation. ``read_privacy`` turns every version into version 2, so readers never branch on
layouts. Light (json and names only): the command line and the evaluation parser import it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedgs.algorithms import algorithm
from fedgs.privacy.threat_models import NEIGHBOURING, TRUSTED_SAMPLER, TRUSTED_SERVER

VERSION = 2
# figures that hold only if the server's sampling of clients stayed secret
SECRET_SAMPLING = (TRUSTED_SAMPLER, TRUSTED_SERVER)


def block_key(threat_model: str) -> str:
    """The privacy.json key of a threat model's block (``untrusted-server`` ->
    ``untrusted_server``)."""
    return threat_model.replace("-", "_")


def privacy_report(
    strategy: str, summary: dict[str, Any], details: dict[str, Any], sampling: dict[str, Any]
) -> dict[str, Any]:
    """The privacy.json of a run: a ledger's ``summary``, the strategy's ``details`` (steps,
    parameters) and its ``sampling``; a secret-sampling figure is voided by a sampling seed
    (its own note kept after the sampling one; ``summary`` is left as it was: runs reuse it)."""
    report = {"version": VERSION, "strategy": strategy} | summary | details
    report["sampling"] = sampling
    if not sampling.get("amplified_figures_hold", True):
        for key, block in epsilon_blocks(report).items():
            if block.get("threat_model") in SECRET_SAMPLING:
                notes = [sampling["note"], *([block["note"]] if "note" in block else [])]
                report[key] = block | {"holds": False, "note": "; ".join(notes)}
    return report


def epsilon_blocks(privacy: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every block that carries an epsilon, by key (a guarantee the strategy does not give has
    epsilon null and a note; a block without its own ``neighbouring`` has the run's)."""
    return {k: b for k, b in privacy.items() if isinstance(b, dict) and "epsilon" in b}


def headline(privacy: dict[str, Any]) -> dict[str, Any]:
    """The block of the run's guarantee: the threat model the report names as its
    ``headline`` (a secure-aggregation run), else the strategy's own."""
    threat_model = privacy.get("headline") or algorithm(privacy["strategy"]).threat_model
    return privacy[block_key(threat_model)]


def _infer_strategy(privacy: dict[str, Any]) -> str:
    """A version-1 file without a strategy tag: only GS-WGAN (and ``fedgs centralized``)
    wrote those; Fed-Avg GAN's is recognised by its block in case the tag was lost."""
    return "fedavg-gan" if "trusted_server" in privacy else "gswgan"


def read_privacy(privacy: dict[str, Any], strategy: str | None = None) -> dict[str, Any]:
    """A privacy.json of any version as version 2. ``strategy`` (from config.json) names the
    strategy of a version-1 file that has no tag."""
    version = privacy.get("version", 1)
    if version == VERSION:
        return privacy
    if version != 1:
        raise ValueError(
            f"privacy.json version {version!r}: this fedgs reads versions 1 to {VERSION}"
        )
    name = privacy.get("strategy") or strategy or _infer_strategy(privacy)
    relation = privacy.get("neighbouring", algorithm(name).neighbouring)
    return privacy | {
        "version": VERSION,
        "strategy": name,
        "neighbouring": relation,
        "neighbouring_relation": privacy.get("neighbouring_relation", NEIGHBOURING[relation]),
    }


def load_privacy(path: str | Path, strategy: str | None = None) -> dict[str, Any]:
    """``read_privacy`` of a privacy.json file."""
    return read_privacy(json.loads(Path(path).read_text()), strategy)
