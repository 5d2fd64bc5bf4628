"""Device selection (run-config ``device``, ``client-num-gpus``), exercised on the CPU; the same
paths on a GPU run when one is visible."""

from __future__ import annotations

import pytest
import torch
from flwr.app import RecordDict

from fedgs.client import critic_session
from fedgs.client.critic_session import CriticSession
from fedgs.client.gswgan_session import GSWGANSession
from fedgs.client.pate_gan_session import teacher_session
from fedgs.device import resolve_device
from fedgs.privacy.sanitizer import sanitize
from fedgs.protocols import common, gswgan
from fedgs.run_config import RunConfig
from fedgs.simulations.simulate import EngineOptions, backend_config
from fedgs.training.critic import PrivateCritic
from fedgs.training.generator import GeneratorTrainer

GPU = torch.cuda.is_available()
DEVICES = ["cpu", "cuda"] if GPU else ["cpu"]


def test_names_resolve_and_wrong_ones_are_refused() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if GPU else "cpu")
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("tpu")
    with pytest.raises(ValueError, match="unknown device"):
        RunConfig(device="gpu")
    with pytest.raises(ValueError, match="client-num-gpus"):
        RunConfig(client_num_gpus=-0.5)
    if not GPU:
        with pytest.raises(ValueError, match="sees no GPU"):
            resolve_device("cuda")


def test_run_config_keys_reach_ray_as_client_resources() -> None:
    config = RunConfig.from_user_config({"device": "cpu", "client-num-gpus": "0.25"})
    assert config.client_num_gpus == 0.25
    resources = backend_config(EngineOptions(), config.client_num_gpus)["client_resources"]
    assert resources == {"num_cpus": 1.0, "num_gpus": 0.25}


def test_noise_drawn_on_the_cpu_comes_back_to_the_device_and_never_repeats() -> None:
    for name in DEVICES:
        rows = torch.zeros(4, 784, device=torch.device(name))
        a, b = sanitize(rows, 1.0, 1.0), sanitize(rows, 1.0, 1.0)
        assert a.values.device.type == name and a.values.dtype == rows.dtype
        assert not torch.equal(a.values, b.values)


def _query(trainer: GeneratorTrainer) -> RecordDict:
    (query,) = trainer.propose(1)
    return RecordDict({common.FAKES: common.encode_fakes(query.images, query.labels)})


@pytest.mark.parametrize("name", DEVICES)
def test_a_gswgan_step_end_to_end_on_the_device(tmp_path, name: str) -> None:
    config = RunConfig(
        run_dir=str(tmp_path), device=name, generator_width=4, critic_width=4, batch_size=8,
        critic_steps=2, warm_start_steps=2,
    )  # fmt: skip
    trainer = GeneratorTrainer(10, config.gswgan(), seed=0, device=resolve_device(name))
    assert next(trainer.generator.parameters()).device.type == name
    client = GSWGANSession(config, 0)
    assert client.device.type == name and client.critic.images.device.type == name
    assert next(client.critic.critic.parameters()).device.type == name
    client.warm_start(RecordDict())
    reply = client.answer(_query(trainer))
    gradient = reply[gswgan.SANITIZED][gswgan.GRADIENT].numpy()
    before = [p.detach().clone() for p in trainer.generator.parameters()]
    assert trainer.apply([torch.from_numpy(gradient)]) == 8
    after = list(trainer.generator.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, after, strict=True))
    assert trainer.sample(torch.arange(10)).device.type == "cpu"  # what scorers expect
    again = GSWGANSession(config, 0)  # the state on disk loads onto the device
    assert again.warm_started and next(again.critic.critic.parameters()).device.type == name


def test_sessions_ask_for_the_configured_device_teachers_for_the_cpu(tmp_path, monkeypatch) -> None:
    asked: list[str] = []

    def record(name: str) -> torch.device:
        asked.append(name)
        return torch.device("cpu")

    monkeypatch.setattr(critic_session, "resolve_device", record)
    config = RunConfig(run_dir=str(tmp_path), device="cuda", generator_width=4, critic_width=4)
    GSWGANSession(config, 0)
    CriticSession(config.with_updates(strategy="datalens"), 0)
    teacher_session(config.with_updates(strategy="pate-gan"), 0)
    assert asked == ["cuda", "cpu", "cpu"]


def test_critic_keeps_its_batch_sampling_rng_on_the_cpu() -> None:
    """Its state is saved with D_k, so a state written on a GPU machine loads on a CPU one."""
    critic = PrivateCritic(torch.zeros(3, 1, 28, 28), torch.zeros(3, dtype=torch.long), 10,
                           RunConfig(critic_width=4).gswgan(), seed=0, device="cpu")  # fmt: skip
    assert critic.rng.device.type == "cpu"
