"""The flipped-pixel debugging scenario end to end (issue 5).

A modeller suspects a pre-processing bug on some devices and cannot look at their data. Here the
bug is injected on purpose, so the whole procedure can be checked against the ground truth:

1. a classifier is trained on clean data of writers held out from the federated population;
2. all images of a seeded fraction of the population's writers are inverted (the bug);
3. every writer is scored by the classifier's accuracy on its data and the writers are split into
   a suspected (low accuracy) and a normal (high accuracy) group: by default each writer releases
   one bit (accuracy below a threshold) by randomized response and the server groups the bits
   (``fedgs.debugging.grouping``); ``grouping_epsilon`` 0 keeps the exact, unaccounted split;
4. one private generator is trained on each group with the real ServerApp and ClientApp on
   Flower's simulation engine (each group is a `saved` dataset folder the clients load);
5. samples of both generators are compared: side by side, and by the share that looks inverted.

Everything lands in one output folder; `run_scenario` returns the numbers it wrote.
"""

from __future__ import annotations

import csv
import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedgs.algorithms import algorithm
from fedgs.data import DataError, FederatedDataset, load_federated
from fedgs.data.federated import ClientArrays, read_client_arrays, save_federated
from fedgs.debugging.bug import choose_buggy
from fedgs.debugging.detection import (
    BORDER,
    MARGIN,
    frame_profile,
    inverted_share,
    legibility,
    margin_rule,
)
from fedgs.debugging.grouping import (
    Release,
    end_to_end_epsilons,
    generator_target,
    groups_from_release,
    release_bits,
    truth_probability,
)
from fedgs.debugging.report import (
    grouping_privacy,
    markdown_report,
    privacy_digest,
    ratio_text,
    save_side_by_side,
)
from fedgs.debugging.scoring import (
    NORMAL,
    SUSPECTED,
    assign_groups,
    choose_thresholds,
    confusion,
    confusion_markdown,
    heldout_threshold,
    writer_accuracies,
)
from fedgs.debugging.writers import holdout_images, select_writers, split_holdout
from fedgs.evaluation.generator_loader import load_generator
from fedgs.metrics.classifier import load_or_train_classifier
from fedgs.metrics.controls import untrained_sampler
from fedgs.privacy.events import event_to_json, gswgan_query_event, randomized_response_event
from fedgs.privacy.ledger import PrivacyLedger
from fedgs.privacy.report import load_privacy
from fedgs.privacy.threat_models import REPLACE_ONE, UNTRUSTED_SERVER
from fedgs.run_config import RunConfig
from fedgs.server.checkpoint import LEDGER_NAME
from fedgs.simulations.simulate import EngineOptions, run_simulation

DETECTION_BAR = 3.0  # the bar: suspected inverted share >= 3x the normal group's
GAN_GROUPS = (SUSPECTED, NORMAL)
SANITY_IMAGES = 2000
GRID_PER_CLASS = 8
# the run-config key of each strategy's noise setting, named in the report


class ScenarioError(ValueError):
    """The scenario cannot run with these options or this data; the message says why."""


@dataclass(frozen=True)
class ScenarioOptions:
    """What the scenario does besides training the generators (those settings are a RunConfig)."""

    dataset: str = "embedded"
    data_dir: str | None = None
    labels: str | None = None  # None: merged36 for femnist (the papers' 36 classes), else digits
    num_clients: int | None = None  # embedded / mnist only
    bug_fraction: float = 0.5
    holdout_fraction: float = 0.2
    suspect_quantile: float = 0.4
    normal_quantile: float = 0.6
    suspect_max_accuracy: float | None = None
    normal_min_accuracy: float | None = None
    classifier_epochs: int = 3
    detect_samples: int = 1000
    # epsilon of each writer's randomized-response bit; 0: the exact, unaccounted grouping
    grouping_epsilon: float = 2.0
    seed: int = 0
    out: str = "runs/debug-scenario"

    @property
    def label_mode(self) -> str:
        if self.labels is not None:
            return self.labels
        return "merged36" if self.dataset == "femnist" else "digits"


