"""GS-WGAN in one process, no Flower: every client's critic lives in this process.

This is the centralized setting of the paper (data cut into K subsets, one critic each) and the
plain-PyTorch reference the Flower path is benchmarked against. The privacy bookkeeping is the
same as in the federated runner: one ledger entry per answered query.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from fedgs.data import FederatedDataset
from fedgs.device import resolve_device
from fedgs.metrics import GeneratorScores, save_class_grid
from fedgs.metrics.evaluator import GeneratorEvaluator
from fedgs.privacy import PrivacyLedger, get_accountant
from fedgs.privacy.client_sampling import ClientSampling
from fedgs.training.critic import PrivateCritic
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.hparams import GSWGANConfig
from fedgs.training.run_dir import RunDirectory

_METRIC_COLUMNS = (  # nothing computed from a client's data but the accounted release
    "step",
    "seconds",
    "epsilon_untrusted",
    "inception_score",
    "fid_domain",
    "label_agreement",
    "num_samples",
)


@dataclass(frozen=True)
class LocalRunOptions:
    steps: int = 200
    warm_start_steps: int = 20
    clients_per_step: int = 1
    eval_every: int = 100
    eval_samples: int = 1000
    delta: float = 1e-5
    accountant: str = "autodp-rdp"
    seed: int = 0
    sampling_seed: int = -1  # -1: secret (ClientSampling); a seed voids the trusted-sampler figure
    device: str = "auto"


@dataclass(frozen=True)
class LocalRunResult:
    steps: int
    initial_scores: GeneratorScores | None  # None when evaluation is off (eval_every = 0)
    final_scores: GeneratorScores | None
    run_dir: Path


def _sample_grid(trainer: GeneratorTrainer, run_dir: RunDirectory, step: int) -> Path:
    return save_class_grid(
        trainer.sample, trainer.num_classes, run_dir.samples / f"step_{step:06d}.png"
    )


def run_local_gswgan(
    dataset: FederatedDataset,
    config: GSWGANConfig,
    options: LocalRunOptions,
    out_dir: str | Path,
    settings: Mapping[str, Any] | None = None,
) -> LocalRunResult:
    """Warm-start every client's critic, then run ``options.steps`` private generator steps.

    ``settings`` (run-config keys, hyphenated) are recorded in config.json next to the runner's
    own blocks, so ``fedgs evaluate`` can reload the run's data (its folder and label mode).
    """
    if options.clients_per_step > dataset.num_clients:
        raise ValueError(
            f"clients per step ({options.clients_per_step}) exceeds clients ({dataset.num_clients})"
        )
    run_dir = RunDirectory(out_dir)
    run_dir.write_json(
        run_dir.config_json,
        dict(settings or {})
        | {
            "runner": "local",
            "dataset": dataset.name,
            "num_clients": dataset.num_clients,
            "gswgan": config.to_dict(),
            "options": asdict(options),
        },
    )
    accountant = get_accountant(options.accountant)
    evaluator = (
        GeneratorEvaluator.for_dataset(dataset, options.eval_samples)
        if options.eval_every > 0
        else None
    )
    device = resolve_device(options.device)
    trainer = GeneratorTrainer(dataset.num_classes, config, seed=options.seed, device=device)
    initial_scores = evaluator.score(trainer.sample) if evaluator else None

    critics = []
    for k in tqdm(range(dataset.num_clients), desc="warm start", unit="client"):
        critic = PrivateCritic(
            *dataset.client_train(k), dataset.num_classes, config, options.seed + k, device
        )
        critic.warm_start(options.warm_start_steps)
        critics.append(critic)

    ledger = PrivacyLedger()
    sampling = ClientSampling(options.sampling_seed)
    choose = sampling.generator()
    scores = initial_scores
    started = time.perf_counter()
    with tqdm(total=options.steps, desc="GS-WGAN", unit="step") as bar:
        for step in range(1, options.steps + 1):
            chosen = choose.choice(dataset.num_clients, options.clients_per_step, replace=False)
            queries = trainer.propose(len(chosen), [dataset.client_ids[k] for k in chosen])
            replies = []
            for k, query in zip(chosen.tolist(), queries, strict=True):
                critics[k].train_on(
                    list(zip(query.images, query.labels, strict=True)), step, config.critic_steps
                )
                replies.append(critics[k].answer(query.images[-1], query.labels[-1]).values)
                ledger.record_query(
                    dataset.client_ids[k], config.noise_multiplier, config.batch_size
                )
            ledger.record_step(
                len(chosen), dataset.num_clients, config.noise_multiplier, config.batch_size
            )
            trainer.apply(replies)
            epsilon, _ = ledger.epsilon_untrusted_max(options.delta, accountant)
            row = dict.fromkeys(_METRIC_COLUMNS) | {
                "step": step,
                "seconds": time.perf_counter() - started,
                "epsilon_untrusted": epsilon,
            }
            if evaluator and (step % options.eval_every == 0 or step == options.steps):
                scores = evaluator.score(trainer.sample)
                _sample_grid(trainer, run_dir, step)
                row |= scores.to_dict()
                bar.set_postfix(
                    {
                        f"eps(untrusted,{accountant.name},delta={options.delta:g},replace-one)": (
                            f"{epsilon:.1f}"
                        )
                    },
                    fid=f"{scores.fid_domain:.1f}",
                    agree=f"{scores.label_agreement:.2f}",
                )
            run_dir.append_metrics(row)
            bar.update()

    run_dir.write_privacy_report(
        "gswgan",
        ledger.summary(options.delta, options.accountant),
        {
            "steps": options.steps,
            "noise_multiplier": config.noise_multiplier,
            "batch_size": config.batch_size,
        },
        sampling.report(),
    )
    run_dir.save_generator(
        "gswgan",
        trainer.generator,
        dataset.num_classes,
        {"gswgan": config.to_dict()},
        ema=trainer.ema.module,
    )
    return LocalRunResult(
        steps=options.steps,
        initial_scores=initial_scores,
        final_scores=scores,
        run_dir=run_dir.root,
    )
