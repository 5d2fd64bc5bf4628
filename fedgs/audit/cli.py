"""``fedgs audit``: a one-run empirical privacy audit of a mechanism, beside its accountant.

The run's settings come from a run-config file (``--config``: the keys of ``fedgs simulate``,
so the recipes work) and the options here, which override it; torch, the accountants and
matplotlib are imported by the handler only, so ``fedgs --help`` stays fast.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from fedgs.argtypes import positive

STRATEGIES = ("gswgan", "gswgan-secure", "fedavg-gan")
DEFAULT_CANARIES = {"gswgan": 1000, "gswgan-secure": 200, "fedavg-gan": 1000}
DEFAULT_DIMENSION = 16384
SECURE_MIN_COHORT = 3
_POPULATION = {"embedded": 50, "mnist": 1000}  # the loaders' client counts for num-clients 0
_SABOTAGES = ("noise-scaled-down", "fixed-seed-noise")  # fedgs.audit.sabotage.SABOTAGES

_DESCRIPTION = """\
Empirical privacy audit of one mechanism as fedgs runs it. Canary clients (random unit
directions at the clip norm, the worst case the accountant assumes) take part in an audit run
that calls the real mechanism functions with the run's noise, clip, batch size, cohort and
steps; the auditor sees every release (all iterates) and scores each canary by the summed
cosine of its direction with the releases. Printed and written to OUT/audit.json, with a plot of
the canaries' and the null directions' scores (OUT/audit.png):

  the accountant's epsilon for the same observation (threat model, accountant, delta, relation);
  the one-shot empirical estimate (Andrew et al., ICLR 2024), with a 95% bootstrap interval;
  the one-run lower bound (Steinke, Nasr and Jagielski, NeurIPS 2023) at 95% confidence.

An audit gives an estimate and a lower bound, never a guarantee. It exits 1 with "AUDIT
FAILED" when the lower bound, or the estimate's whole interval, exceeds the accountant's
epsilon. No GAN is trained and nothing is released: canaries are extra simulated clients of the
audit run only."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``audit`` subcommand."""
    parser = subparsers.add_parser(
        "audit",
        help="empirical privacy audit: canary clients, estimate and lower bound vs the accountant",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="gswgan",
        help="gswgan (local noise, untrusted server), gswgan-secure (secure aggregation) or "
        "fedavg-gan (DP-FedAvg, trusted server) (gswgan)",
    )
    # dest differs from "config": fedgs.cli would read the file as this command's defaults, and
    # a run config holds keys (run-dir, dataset, ...) that are not options here
    parser.add_argument(
        "--config",
        dest="run_config",
        metavar="FILE",
        help="a run-config TOML (a recipe of `fedgs simulate`) giving the run's settings",
    )
    parser.add_argument("--out", required=True, type=Path, help="folder for audit.json/.png")
    numbers = (
        ("--steps", int, "T generator steps or Fed-Avg rounds (run config: 200)"),
        ("--clients", int, "K clients (run config's num-clients; embedded data: 50)"),
        (
            "--clients-per-step",
            int,
            "m clients per step or cohort; fedavg-gan: expected clients per round "
            f"(gswgan: 1, gswgan-secure: {SECURE_MIN_COHORT}, fedavg-gan: 10)",
        ),
        ("--batch-size", int, "B rows per reply (gswgan; 32)"),
        ("--noise-multiplier", float, "sigma (gswgan: 1.07) or z (fedavg-gan: 0.01)"),
        ("--clip-norm", float, "C per row (gswgan: 1.0) or S per delta (fedavg-gan: 0.1)"),
        ("--delta", float, "delta of every epsilon (1e-5)"),
        ("--canaries", int, "canary clients (gswgan 1000, gswgan-secure 200, fedavg-gan 1000)"),
        (
            "--queries-per-canary",
            int,
            "replies (gswgan) or cohorts (gswgan-secure) each canary takes part in; default "
            "the run's expected count per client, ceil(T m / K)",
        ),
        (
            "--dimension",
            int,
            f"fedavg-gan: length of the released delta, a power of two >= 2 x canaries "
            f"({DEFAULT_DIMENSION}); every coordinate gets the same noise, so its privacy does "
            "not depend on it, only the time does",
        ),
    )
    for flag, kind, text in numbers:
        parser.add_argument(flag, type=positive(kind), help=text)
    parser.add_argument("--accountant", help="autodp-rdp (default) or dp-accounting-rdp")
    parser.add_argument(
        "--seed", type=int, default=0, help="the canaries' directions and coins (0)"
    )
    parser.add_argument(
        "--sabotage",
        choices=_SABOTAGES,
        help="TEST ONLY: audit a deliberately broken copy of the noise (a tenth of it, or a "
        "fixed seed the auditor knows and subtracts), to see the audit fail",
    )
    parser.set_defaults(handler=_run)