def _to_images(pixels: np.ndarray) -> torch.Tensor:
    """Stored uint8 rows as [-1, 1] float images, the way `FederatedDataset` serves them."""
    return torch.from_numpy(pixels.astype(np.float32)).view(-1, 1, 28, 28).div_(127.5).sub_(1.0)


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if values.size else None


def _prepare_out(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        raise ScenarioError(
            f"{out} is not empty; a scenario writes a fresh folder (choose another --out)"
        )
    out.mkdir(parents=True, exist_ok=True)


def _load(options: ScenarioOptions) -> tuple[FederatedDataset, ClientArrays]:
    try:
        ds = load_federated(
            options.dataset,
            options.data_dir,
            labels=options.label_mode,
            num_clients=options.num_clients,
            seed=options.seed,
        )
    except DataError as error:
        raise ScenarioError(str(error)) from None
    arrays, _ = read_client_arrays(ds)
    return ds, arrays


def _classifier(
    ds: FederatedDataset, arrays: ClientArrays, holdout: np.ndarray, epochs: int
) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor, str]:
    """The clean classifier of step 1, cached per (dataset, held-out writers, epochs)."""
    pixels, labels = holdout_images(arrays, holdout)
    images, targets = _to_images(pixels), torch.from_numpy(labels)
    key = f"{ds.fingerprint}|debug-holdout|{','.join(map(str, holdout.tolist()))}"
    fingerprint = hashlib.sha256(key.encode()).hexdigest()
    model = load_or_train_classifier(fingerprint, images, targets, ds.num_classes, epochs=epochs)
    return model, images, targets, fingerprint


def _write_writers_csv(
    path: Path,
    arrays: ClientArrays,
    holdout: np.ndarray,
    population: np.ndarray,
    buggy: np.ndarray,
    accuracies: np.ndarray,
    groups: np.ndarray,
    release: Release | None,
    end_to_end: dict[str, float],
) -> None:
    """The ground truth per writer (bug, accuracy, its bit before the coin: the server sees none
    of them) next to what the modeller saw: the released bit (private grouping) or the accuracy
    (exact grouping), the group, and the writer's end-to-end epsilon where there is one."""
    columns = ["writer", "role", "bug", "train_images", "accuracy", "true_low", "released_low"]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*columns, "group", "end_to_end_epsilon"])
        for k in holdout.tolist():
            count = int(arrays.train_counts[k])
            writer.writerow([arrays.client_ids[k], "classifier", 0, count, "", "", "", "", ""])
        for i, k in enumerate(population.tolist()):
            client = arrays.client_ids[k]
            row = [client, "population", int(buggy[i]), int(arrays.train_counts[k])]
            bits = (
                ["", ""]
                if release is None
                else [int(release.true_low[i]), int(release.released_low[i])]
            )
            epsilon = end_to_end.get(client)
            tail = [groups[i], "" if epsilon is None else f"{epsilon:.6f}"]
            writer.writerow([*row, f"{accuracies[i]:.6f}", *bits, *tail])


def _train_group(
    name: str,
    arrays: ClientArrays,
    info: dict[str, Any],
    gan: RunConfig,
    out: Path,
    engine: EngineOptions,
) -> Path:
    """Write the group as a `saved` dataset and train one generator on it through Flower."""
    folder = out / "data" / name
    num_classes = int(info["num_classes"])
    save_federated(folder, f"{info['source']}-debug-{name}", num_classes, arrays, info)
    config = gan.with_updates(
        dataset="saved",
        data_dir=str(folder.resolve()),
        labels=info["labels"],
        num_clients=0,
        run_dir=str((out / f"gan-{name}").resolve()),
        state_dir="",
        resume=False,
        min_nodes=0,
    )
    print(f"  {name}: {len(arrays.client_ids)} writers, {len(arrays.train_labels)} images")
    run_dir = run_simulation(config, engine)
    if not (run_dir / "privacy.json").exists() or not (run_dir / "generator.pt").exists():
        raise ScenarioError(f"the {name} group's run ended without results (see {run_dir})")
    return run_dir


