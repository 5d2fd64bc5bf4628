"""User-level privacy accounting for federated GS-WGAN (and DP-FedAvg).

Mechanisms are dp-accounting events (``events``); accountants turn them into epsilon at the end
(``accountants``: autodp-rdp, the paper's and the default; dp-accounting-rdp;
dp-accounting-pld). ``ClientLedger`` counts what each client was charged, keyed by the
charge's event; ``PrivacyLedger`` (GS-WGAN) and ``TeacherLedger`` (DataLens, PATE-GAN) are
ones. Every figure names its threat model: *untrusted-server* (no amplification; the run's
epsilon is the most-queried client's) or *trusted-sampler* (amplification by secret uniform
sampling, an assumption).

Names are loaded on first use: autodp and dp-accounting take seconds to import, which neither
the sanitizer nor the ``fedgs`` command line should pay for.
"""

from __future__ import annotations

from fedgs.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "accountants": (
            "Accountant ACCOUNTANT_NAMES DEFAULT_ACCOUNTANT UnsupportedEventError get_accountant"
        ),
        "calibration": "calibrate_noise_multiplier",
        "threat_models": "THREAT_MODELS TRUSTED_SAMPLER UNTRUSTED_SERVER TRUSTED_SERVER",
        "events": (
            "centralized_paper_event centralized_shared_step_event fedavg_round_event "
            "gswgan_query_event trusted_sampler_event untrusted_client_event"
        ),
        "client_ledger": "ClientLedger",
        "ledger": "PrivacyLedger",
        "fedavg_ledger": "FedAvgLedger",
        "paper": "centralized_shared_step_epsilon paper_epsilon",
        "sampling": "simulate_query_counts",
    },
)
