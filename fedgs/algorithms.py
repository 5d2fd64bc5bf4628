"""The algorithm registry: what each strategy is, in one place (issue 19).

Every place that used to branch on a strategy name reads its entry here instead: the run config's
choices, the message types a client serves, the node policy's default budget, the threat model
and neighbouring relation its epsilon is reported under, whether (and with which cohort size and
clip) it may answer through secure aggregation, the noise key the debugging report
quotes, the paper's and its own bytes per update for the communication table, and the server
run that drives it and the client session that answers it ("module:attr" strings, so the core
never imports the server or client layer).

Light on purpose (no torch, no Flower): ``fedgs --help`` and the run config import it.

More algorithms (docs/architecture.md, "Adding a strategy"): ``FEDGS_ALGORITHMS`` = comma-separated
"module:attr", each naming an :class:`Algorithm`, read once when this module is imported. An
environment variable because the registry must be the same in every process of a run: the
simulation's Ray workers, where the ClientApp (and its gate) runs, inherit the driver's
environment, and a SuperNode or SuperExec gets it from its container or shell.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

from fedgs.privacy.threat_models import (
    ADD_REMOVE,
    REPLACE_ONE,
    TRUSTED_AGGREGATOR,
    TRUSTED_SERVER,
    UNTRUSTED_SERVER,
)

WARM_START = "train.warmstart"  # the warm-start message type every warm-started client serves
# Every node serves it, whatever its strategy: the reply names the client the node holds and
# nothing else, so a server can bind its ledger's entries before the first paid query.
IDENTIFY = "train.identify"


@dataclass(frozen=True)
class Algorithm:
    """One strategy's public facts."""

    name: str  # the run-config ``strategy`` value
    query: str  # the Flower message type of its per-step request
    threat_model: str  # of its headline epsilon
    neighbouring: str  # relation its epsilon is stated for: REPLACE_ONE or ADD_REMOVE
    noise_key: str  # the run-config key of its noise scale
    server_run: str  # "module:attr" of the server run class that drives it
    client_session: str  # "module:attr": (run config, partition id) -> object with .answer()
    # "module:attr": (run config, partition id) -> object with .warm_start(), for clients that
    # keep a critic (or classifier) warm-started before step 1; None: no warm start
    warm_start_session: str | None
    # "module:attr": (run config) -> {"down": bytes, "up": bytes}, the float32 payload of one
    # client update as configured (fedgs comm-cost's analytic column); None: not stated
    update_bytes: str | None = None
    paper_bytes: float | None = None  # bytes per generator update in the paper's protocol
    # the query's ArrayRecords of fake batches (fedgs.protocols.common's format): the client's
    # gate checks each one's batch size against the node policy before anything is decoded
    batch_records: tuple[str, ...] = ("fakes",)
    # the query's ArrayRecords of float arrays (e.g. network weights): the gate checks that each
    # decodes to finite floats before any data is loaded; names and shapes are the session's
    float_records: tuple[str, ...] = ()
    # run-config keys only this strategy reads: set away from their defaults under any other
    # strategy, the run config refuses them (instead of a run that silently ignores them)
    own_options: tuple[str, ...] = ()
    # secure aggregation (issue 42): the run-config key of a secure step's cohort size m, and
    # the key of the bound each client's vector is clipped to; None: this strategy's queries
    # are never answered through secure aggregation (the run config refuses it)
    cohort_key: str | None = None
    clip_key: str | None = None
    # each client is asked at most once over the whole run (its one release): planners count
    # one query for every client instead of simulating the sampler
    one_shot: bool = False

    @property
    def secure(self) -> bool:
        """Whether its queries may be answered through secure aggregation."""
        return self.cohort_key is not None

    @property
    def warm_started(self) -> bool:
        return self.warm_start_session is not None

    def run_class(self) -> Any:
        """The server run class (imported on demand: the server layer needs Flower)."""
        return _load(self.server_run)

    def session_factory(self) -> Any:
        """What builds the client's session for one query (imported on demand)."""
        return _load(self.client_session)

    def update_bytes_of(self, config: Any) -> dict[str, int] | None:
        """Float32 payload bytes down and up of one client update under ``config``."""
        return None if self.update_bytes is None else _load(self.update_bytes)(config)

    def warm_start_factory(self) -> Any:
        """What builds the client's session for the warm start (imported on demand)."""
        if self.warm_start_session is None:
            raise ValueError(f"{self.name} clients are not warm-started")
        return _load(self.warm_start_session)


