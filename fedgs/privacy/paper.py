"""The GS-WGAN paper's epsilon figures, reproduced with its accountant (autodp RDP).

- federated (Federated EMNIST, 5.99e2): the untrusted-server model at the *expected* query
  count T*M/K, composed fractionally. No client is promised that figure: the most-queried
  client answers more queries (see ``fedgs.privacy.sampling``).
- centralized (MNIST, 10): every sample of every step as its own subsampled Gaussian
  (q = 1/K) composed B*T times, as the official privacy_analysis.py does. The B rows of a step
  share one subsampling event, so ``centralized_shared_step_epsilon`` is the defensible figure.
"""

from __future__ import annotations

from typing import Literal

from fedgs.privacy.accountants import DEFAULT_ACCOUNTANT, Accountant, get_accountant
from fedgs.privacy.events import (
    centralized_paper_event,
    centralized_shared_step_event,
    untrusted_client_event,
)

PAPER_ACCOUNTANT = "autodp-rdp"
Setting = Literal["federated", "centralized"]


def paper_epsilon(
    setting: Setting,
    clients: int,
    steps: int,
    batch_size: int,
    noise_multiplier: float,
    delta: float,
    clients_per_step: int = 1,
) -> float:
    """The paper's epsilon for a setting, always with autodp RDP (the paper's accountant).

    ``clients`` is the number of clients (federated) or of data subsets / discriminators
    (centralized, which samples one per step).
    """
    if clients < 1 or steps < 0 or not 1 <= clients_per_step <= clients:
        raise ValueError("need clients >= 1, steps >= 0, 1 <= clients_per_step <= clients")
    if setting == "federated":
        expected = steps * clients_per_step / clients
        event = untrusted_client_event({(noise_multiplier, batch_size): expected})
    elif setting == "centralized":
        if clients_per_step != 1:
            raise ValueError("the centralized paper model samples one subset per step")
        event = centralized_paper_event(clients, steps, batch_size, noise_multiplier)
    else:
        raise ValueError(f"setting must be 'federated' or 'centralized', got {setting!r}")
    return get_accountant(PAPER_ACCOUNTANT).epsilon(event, delta)


def centralized_shared_step_epsilon(
    subsets: int,
    steps: int,
    batch_size: int,
    noise_multiplier: float,
    delta: float,
    accountant: Accountant | str = DEFAULT_ACCOUNTANT,
) -> float:
    """Centralized GS-WGAN with one subsampling event (q = 1/subsets) per step of B rows.

    Much larger than the paper's figure: RDP amplification bounds are weak when one step's
    Gaussian (multiplier sigma / sqrt(B)) is already strong.
    """
    event = centralized_shared_step_event(subsets, steps, batch_size, noise_multiplier)
    return get_accountant(accountant).epsilon(event, delta)
