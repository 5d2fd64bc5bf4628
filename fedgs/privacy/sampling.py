"""Simulated query counts: how often each client is asked (drawn uniformly or least-queried).

The expected count T*M/K is not what any client's guarantee rests on; under the untrusted
server the most-queried client sets the run's epsilon, so we simulate the draw.
"""

from __future__ import annotations

import numpy as np

from fedgs.privacy.client_sampling import LEAST_QUERIED, UNIFORM

_KEYS_PER_CHUNK = 2_000_000  # random keys per batch of steps: bounds memory at ~16 MB


def simulate_query_counts(
    clients: int,
    steps: int,
    clients_per_step: int = 1,
    seed: int | None = 0,
    rule: str = UNIFORM,
) -> np.ndarray:
    """Queries per client after ``steps`` steps, each drawing ``clients_per_step`` distinct
    clients uniformly from ``clients`` (sampling without replacement within a step); with the
    ``least-queried`` rule each step asks the clients asked least so far, so the counts differ
    by at most one."""
    if clients < 1 or steps < 0 or not 1 <= clients_per_step <= clients:
        raise ValueError(
            f"need clients >= 1, steps >= 0 and 1 <= clients_per_step <= clients; got "
            f"clients={clients}, steps={steps}, clients_per_step={clients_per_step}"
        )
    if rule == LEAST_QUERIED:
        rounds, rest = divmod(steps * clients_per_step, clients)
        return np.array([rounds + 1] * rest + [rounds] * (clients - rest), dtype=np.int64)
    rng = np.random.default_rng(seed)
    if clients_per_step == 1:
        return np.bincount(rng.integers(clients, size=steps), minlength=clients)
    counts = np.zeros(clients, dtype=np.int64)
    chunk = max(1, _KEYS_PER_CHUNK // clients)
    for start in range(0, steps, chunk):
        rows = min(chunk, steps - start)
        # the M smallest of K uniform keys are a uniform M-subset
        keys = rng.random((rows, clients))
        chosen = np.argpartition(keys, clients_per_step - 1, axis=1)[:, :clients_per_step]
        counts += np.bincount(chosen.ravel(), minlength=clients)
    return counts