def _balanced_labels(num_classes: int, count: int) -> torch.Tensor:
    return torch.arange(num_classes).repeat(-(-count // num_classes))[:count]


def _composes(gan: RunConfig) -> bool:
    """Whether the generator's per-writer charges compose with the grouping bit into one figure:
    GS-WGAN with local noise is, like the bit, untrusted-server and replace-one writer. Fed-Avg
    GAN's figure is trusted-server and add/remove-one, so both are stated apart instead."""
    return gan.strategy == "gswgan" and not gan.secure_aggregation


def _generator_plan(gan: RunConfig, options: ScenarioOptions) -> tuple[RunConfig, dict[str, Any]]:
    """The generators' settings: with a private grouping that composes, ``--target-epsilon`` is
    end to end and each generator gets the share the grouping bit leaves (``generator_target``);
    otherwise it bounds the generator alone."""
    target = gan.target_epsilon if gan.target_epsilon > 0 else None
    plan = {"target": target, "generator_target": target, "queries_per_writer": None}
    if options.grouping_epsilon <= 0 or target is None or not _composes(gan):
        return gan, plan
    query = gswgan_query_event(gan.noise_multiplier, gan.batch_size)
    try:
        own, queries = generator_target(
            target, options.grouping_epsilon, query, gan.delta, gan.accountant
        )
    except ValueError as error:
        raise ScenarioError(str(error)) from None
    plan |= {"generator_target": own, "queries_per_writer": queries}
    return gan.with_updates(target_epsilon=own), plan


def _group(
    options: ScenarioOptions,
    accuracies: np.ndarray,
    model: torch.nn.Module,
    sanity_x: torch.Tensor,
    sanity_y: torch.Tensor,
) -> tuple[np.ndarray, Release | None, dict[str, Any]]:
    """Step 3's groups, the private release (None for the exact grouping) and its thresholds.
    Private: one public threshold (given, or from the held-out writers: quantiles of the
    population's accuracies would themselves be an unaccounted release)."""
    if options.grouping_epsilon <= 0:
        thresholds = choose_thresholds(
            accuracies,
            options.suspect_quantile,
            options.normal_quantile,
            options.suspect_max_accuracy,
            options.normal_min_accuracy,
        )
        return assign_groups(accuracies, thresholds), None, asdict(thresholds)
    if options.normal_min_accuracy is not None:
        raise ValueError(
            "a private grouping releases one bit per writer, so one threshold decides: give "
            "--suspect-max-accuracy only (or --grouping-epsilon 0 for two bounds)"
        )
    threshold = options.suspect_max_accuracy
    source = "suspected bound given"
    if threshold is None:
        threshold = heldout_threshold(model, sanity_x, sanity_y)
        source = "midway between the classifier's accuracy on clean and inverted held-out images"
    release = release_bits(accuracies, threshold, options.grouping_epsilon)
    groups = groups_from_release(release.released_low)
    return groups, release, {"suspect_max": threshold, "normal_min": None, "source": source}


def _grouping_block(release: Release | None, buggy: np.ndarray) -> dict[str, Any]:
    """summary.json's account of the grouping release (flips: the ground truth's, not the
    server's, knowledge)."""
    if release is None:
        return {"mechanism": "exact accuracies, no noise", "epsilon": None}
    flipped = release.flipped
    return {
        "mechanism": "randomized response on each writer's thresholded accuracy",
        "epsilon": release.epsilon,
        "truth_probability": truth_probability(release.epsilon),
        "threshold": release.threshold,
        "event": event_to_json(randomized_response_event(release.epsilon)),
        "threat_model": UNTRUSTED_SERVER,
        "neighbouring": REPLACE_ONE,
        "writers": int(release.true_low.size),
        "released_low": int(release.released_low.sum()),
        "true_low": int(release.true_low.sum()),
        "flipped": int(flipped.sum()),
        "flipped_with_bug": int((flipped & buggy).sum()),
        "flipped_without_bug": int((flipped & ~buggy).sum()),
    }


def _end_to_end(
    run_dirs: dict[str, Path],
    group_arrays: dict[str, ClientArrays],
    gan: RunConfig,
    options: ScenarioOptions,
    plan: dict[str, Any],
) -> tuple[dict[str, float], dict[str, Any]]:
    """Writer -> end-to-end epsilon (grouping bit + its charges in its group's generator, by the
    run's accountant), and the summary's block with the maximum over writers."""
    block: dict[str, Any] = {
        "epsilon": None,
        "grouping_epsilon": options.grouping_epsilon or None,
        "delta": gan.delta,
        "accountant": gan.accountant,
    } | plan
    if options.grouping_epsilon <= 0:
        return {}, block | {"note": "exact grouping: NOT private end to end"}
    if not _composes(gan):
        note = (
            f"not composed: the grouping bit is {UNTRUSTED_SERVER}, {REPLACE_ONE}; the "
            f"{gan.strategy} generator's epsilon has its own threat model and relation (section "
            "2); --target-epsilon bounds the generator alone"
        )
        return {}, block | {"note": note}
    per_writer: dict[str, float] = {}
    per_group: dict[str, float] = {}
    for name in GAN_GROUPS:
        ledger = PrivacyLedger.from_json((run_dirs[name] / LEDGER_NAME).read_text())
        signatures = {w: ledger.signature(w, worst=True) for w in group_arrays[name].client_ids}
        epsilons = end_to_end_epsilons(
            signatures, options.grouping_epsilon, gan.delta, gan.accountant
        )
        per_writer |= epsilons
        per_group[name] = max(epsilons.values())
    worst = max(sorted(per_writer), key=per_writer.__getitem__)
    return per_writer, block | {
        "epsilon": per_writer[worst],
        "writer": worst,
        "per_group": per_group,
        "threat_model": UNTRUSTED_SERVER,
        "neighbouring": REPLACE_ONE,
        "note": None,
    }


def run_scenario(options: ScenarioOptions, gan: RunConfig, engine: EngineOptions) -> dict:
    """Steps 1-5 into ``options.out``; returns the summary also written as summary.json."""
    if options.detect_samples < 1 or options.classifier_epochs < 1:
        raise ScenarioError("--detect-samples and --classifier-epochs must be at least 1")
    out = Path(options.out)
    _prepare_out(out)
    seconds: dict[str, float] = {}
    started = time.perf_counter()

    print("[1/5] data and the clean classifier on held-out writers")
    ds, arrays = _load(options)
    try:
        holdout, population = split_holdout(
            len(arrays.client_ids), options.holdout_fraction, options.seed
        )
    except ValueError as error:
        raise ScenarioError(str(error)) from None
    model, holdout_x, holdout_y, classifier_key = _classifier(
        ds, arrays, holdout, options.classifier_epochs
    )
    pick = torch.randperm(
        holdout_x.shape[0], generator=torch.Generator().manual_seed(options.seed)
    )[:SANITY_IMAGES]
    seconds["data_and_classifier"] = time.perf_counter() - started

    print("[2/5] injecting the bug")
    try:
        buggy = choose_buggy(len(population), options.bug_fraction, options.seed)
    except ValueError as error:
        raise ScenarioError(str(error)) from None
    pop = select_writers(arrays, population, invert=buggy)

    print("[3/5] scoring writers and splitting them into groups")
    accuracies = writer_accuracies(
        model,
        _to_images(pop.train_pixels),
        torch.from_numpy(pop.train_labels),
        pop.train_counts,
    )
    try:
        groups, release, thresholds = _group(
            options, accuracies, model, holdout_x[pick], holdout_y[pick]
        )
    except ValueError as error:
        raise ScenarioError(str(error)) from None
    table = confusion(groups, buggy)
    print(confusion_markdown(table))
    grouping = _grouping_block(release, buggy)
    if release is not None:
        print(
            f"  grouping: randomized response, epsilon {release.epsilon:g}; "
            f"{grouping['flipped']} of {grouping['writers']} bits flipped (ground truth)"
        )
    gan, plan = _generator_plan(gan, options)

    print(f"[4/5] one private generator per group ({gan.strategy}, {gan.steps} steps each)")
    group_arrays, run_dirs, privacy = {}, {}, {}
    for name in GAN_GROUPS:
        t0 = time.perf_counter()
        group_arrays[name] = select_writers(pop, np.flatnonzero(groups == name))
        info = {
            "source": ds.name,
            "source_fingerprint": ds.fingerprint,
            "labels": options.label_mode,
            "num_classes": ds.num_classes,
            "group": name,
            "writers_with_bug": table[name]["with bug"],
        }
        run_dirs[name] = _train_group(name, group_arrays[name], info, gan, out, engine)
        privacy[name] = privacy_digest(load_privacy(run_dirs[name] / "privacy.json"))
        seconds[f"gan_{name}"] = time.perf_counter() - t0

    per_writer, end_to_end = _end_to_end(run_dirs, group_arrays, gan, options, plan)
    _write_writers_csv(
        out / "writers.csv",
        arrays,
        holdout,
        population,
        buggy,
        accuracies,
        groups,
        release,
        per_writer,
    )

    print("[5/5] detection statistic, sample grids and report")
    labels = _balanced_labels(ds.num_classes, options.detect_samples)
    grid_labels = torch.arange(ds.num_classes).repeat_interleave(GRID_PER_CLASS)
    generated, profiles, legible, panels = {}, {}, {}, []
    for name in GAN_GROUPS:
        generator = load_generator(run_dirs[name])
        samples = generator.sample(labels, seed=options.seed)
        generated[name] = inverted_share(samples)
        profiles[name] = frame_profile(samples)
        legible[name] = legibility(model, samples, labels)
        panels.append(
            (
                f"{name}: {table[name]['total']} writers, {table[name]['with bug']} with bug\n"
                f"inverted share of samples {100 * generated[name]:.1f}%",
                generator.sample(grid_labels, seed=options.seed + 1),
            )
        )
    grid = save_side_by_side(
        panels, ds.num_classes, GRID_PER_CLASS, out / "samples_side_by_side.png"
    )
    ratio_ok = (
        generated[SUSPECTED] > 0
        if generated[NORMAL] == 0
        else generated[SUSPECTED] >= DETECTION_BAR * generated[NORMAL]
    )
    noise_key = algorithm(gan.strategy).noise_key
    untrained = {
        f"untrained generator, seed {seed}": frame_profile(
            untrained_sampler(ds.num_classes, gan.generator_width, seed=seed)(labels)
        )
        for seed in (0, 1)
    }
    summary = {
        "seed": options.seed,
        "options": asdict(options),
        "data": {
            "dataset": ds.name,
            "labels": options.label_mode,
            "num_classes": ds.num_classes,
            "fingerprint": ds.fingerprint,
            "writers": len(arrays.client_ids),
            "holdout_writers": len(holdout),
            "population_writers": len(population),
            "buggy_writers": int(buggy.sum()),
            "bug_fraction": options.bug_fraction,
        },
        "classifier": {
            "images": int(holdout_x.shape[0]),
            "epochs": options.classifier_epochs,
            "cache_key": classifier_key,
            "median_accuracy_with_bug": _median(accuracies[buggy]),
            "median_accuracy_without_bug": _median(accuracies[~buggy]),
        },
        "split": {
            "thresholds": thresholds,
            "confusion": table,
            "confusion_markdown": confusion_markdown(table),
            "grouping": grouping,
            "privacy": grouping_privacy(grouping["epsilon"]),
        },
        "end_to_end": end_to_end,
        "gan": {
            "strategy": gan.strategy,
            "steps": gan.steps,
            "noise": {noise_key: gan.to_user_config()[noise_key]},
            "batch_size": gan.batch_size,
            "run_dirs": {name: str(path) for name, path in run_dirs.items()},
            "config": gan.to_user_config(),
        },
        "privacy": privacy,
        "detection": {
            "border": BORDER,
            "samples": options.detect_samples,
            "generated": generated,
            "real_group": {
                name: inverted_share(_to_images(group_arrays[name].train_pixels))
                for name in GAN_GROUPS
            },
            "sanity": {
                "clean": inverted_share(holdout_x[pick]),
                "inverted": inverted_share(-holdout_x[pick]),
            },
            "margin": MARGIN,
            "profile": profiles,
            "untrained": untrained,
            "margin_rule": margin_rule(
                profiles[SUSPECTED], profiles[NORMAL], list(untrained.values())
            ),
            "legibility": legible,
            "ratio": ratio_text(generated[SUSPECTED], generated[NORMAL]),
            "bar": DETECTION_BAR,
            "bar_met": bool(ratio_ok),
        },
        "grid": str(grid),
        "seconds": seconds | {"total": time.perf_counter() - started},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "REPORT.md").write_text(markdown_report(summary))
    return summary
