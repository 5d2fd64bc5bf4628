"""The real-data baseline the calibrated accuracy divides by must itself be plausible.

An MLP with one hidden layer of 100 units, trained on real MNIST, reaches about 0.97 after a
few epochs; 0.95 is the bar (the issue's). Needs ../shared/data/mnist (skips without it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedgs.evaluation.utility import accuracy_of, real_subset

MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"


@pytest.mark.slow
@pytest.mark.skipif(
    not (MNIST / "train-images-idx3-ubyte.gz").exists()
    and not (MNIST / "train-images-idx3-ubyte").exists(),
    reason=f"real MNIST IDX files not found in {MNIST}",
)
def test_mlp_on_real_mnist_reaches_095() -> None:
    from fedgs.data import load_federated

    dataset = load_federated("mnist", MNIST, num_clients=10)
    train, test = dataset.train_arrays(), dataset.test_arrays()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared; one thread is enough for an MLP
    try:
        result = accuracy_of("mlp", real_subset(train, 60_000, seed=0), test, 10, 3, seed=0)
    finally:
        torch.set_num_threads(threads)
    assert result["accuracy"] >= 0.95, result