def _settings(args: argparse.Namespace) -> Any:
    """The RunConfig the audit run uses: the file's keys, then the options given here."""
    from fedgs import recipes
    from fedgs.run_config import RunConfig

    table = recipes.read(args.run_config) if args.run_config else {}
    fedavg = args.strategy == "fedavg-gan"
    table["strategy"] = "fedavg-gan" if fedavg else "gswgan"
    if args.strategy == "gswgan-secure":
        table["secure-aggregation"] = True
        table.setdefault("clients-per-step", SECURE_MIN_COHORT)
    prefix = "fedavg-" if fedavg else ""
    overrides = {
        "steps": args.steps,
        "num-clients": args.clients,
        "fedavg-clients-per-round" if fedavg else "clients-per-step": args.clients_per_step,
        "batch-size": args.batch_size,
        f"{prefix}noise-multiplier": args.noise_multiplier,
        f"{prefix}clip-norm": args.clip_norm,
        "delta": args.delta,
        "accountant": args.accountant,
    }
    table |= {key: value for key, value in overrides.items() if value is not None}
    return RunConfig.from_user_config(table)


def _population(config: Any) -> int:
    if config.num_clients:
        return config.num_clients
    if config.dataset in _POPULATION:
        return _POPULATION[config.dataset]
    raise ValueError(f"give --clients: dataset {config.dataset!r} has no fixed client count")


def audit(args: argparse.Namespace) -> tuple[dict[str, Any], Any, str]:
    """Run the audit the options describe: (result, observation, title)."""
    import numpy as np

    from fedgs.audit import runs
    from fedgs.audit.report import assess
    from fedgs.audit.sabotage import noise_known_to_auditor, sabotaged

    config = _settings(args)
    clients = _population(config)
    rng = np.random.default_rng(args.seed)
    canaries = args.canaries or DEFAULT_CANARIES[args.strategy]
    known = noise_known_to_auditor(args.sabotage)
    per_step = config.fedavg_clients_per_round if args.strategy == "fedavg-gan" else None
    per_step = per_step or config.clients_per_step
    if per_step > clients:
        raise ValueError(f"{per_step} clients per step of {clients} clients")
    queries = args.queries_per_canary or math.ceil(config.steps * per_step / clients)
    common = {"canaries": canaries, "delta": config.delta, "rng": rng, "known_noise": known}
    with sabotaged(args.sabotage):
        if args.strategy == "gswgan":
            observation = runs.audit_local(
                queries=queries,
                batch_size=config.batch_size,
                clip_norm=config.clip_norm,
                noise_multiplier=config.noise_multiplier,
                accountant=config.accountant,
                **common,
            )
            title = (
                f"GS-WGAN, local noise, sigma {config.noise_multiplier:g}, B {config.batch_size}"
            )
        elif args.strategy == "gswgan-secure":
            params = config.secure_noise().params
            observation = runs.audit_secure(
                steps=queries, batch_size=config.batch_size, params=params, **common
            )
            title = (
                f"GS-WGAN, secure aggregation, sigma {config.noise_multiplier:g}, "
                f"B {config.batch_size}, cohort {per_step}"
            )
        else:
            observation = runs.audit_fedavg(
                rounds=config.steps,
                clients_per_round=per_step,
                clients=clients,
                clip_norm=config.fedavg_clip_norm,
                noise_multiplier=config.fedavg_noise_multiplier,
                dimension=args.dimension or DEFAULT_DIMENSION,
                accountant=config.accountant,
                **common,
            )
            title = (
                f"Fed-Avg GAN, z {config.fedavg_noise_multiplier:g}, q {per_step}/{clients}, "
                f"{config.steps} rounds"
            )
    if args.sabotage:
        title += f" [SABOTAGED: {args.sabotage}]"
    result = assess(observation, config.delta, rng)
    result["settings"] = {
        "strategy": args.strategy,
        "steps": config.steps,
        "clients": clients,
        "clients_per_step": per_step,
        "contributions_per_canary": queries if args.strategy != "fedavg-gan" else None,
        "seed": args.seed,
        "sabotage": args.sabotage,
    }
    return result, observation, title


def _run(args: argparse.Namespace) -> int:
    from fedgs.audit.report import summary_text, write

    try:
        result, observation, title = audit(args)
    except ValueError as error:
        print(f"fedgs audit: {error}", file=sys.stderr)
        return 2
    print(summary_text(result, title))
    for path in write(result, observation, args.out, title):
        print(f"  wrote {path}")
    return 1 if result["verdict"] == "failed" else 0
