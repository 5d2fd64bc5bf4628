"""Where a GS-WGAN step's time goes on this CPU: each part of one query, timed alone.

Usage: python benchmarks/profile_step.py --clients 1000 --repeats 30 \
           --overhead runs/overhead/overhead.json --out runs/profile
Each part runs ``--repeats`` times after one warm-up call; the table gives its median ms per
call, its calls per generator step (one client per step, n_dis critic steps) and its share of
the measured step. The Flower rows come from ``benchmarks/flower_overhead.py``'s JSON (m = 1):
what a Flower step costs beyond the parts timed here is the engine's round trip.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from fedgs.client.state_store import ClientStateStore
from fedgs.models.losses import _gradient_penalty, generator_upstream_gradient
from fedgs.privacy import PrivacyLedger
from fedgs.privacy.sanitizer import sanitize
from fedgs.protocols import common, gswgan
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for
from fedgs.server.checkpoint import LEDGER_NAME
from fedgs.training.critic import PrivateCritic
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.run_dir import write_atomic


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: first-call allocations and lazy initialisation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def profile(config: RunConfig, repeats: int, state_dir: Path) -> list[dict]:
    """Rows (part, side, ms per call, calls per step) for one client per step."""
    dataset = dataset_for(config)
    settings = config.gswgan()
    n_dis, b = settings.critic_steps, settings.batch_size
    trainer = GeneratorTrainer(dataset.num_classes, settings, seed=0)
    critic = PrivateCritic(*dataset.client_train(0), dataset.num_classes, settings, seed=0)
    query = trainer.propose(1)[0]
    trainer.apply([None])  # drop the pending graph: the parts below are timed alone
    fake, labels = query.images[-1], query.labels[-1]
    real, real_labels = critic._real_batch()
    grads = generator_upstream_gradient(critic.critic, fake, labels)
    sanitized = sanitize(grads, settings.clip_norm, settings.noise_multiplier)
    fakes_wire = common.encode_fakes(query.images, query.labels, config.wire_dtype)
    gradient_wire = gswgan.encode_gradient(sanitized, config.wire_dtype)
    store = ClientStateStore(state_dir)
    state = {"critic_state": critic.state_dict(), "ledger": PrivacyLedger().to_json()}
    store.save("client-0", state)

    def gradient_penalty() -> None:
        critic.optimizer.zero_grad(set_to_none=True)
        _gradient_penalty(critic.critic, real, fake, real_labels).backward()

    def answer_batch() -> torch.Tensor:
        return trainer.generator(*trainer.latent(b))

    def generator_backward() -> None:
        batch = answer_batch()
        batch.backward(sanitized.values.view_as(batch) / b)

    @torch.no_grad()
    def critic_only_batches() -> None:
        trainer.generator(*trainer.latent((n_dis - 1) * b))

    ledger = PrivacyLedger()
    clients = [f"writer-{k}" for k in range(dataset.num_clients)]
    for client in clients:
        ledger.record_query(client, settings.noise_multiplier, b)
    queried = iter(range(10**9))

    def ledger_record() -> None:
        ledger.record_query(clients[next(queried) % len(clients)], settings.noise_multiplier, b)
        ledger.record_step(1, dataset.num_clients, settings.noise_multiplier, b)

    generator_backward()
    parts: list[tuple[str, str, Callable[[], object], int]] = [
        ("critic step (WGAN-GP, Adam)", "client", lambda: critic._critic_step(fake, labels), n_dis),
        ("  of which gradient penalty (forward + double backward)", "client", gradient_penalty,
         n_dis),
        ("upstream gradient dD/dx", "client", lambda: generator_upstream_gradient(
            critic.critic, fake, labels), 1),
        ("sanitizer (clip + noise)", "client", lambda: sanitize(
            grads, settings.clip_norm, settings.noise_multiplier), 1),
        ("critic built (GSWGANSession, before its state is loaded)", "client", lambda:
         PrivateCritic(*dataset.client_train(0), dataset.num_classes, settings, seed=0), 1),
        ("client state load", "client", lambda: store.load("client-0"), 1),
        ("client state save (fsync)", "client", lambda: store.save("client-0", state), 1),
        ("decode fakes (validate)", "client", lambda: common.decode_fakes(
            fakes_wire, dataset.num_classes), 1),
        ("encode gradient", "client", lambda: gswgan.encode_gradient(
            sanitized, config.wire_dtype), 1),
        ("G forward of the n_dis - 1 critic-only batches (no graph)", "server",
         critic_only_batches, 1),
        ("G forward + backward of the answer batch (B rows)", "server", generator_backward, 1),
        ("  of which the forward", "server", answer_batch, 1),
        ("G Adam step", "server", trainer.optimizer.step, 1),
        ("G EMA update", "server", lambda: trainer.ema.update_parameters(trainer.generator), 1),
        ("encode fakes", "server", lambda: common.encode_fakes(
            query.images, query.labels, config.wire_dtype), 1),
        ("decode gradient (validate)", "server", lambda: gswgan.decode_gradient(
            gradient_wire, b), 1),
        ("ledger: record query and step", "server", ledger_record, 1),
        (f"ledger: run epsilon, max over {len(clients)} clients", "server", lambda:
         ledger.epsilon_untrusted_max(config.delta, config.accountant), 1),
        ("ledger: save (JSON, atomic)", "server", lambda: write_atomic(
            state_dir / LEDGER_NAME, ledger.to_json().encode()), 1),
    ]  # fmt: skip
    return [
        {"part": name, "side": side, "ms": median_ms(fn, repeats), "calls": calls}
        for name, side, fn, calls in parts
    ]


def flower_rows(overhead_json: Path) -> dict[str, float]:
    """Median s/step at m = 1 of the plain loop and both Flower paths, from the overhead run."""
    table = json.loads(overhead_json.read_text())["table"]
    return {r["path"]: r["s_per_step"] for r in table if r["m"] == 1}


def render(rows: list[dict], steps: dict[str, float]) -> str:
    measured = steps.get("flower")
    timed = sum(r["ms"] * r["calls"] for r in rows if not r["part"].startswith(" "))
    lines = [
        "| part | side | ms per call | calls per step | ms per step | share of Flower step |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]

    def share(ms: float) -> str:
        return f"{ms / (1000 * measured):.0%}" if measured else "-"

    for r in rows:
        per_step = r["ms"] * r["calls"]
        lines.append(
            f"| {r['part']} | {r['side']} | {r['ms']:.2f} | {r['calls']} | {per_step:.1f} | "
            f"{share(per_step)} |"
        )
    lines.append(f"| sum of the parts above | | | | {timed:.1f} | {share(timed)} |")
    if measured:
        rest = 1000 * measured - timed
        lines.append(
            f"| Flower round trip and the rest (measured step - parts) | engine | | 1 | "
            f"{rest:.1f} | {share(rest)} |"
        )
        for path, seconds in sorted(steps.items()):
            lines.append(f"| measured step: {path} (flower_overhead.py, m = 1) | | | | "
                         f"{1000 * seconds:.1f} | {share(1000 * seconds)} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--data-dir", default="../shared/data/mnist")
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--B", type=int, default=32)
    p.add_argument("--ndis", type=int, default=2)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--overhead", type=Path, help="overhead.json of flower_overhead.py")
    p.add_argument("--out", type=Path, default=Path("runs/profile"))
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    config = RunConfig(
        dataset=a.dataset, data_dir=a.data_dir, num_clients=a.clients, batch_size=a.B,
        critic_steps=a.ndis, generator_width=a.width, critic_width=a.width,
    )  # fmt: skip
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=a.out) as state_dir:
        rows = profile(config, a.repeats, Path(state_dir))
    steps = flower_rows(a.overhead) if a.overhead else {}
    load_after = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    result = {"rows": rows, "steps": steps, "load": [load_before, load_after]}
    (a.out / "profile.json").write_text(json.dumps(result, indent=1))
    print(render(rows, steps))
    print(f"load average before {load_before}, after {load_after}")


if __name__ == "__main__":
    main()
