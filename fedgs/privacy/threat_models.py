"""The threat models and neighbouring relations every epsilon is stated for, as plain names.

A light module (no accountant imported): the algorithm registry and the command line read these
names, and the accountants and ledgers (``events``) attach them to every figure.
"""

from __future__ import annotations

UNTRUSTED_SERVER = "untrusted-server"
TRUSTED_SAMPLER = "trusted-sampler"
TRUSTED_SERVER = "trusted-server"
TRUSTED_AGGREGATOR = "trusted-aggregator"
SECURE_AGGREGATION = "secure-aggregation"
THREAT_MODELS: dict[str, str] = {
    UNTRUSTED_SERVER: (
        "the server knows which client it asked: no amplification by subsampling; a client's "
        "epsilon composes exactly the queries it answered (the GS-WGAN paper's threat model)"
    ),
    TRUSTED_SAMPLER: (
        "assumes the server samples clients uniformly and keeps the choice secret: amplification "
        "by subsampling with q = clients per step / clients; NOT an untrusted-server guarantee"
    ),
    TRUSTED_SERVER: (
        "DP-FedAvg (Fed-Avg GAN): clients send unnoised critic deltas; the server is trusted to "
        "clip them, add the noise and keep its Poisson sampling secret (q = m / K per round)"
    ),
    TRUSTED_AGGREGATOR: (
        "teacher ensembles (DataLens TopAgg, PATE-GAN): clients send unnoised votes; the server is "
        "trusted to aggregate them and add the noise before anything is used; a client's epsilon "
        "composes every step it was asked in (no amplification by subsampling claimed)"
    ),
    SECURE_AGGREGATION: (
        "secure aggregation (distributed discrete Gaussian): each client adds its share of the "
        "noise and the server, honest but curious, sees only the cohort's sum mod 2^k; it may "
        "collude with up to t-1 clients, whose noise it then knows, so the epsilon counts only "
        "the noise of the m_min - colluders honest survivors the protocol must have; a client's "
        "epsilon composes every step it took part in (the server knows the cohort: no "
        "amplification); NOT covered: a server that fills cohorts with Sybil clients it runs"
    ),
}


# The neighbouring relation each figure is stated for: user-level (one client = one writer).
REPLACE_ONE = "replace-one"
ADD_REMOVE = "add-remove"
NEIGHBOURING: dict[str, str] = {
    REPLACE_ONE: "replace one client: all of one writer's data changed (datasets of equal size)",
    ADD_REMOVE: "add or remove one client: all of one writer's data present or absent",
}