def _load(target: str) -> Any:
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm(
            "gswgan",
            "train.gswgan",
            UNTRUSTED_SERVER,
            REPLACE_ONE,
            noise_key="noise-multiplier",
            server_run="fedgs.server.gswgan_run:GSWGANRun",
            client_session="fedgs.client.gswgan_session:GSWGANSession",
            warm_start_session="fedgs.client.gswgan_session:GSWGANSession",
            update_bytes="fedgs.comm:gswgan_update_bytes",
            paper_bytes=1.50e5,
            own_options=(
                "public-pretrain-steps",
                "client-sampling",
                "diversity-weight",
                "z-dim",
                "client-code-dims",
                "label-mismatch-until",
                "fake-batches",
            ),
            cohort_key="clients-per-step",
            clip_key="clip-norm",
        ),
        Algorithm(
            "fedavg-gan",
            "train.fedavggan",
            TRUSTED_SERVER,
            ADD_REMOVE,
            noise_key="fedavg-noise-multiplier",
            server_run="fedgs.server.fedavg_gan_run:FedAvgGANRun",
            client_session="fedgs.client.fedavg_gan_session:FedAvgClient",
            warm_start_session=None,  # its clients keep no critic between rounds
            update_bytes="fedgs.comm:fedavg_update_bytes",
            paper_bytes=3.94e7,
            float_records=("critic",),  # fedgs.protocols.fedavg_gan.CRITIC: D's weights
            cohort_key="fedavg-clients-per-round",  # a secure round: a fixed-size cohort
            clip_key="fedavg-clip-norm",
        ),
        Algorithm(
            "datalens",
            "train.datalens",
            TRUSTED_AGGREGATOR,
            REPLACE_ONE,
            noise_key="datalens-noise-std",
            server_run="fedgs.server.datalens_run:DataLensRun",
            client_session="fedgs.client.datalens_session:DataLensTeacher",
            warm_start_session="fedgs.client.critic_session:CriticSession",  # teachers are critics
            update_bytes="fedgs.comm:datalens_update_bytes",
        ),
        Algorithm(
            "pate-gan",
            "train.pategan",
            TRUSTED_AGGREGATOR,
            REPLACE_ONE,
            noise_key="pate-laplace-scale",
            server_run="fedgs.server.pate_gan_run:PateGANRun",
            client_session="fedgs.client.pate_gan_session:PateTeacher",
            warm_start_session="fedgs.client.pate_gan_session:teacher_session",  # a classifier
            update_bytes="fedgs.comm:pate_update_bytes",
            batch_records=("fakes", "ballot"),  # fedgs.protocols: common.FAKES, pate_gan.BALLOT
        ),
        Algorithm(
            "dp-merf",
            "train.dpmerf",
            UNTRUSTED_SERVER,
            REPLACE_ONE,
            noise_key="merf-noise-multiplier",
            server_run="fedgs.server.dp_merf_run:DpMerfRun",
            client_session="fedgs.client.dp_merf_session:DpMerfSession",
            warm_start_session=None,  # one pass over the writer's data, no model kept
            update_bytes="fedgs.protocols.dp_merf:update_bytes",
            batch_records=(),  # its query carries no fake batch, only the public feature map
            own_options=(
                "merf-features",
                "merf-bandwidth",
                "merf-clip-norm",
                "merf-noise-multiplier",
                "merf-generator-steps",
                "merf-lr",
                "merf-batch-size",
            ),
            cohort_key="clients-per-step",  # a secure round: one cohort's sum of releases
            clip_key="merf-clip-norm",
            one_shot=True,
        ),
    )
}

ENV_VAR = "FEDGS_ALGORITHMS"


def registered(spec: str, known: dict[str, Algorithm]) -> dict[str, Algorithm]:
    """The entries ``spec`` ("module:attr,module:attr") names, checked against ``known``: each
    must be an Algorithm whose name and query are new (the warm start's message type is shared,
    never a query). ValueError naming the bad entry otherwise."""
    added: dict[str, Algorithm] = {}
    for target in (t.strip() for t in spec.split(",")):
        if not target:
            continue
        where = f"{ENV_VAR} entry {target!r}"
        if target.count(":") != 1 or not all(target.split(":")):
            raise ValueError(f"{where}: expected 'module:attr'")
        try:
            entry = _load(target)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"{where}: cannot load it ({error})") from error
        if not isinstance(entry, Algorithm):
            raise ValueError(f"{where}: not a fedgs.algorithms.Algorithm ({type(entry).__name__})")
        if not entry.query.startswith("train.") or entry.query == "train.":
            raise ValueError(f"{where}: message type {entry.query!r} must be 'train.<name>'")
        taken = {**known, **added}
        if entry.name in taken:
            raise ValueError(f"{where}: strategy name {entry.name!r} is already registered")
        queries = {a.query: a.name for a in taken.values()} | {
            WARM_START: "the warm start",
            IDENTIFY: "the identification",
        }
        if entry.query in queries:
            raise ValueError(
                f"{where}: message type {entry.query!r} is already {queries[entry.query]}'s"
            )
        added[entry.name] = entry
    return added


ALGORITHMS |= registered(os.environ.get(ENV_VAR, ""), ALGORITHMS)
STRATEGIES: tuple[str, ...] = tuple(ALGORITHMS)


def algorithm(name: str) -> Algorithm:
    """The registry entry of ``name``; a clear error naming the known strategies otherwise."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r} (known: {', '.join(STRATEGIES)})") from None
