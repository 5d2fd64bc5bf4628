"""``fedgs debug-scenario``: the flipped-pixel debugging scenario as one command.

Only argparse and light constants here: the handler imports torch, Flower and the scenario.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from fedgs import recipes
from fedgs.data.names import DATASET_NAMES, LABEL_MODES
from fedgs.run_config import RunConfig, add_arguments, from_namespace
from fedgs.simulations.simulate import grpc_fork_handlers_off

# run-config keys the scenario sets itself (data of each group, output folders, seed)
_SCENARIO_OWNED = {
    "dataset",
    "data_dir",
    "labels",
    "num_clients",
    "run_dir",
    "state_dir",
    "resume",
    "min_nodes",
    "seed",
}
GAN_KEYS = tuple(f.name for f in fields(RunConfig) if f.name not in _SCENARIO_OWNED)
# What the scenario changes from `fedgs simulate`'s defaults, and why: the bug shows in the
# background, which G learns within ~100 steps when each private critic learns fast (a high
# critic rate and 5 critic steps per query instead of a warm start, which would cost every
# writer's critic steps up front). Measured on FEMNIST in results/log/debugging.md.
GAN_DEFAULTS = {
    "steps": 200,
    "warm_start_steps": 0,
    "critic_steps": 5,
    "lr_critic": 2e-3,
    "lr_generator": 5e-4,
    "eval_every": 0,  # the scenario draws its own samples at the end
}

DESCRIPTION = """\
The use case behind fedgs: a modeller suspects a pre-processing bug on some devices and may not
look at their data. This command injects such a bug (inverted pixels on a random fraction of the
writers) and runs the papers' procedure against the known ground truth:
  1. train a clean character classifier on writers held out from the federated population
     (FEMNIST: 36 classes, digits + case-merged letters; embedded/mnist: the 10 digits);
  2. invert all images of --bug-fraction of the other writers (seeded; ground truth in writers.csv);
  3. score each writer by the classifier's accuracy on its data; each writer releases one bit
     (accuracy at or below a threshold) by randomized response with --grouping-epsilon, and the
     writers who released "low" are the "suspected" group, the others "normal" (--grouping-epsilon
     0: the exact, unaccounted split by quantiles or given accuracies); a confusion table says
     how many of each really have the bug;
  4. train one private generator per group on Flower's simulation engine (GS-WGAN, or Fed-Avg GAN
     with --strategy fedavg-gan), same settings and steps;
  5. report the share of each generator's samples that look inverted (bright image border),
     checked on real images of known polarity, side-by-side sample grids in one PNG, the
     epsilon each generator cost with its threat model and, for GS-WGAN, each writer's
     end-to-end epsilon (grouping bit + its generator's queries; max over writers).
Outputs in --out: REPORT.md, summary.json, writers.csv, samples_side_by_side.png, the two group
datasets (data/) and the two generator runs (gan-suspected/, gan-normal/).
With no options: a first run on the embedded default data (synthetic writers, a few minutes)."""

EPILOG = """\
The generator options default to settings that learn the background polarity fast (steps 200,
no warm start, 5 critic steps per query, critic lr 2e-3, generator lr 5e-4; noise multiplier 1.07
as in the paper). Real FEMNIST writers (see results/log/debugging.md for figures and timings):
  fedgs debug-scenario --dataset femnist --data-dir ../shared/data/femnist_leaf \\
      --ray-cpus 1 --threads 1 --out runs/debug-femnist
Those defaults spend epsilon ~130-150 per generator. Within untrusted-server epsilon 10 end to
end per writer (GS-WGAN: grouping bit + generator; measured in results/log/debugging.md):
  fedgs debug-scenario --config recipes/debug-femnist-e10.toml \\
      --data-dir ../shared/data/femnist_leaf --out runs/debug-eps10
With a private grouping (the default) and GS-WGAN, --target-epsilon is end to end: each
generator's own target is what the grouping bit leaves. Fed-Avg GAN's generator figure is
trusted-server (add/remove-one) and is stated apart from the grouping's; there the target bounds
the generator alone. --grouping-epsilon 0 restores the exact grouping, NOT private end to end."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "debug-scenario",
        help="the flipped-pixel debugging scenario: find buggy devices with private generators",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", choices=DATASET_NAMES, default="embedded", help="(%(default)s)")
    data.add_argument("--data-dir", help="LEAF FEMNIST folder (femnist) or IDX folder (mnist)")
    data.add_argument(
        "--labels", choices=LABEL_MODES, help="default: merged36 for femnist, digits otherwise"
    )
    data.add_argument(
        "--num-clients", type=int, help="embedded/mnist: virtual writers (loader default)"
    )
    scenario = parser.add_argument_group("scenario")
    scenario.add_argument(
        "--bug-fraction",
        type=float,
        default=0.5,
        help="share of the population's writers whose images are inverted (%(default)s)",
    )
    scenario.add_argument(
        "--holdout-fraction",
        type=float,
        default=0.2,
        help="share of writers held out to train the clean classifier (%(default)s)",
    )
    scenario.add_argument(
        "--grouping-epsilon",
        type=float,
        default=2.0,
        help="epsilon of each writer's randomized-response bit that forms the groups; 0 = the "
        "exact grouping by accuracy quantiles, NOT private end to end (%(default)s)",
    )
    scenario.add_argument(
        "--suspect-quantile",
        type=float,
        default=0.4,
        help="exact grouping: writers at or below this accuracy quantile are suspected "
        "(%(default)s)",
    )
    scenario.add_argument(
        "--normal-quantile",
        type=float,
        default=0.6,
        help="exact grouping: writers at or above this accuracy quantile are normal (%(default)s)",
    )
    scenario.add_argument(
        "--suspect-max-accuracy",
        type=float,
        help="suspected bound as an accuracy (papers: 0.882); private grouping: the bit's "
        "threshold (default: midway between the classifier's accuracy on clean and inverted "
        "held-out images)",
    )
    scenario.add_argument(
        "--normal-min-accuracy",
        type=float,
        help="exact grouping: normal bound as an accuracy instead of a quantile (papers: 0.939)",
    )
    scenario.add_argument(
        "--classifier-epochs", type=int, default=3, help="classifier epochs (%(default)s)"
    )
    scenario.add_argument(
        "--detect-samples",
        type=int,
        default=1000,
        help="generated samples per group for the detection statistic (%(default)s)",
    )
    scenario.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the held-out writers, the bug and the generator runs (%(default)s)",
    )
    scenario.add_argument(
        "--out", default="runs/debug-scenario", help="output folder, new or empty (%(default)s)"
    )
    scenario.add_argument(
        "--threads", type=int, default=0, help="torch threads of this process; 0 = torch default"
    )
    engine = add_arguments(parser, GAN_KEYS)["engine"]  # the run config's groups, by concern
    parser.set_defaults(**GAN_DEFAULTS)
    engine.add_argument("--ray-cpus", type=int, default=0, help="CPUs Ray may use; 0 = all")
    engine.add_argument(
        "--cpus-per-client", type=float, default=1.0, help="Ray CPUs per virtual client (1.0)"
    )
    engine.add_argument(
        "--object-store-mb", type=int, default=512, help="cap on Ray's object store (512)"
    )
    recipes.add_option(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    grpc_fork_handlers_off()  # before the imports below load gRPC
    import torch

    from fedgs.debugging.report import end_to_end_line
    from fedgs.simulations.cli import exit_stopped
    from fedgs.simulations.debug_scenario import ScenarioError, ScenarioOptions, run_scenario
    from fedgs.simulations.simulate import EngineOptions
    from fedgs.stopping import StopRequested

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        gan = from_namespace(args)
    except (TypeError, ValueError) as error:
        print(f"fedgs debug-scenario: error: {error}")
        return 2
    options = ScenarioOptions(
        dataset=args.dataset,
        data_dir=args.data_dir,
        labels=args.labels,
        num_clients=args.num_clients,
        bug_fraction=args.bug_fraction,
        holdout_fraction=args.holdout_fraction,
        suspect_quantile=args.suspect_quantile,
        normal_quantile=args.normal_quantile,
        suspect_max_accuracy=args.suspect_max_accuracy,
        normal_min_accuracy=args.normal_min_accuracy,
        classifier_epochs=args.classifier_epochs,
        detect_samples=args.detect_samples,
        grouping_epsilon=args.grouping_epsilon,
        seed=args.seed,
        out=args.out,
    )
    engine = EngineOptions(
        cpus_per_client=args.cpus_per_client,
        ray_cpus=args.ray_cpus,
        object_store_mb=args.object_store_mb,
    )
    try:
        summary = run_scenario(options, gan, engine)
    except ScenarioError as error:
        print(f"fedgs debug-scenario: error: {error}")
        return 2
    except StopRequested as stop:  # in a group's generator run; the scenario has no resume
        return exit_stopped("fedgs debug-scenario", f"{stop}; run it again with a new --out")
    detection = summary["detection"]
    print(
        f"inverted share of samples: suspected {detection['generated']['suspected']:.1%}, "
        f"normal {detection['generated']['normal']:.1%} ({detection['ratio']}; bar "
        f"{detection['bar']:g}x {'met' if detection['bar_met'] else 'NOT met'})"
    )
    print(f"margin rule: {detection['margin_rule']}")
    print(end_to_end_line(summary["end_to_end"]))
    print(f"report: {args.out}/REPORT.md  grid: {summary['grid']}")
    return 0
