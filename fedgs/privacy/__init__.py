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

_EXPORTS: dict[str, str] = {
    "Accountant": "accountants",
    "ACCOUNTANT_NAMES": "accountants",
    "DEFAULT_ACCOUNTANT": "accountants",
    "UnsupportedEventError": "accountants",
    "get_accountant": "accountants",
    "calibrate_noise_multiplier": "calibration",
    "THREAT_MODELS": "threat_models",
    "TRUSTED_SAMPLER": "threat_models",
    "UNTRUSTED_SERVER": "threat_models",
    "TRUSTED_SERVER": "threat_models",
    "centralized_paper_event": "events",
    "centralized_shared_step_event": "events",
    "fedavg_round_event": "events",
    "gswgan_query_event": "events",
    "trusted_sampler_event": "events",
    "untrusted_client_event": "events",
    "ClientLedger": "client_ledger",
    "PrivacyLedger": "ledger",
    "FedAvgLedger": "fedavg_ledger",
    "centralized_shared_step_epsilon": "paper",
    "paper_epsilon": "paper",
    "simulate_query_counts": "sampling",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
