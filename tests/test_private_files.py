"""Private state is the owner's alone on a shared host (issue 46): 0600 files, 0700 folders.

A node's critic (trained on its raw data), its ledger, the server's ledger, secrets and keys
were 0644 in 0755 folders: any user of the host could read them. So were the data cache's
decoded datasets, the classifiers trained on them and their cached scores.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from fedgs.client.state_store import ClientStateStore
from fedgs.data import load_federated
from fedgs.deploy.certs import ensure_secret, ensure_tls, generate_node_keys
from fedgs.evaluation.cache import ResultCache
from fedgs.metrics.classifier import load_or_train_classifier
from fedgs.private_files import close_dir, private_dir
from fedgs.training.run_dir import RunDirectory, write_atomic


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    """The usual umask (022): what fedgs creates would be world-readable unless it says no."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_write_atomic_writes_owner_only_files(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text("{}")
    path.chmod(0o644)  # written by an older fedgs
    write_atomic(path, b"{}")
    assert mode(path) == 0o600


def test_client_state_is_private(tmp_path: Path) -> None:
    store = ClientStateStore(tmp_path / "state")
    with store.locked("client-1"):
        store.save("client-1", {"critic": torch.zeros(2), "ledger": "{}"})
    store.count_failure("client-1")
    assert mode(store.root) == 0o700
    files = list(store.root.iterdir())
    assert len(files) == 3  # the state, its lock and its failure count
    assert {mode(p) for p in files} == {0o600}


def test_a_state_folder_already_there_is_made_private(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir(mode=0o755)
    assert mode(ClientStateStore(tmp_path / "state").root) == 0o700


def test_run_directory_outputs_are_private(tmp_path: Path) -> None:
    out = RunDirectory(tmp_path / "run")
    out.write_json(out.privacy_json, {"epsilon": 1.0})
    out.append_metrics({"step": 1})
    out.append_metrics({"step": 2})
    out.save_generator("gswgan", torch.nn.Linear(2, 2), 10, {"gswgan": {}})
    assert mode(out.root) == mode(out.samples) == 0o700
    for path in (out.privacy_json, out.metrics_csv, out.generator_pt):
        assert mode(path) == 0o600, path


def test_a_folder_the_user_named_keeps_its_mode(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir(mode=0o755)
    RunDirectory(tmp_path / "shared")
    assert mode(tmp_path / "shared") == 0o755
    assert mode(private_dir(tmp_path / "shared")) == 0o700  # one fedgs owns: made private


def test_deployment_secrets_and_keys_are_private(tmp_path: Path) -> None:
    tls = ensure_tls(tmp_path / "certs", tmp_path / "ca" / "ca.key")
    secret = ensure_secret(tmp_path / "nodes" / "supernode-0" / "superexec.secret")
    keys = generate_node_keys(tmp_path / "keys", "supernode-0")
    for path in (tls.server_key, tmp_path / "ca" / "ca.key", secret, keys.private):
        assert mode(path) == 0o600, path
        assert mode(path.parent) == 0o700, path.parent


def test_the_cache_is_the_owners_alone(tmp_path: Path) -> None:
    """Decoded data, a classifier trained on it and its scores: another user of the host reads
    none of it (0700 folders), and a folder an earlier version left open is closed on use."""
    root = tmp_path / "cache"
    folder = Path(load_federated(num_clients=5, cache_dir=root).path)
    assert mode(root) == 0o700 and mode(folder) == 0o700
    folder.chmod(0o755)  # as versions before this one left it
    assert Path(load_federated(num_clients=5, cache_dir=root).path) == folder
    assert mode(folder) == 0o700

    images, labels = torch.zeros(8, 1, 28, 28), torch.arange(8) % 2
    load_or_train_classifier("fingerprint", images, labels, 2, cache_dir=root, epochs=1)
    assert mode(root / "classifiers") == 0o700
    (root / "classifiers").chmod(0o755)
    load_or_train_classifier("fingerprint", images, labels, 2, cache_dir=root, epochs=1)  # a hit
    assert mode(root / "classifiers") == 0o700
    scores = ResultCache(root / "evaluation-baselines")
    scores.put({"k": 1}, 0.5)
    assert mode(root / "evaluation-baselines") == 0o700 and scores.get({"k": 1}) == 0.5


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder of another user")
def test_a_cache_folder_of_another_user_keeps_its_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared-cache"
    shared.mkdir(mode=0o755)
    os.chown(shared, 65534, 65534)  # nobody's: a cache shared on purpose
    close_dir(shared)
    assert mode(shared) == 0o755
