"""``fedgs privacy``: the epsilon of a planned run, under each threat model, or the noise for a
target epsilon.

The accounting libraries take seconds to import, so they are imported by the handler only,
not when the ``fedgs`` parser is built.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from fedgs.argtypes import number, positive
from fedgs.privacy.client_sampling import RULES, UNIFORM

_DESCRIPTION = (
    "User-level privacy (one client = one writer) of a GS-WGAN run or a DP-MERF release under "
    "local noise, of a Fed-Avg GAN run under a trusted server, or of a GS-WGAN, Fed-Avg GAN or "
    "DP-MERF run under secure aggregation."
)
_EPILOG = """\
threat models:
  untrusted-server  The server knows whom it asked, so no amplification by subsampling: a
                    client's epsilon composes exactly the queries it answered. The run's
                    guarantee is the most-queried client's epsilon (simulated with --seed);
                    the expected-count figure is what the GS-WGAN paper reports.
  trusted-sampler   Assumes the server samples M of K clients uniformly per step and keeps the
                    choice secret: amplification by subsampling with q = M/K. A separate,
                    weaker claim; never the untrusted-server guarantee. Reported as the
                    tightest valid bound: the amplified RDP bound of each RDP accountant, or
                    the untrusted-server figure when that is smaller (it holds here too).
  paper             The paper's own figure, always with autodp RDP: federated = untrusted
                    server at the expected count T*M/K; centralized = per-sample subsampled
                    composition (q = 1/K, B*T times). For --setting centralized the
                    trusted-sampler figure is the shared-subsampling-per-step one.
planning: --target-epsilon alone calibrates sigma for --steps; with --noise-multiplier it
prints the most queries one client may answer at B and sigma within the target, and the most
steps whose simulated most-queried client stays within that count (a run's real sampling is
secret: give the run --target-epsilon too, which stops it before the guarantee passes).
accountants: autodp-rdp (the paper's, default), dp-accounting-rdp, dp-accounting-pld (it
has no sampling without replacement: the trusted-sampler figure is always an RDP bound or the
untrusted-server one).

secure aggregation (--secure-aggregation --cohort M; gswgan, fedavg-gan or dp-merf):
  secure-aggregation  Each step's (round's) cohort of M clients answers through SecAgg+ with a
                    distributed discrete Gaussian: an honest-but-curious server sees only the
                    cohort's noisy sum. Holds with at most t-1 clients colluding with the server
                    (their noise is not counted) and at least m_min surviving the step (fewer:
                    the step aborts); the m_min-(t-1) honest survivors carry the central noise.
                    No amplification: the server knows each cohort. Not covered: a server that
                    fills a cohort with Sybil clients, or deviates from the protocol. Headline:
                    each secure step charged as the run's ledger charges it (its Gaussian bound,
                    composed by --accountant, an RDP one); ddg-rdp (Kairouz et al.) beside it.
  local noise only  What a client's own noise share guarantees if those assumptions fail.
secure planning: the plan builds the run's own config (keys secagg-min-survivors,
secagg-threshold, secagg-degree, secagg-bits, same defaults: m - m//10 at least 3, d//2 + 1,
every other node, 32) and its noise calibration, so it computes what the run would charge.
--noise-multiplier is the run's noise key (gswgan: sigma, the sum's std 2*C*sigma; fedavg-gan:
z; dp-merf: merf-noise-multiplier, std 2*C*sigma on the sum of releases). --target-epsilon
calibrates it for the most-queried client (uniform: simulated with --seed; least-queried:
ceil(T*M/K); dp-merf: one release per writer); with --noise-multiplier too it plans queries per
client and steps. dp-merf's vector is (merf-features + 1) x 10 (the digits).
Several --cohort sizes print one line each. Bytes are the payload (the query down, the int64
masked vector up); keys, shares and unmask lists come on top: fedgs comm-cost measures them."""


_positive_int = positive(int)
_positive_float = positive(float)
_delta = number(float, 0, 1, "delta in (0, 1)")


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``privacy`` subcommand."""
    parser = subparsers.add_parser(
        "privacy",
        help="epsilon of a run under each threat model, or the noise for a target epsilon",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--clients", type=_positive_int, help="K clients (required but for dp-merf's local plan)"
    )
    parser.add_argument(
        "--steps",
        type=_positive_int,
        help="T generator steps (optional with both --noise-multiplier and --target-epsilon)",
    )
    parser.add_argument(
        "--batch-size", type=_positive_int, help="B rows a query (required as --clients)"
    )
    parser.add_argument(
        "--noise-multiplier", type=_positive_float, help="sigma (noise std / 2C per row)"
    )
    parser.add_argument("--delta", type=_delta, required=True, help="delta in (0, 1)")
    parser.add_argument(
        "--clients-per-step", type=_positive_int, default=1, help="M clients per step (1)"
    )
    parser.add_argument(
        "--setting",
        choices=("federated", "centralized"),
        default="federated",
        help="which paper figure to reproduce (federated)",
    )
    parser.add_argument(
        "--accountant", default=None, help="autodp-rdp (default), dp-accounting-rdp, ...-pld"
    )
    parser.add_argument(
        "--seed", type=_seed, default=0, help="seed of the simulated client sampling (0)"
    )
    parser.add_argument(
        "--client-sampling",
        choices=RULES,
        default=UNIFORM,
        help="the run's client sampling, for planning (uniform): least-queried asks the "
        "clients asked least so far, so every client answers within one query of the others",
    )
    parser.add_argument(
        "--target-epsilon",
        type=_positive_float,
        help="print the smallest noise multiplier meeting this epsilon for the most-queried "
        "client under the untrusted server, instead of epsilons; with --noise-multiplier too: "
        "plan the queries per client and the steps that fit this epsilon",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    _add_secure_arguments(parser)
    parser.set_defaults(handler=run)


def _add_secure_arguments(parser: argparse.ArgumentParser) -> None:
    """The secure-aggregation planner's options: the run config's keys, help and choices."""
    from dataclasses import fields

    from fedgs.algorithms import ALGORITHMS
    from fedgs.run_config import RunConfig

    help_of = {f.name: f.metadata["help"] for f in fields(RunConfig)}
    group = parser.add_argument_group(
        "secure aggregation", "plan a run with secure-aggregation = true (see below)"
    )
    group.add_argument(
        "--secure-aggregation",
        action="store_true",
        help="plan a secure-aggregation run: noise, queries, epsilons and bytes per cohort",
    )
    group.add_argument(
        "--cohort",
        type=_positive_int,
        nargs="+",
        help="M nodes per secure step (gswgan, dp-merf: clients-per-step; fedavg-gan: "
        "fedavg-clients-per-round); several sizes: one line each",
    )
    group.add_argument(
        "--strategy",
        choices=[a.name for a in ALGORITHMS.values() if a.secure],
        help="the run's strategy (gswgan); dp-merf without --secure-aggregation plans its "
        "local-noise release (one per writer: --noise-multiplier or --target-epsilon only); "
        "fedavg-gan without it the trusted-server DP-FedAvg of --steps rounds of "
        "--clients-per-step expected clients of --clients",
    )
    for key, alias in SECURE_KEYS.items():
        name = key.replace("-", "_")
        flags = [f"--{key}"] + ([f"--{alias}"] if alias else [])
        group.add_argument(*flags, dest=name, type=int, help=help_of[name])
    group.add_argument(
        "--fedavg-models", choices=("paper", "gswgan"), help=help_of["fedavg_models"]
    )


# the run-config keys the secure planner passes on as given, with their short aliases
SECURE_KEYS = {
    "secagg-min-survivors": "min-survivors",
    "secagg-threshold": "threshold",
    "secagg-degree": "degree",
    "secagg-bits": "bits",
}


def _fail(message: str, code: int = 2) -> int:
    print(f"fedgs privacy: error: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    from fedgs.privacy.accountants import ACCOUNTANT_NAMES, DEFAULT_ACCOUNTANT, get_accountant
    from fedgs.privacy.calibration import DEFAULT_TOLERANCE, calibrate_noise_multiplier
    from fedgs.privacy.client_sampling import LEAST_QUERIED, LEAST_QUERIED_NOTE
    from fedgs.privacy.events import trusted_sampler_event, untrusted_client_event
    from fedgs.privacy.ledger import tightest_trusted_sampler
    from fedgs.privacy.paper import PAPER_ACCOUNTANT, paper_epsilon
    from fedgs.privacy.sampling import simulate_query_counts
    from fedgs.privacy.threat_models import REPLACE_ONE, TRUSTED_SAMPLER, UNTRUSTED_SERVER

    if args.strategy == "dp-merf" and not args.secure_aggregation:
        return _run_one_release(args)
    if args.strategy == "fedavg-gan" and not args.secure_aggregation:
        return _run_fedavg_trusted(args)
    given = {"--clients": args.clients, "--batch-size": args.batch_size}
    missing = [flag for flag, value in given.items() if value is None]
    if missing:
        return _fail(f"the following arguments are required: {', '.join(missing)}")
    if args.secure_aggregation:
        return _run_secure(args)
    given = _secure_options_given(args)
    if given:
        return _fail(f"{', '.join(given)}: for a secure-aggregation plan add --secure-aggregation")
    name = args.accountant or DEFAULT_ACCOUNTANT
    if name not in ACCOUNTANT_NAMES:
        return _fail(f"unknown accountant {name!r}; choose one of {', '.join(ACCOUNTANT_NAMES)}")
    if args.clients_per_step > args.clients:
        return _fail(f"--clients-per-step {args.clients_per_step} > --clients {args.clients}")
    if args.setting == "centralized" and args.clients_per_step != 1:
        return _fail("--setting centralized samples one subset per step (--clients-per-step 1)")
    if args.noise_multiplier is None and args.target_epsilon is None:
        return _fail("give --noise-multiplier, or --target-epsilon to calibrate it")
    acct = get_accountant(name)
    if args.noise_multiplier is not None and args.target_epsilon is not None:
        return _plan_queries(args, acct)
    if args.steps is None:
        return _fail(
            "give --steps (optional only when planning with both --noise-multiplier "
            "and --target-epsilon)"
        )
    k, t, m, b, delta = args.clients, args.steps, args.clients_per_step, args.batch_size, args.delta
    expected = t * m / k
    rule = args.client_sampling
    worst = int(simulate_query_counts(k, t, m, seed=args.seed, rule=rule).max())

    if args.target_epsilon is not None:
        try:
            sigma = calibrate_noise_multiplier(
                args.target_epsilon,
                delta,
                batch_size=b,
                queries_per_client=worst,
                accountant=acct,
            )
        except ValueError as err:
            return _fail(str(err), code=1)
        result: dict[str, Any] = {
            "noise_multiplier": sigma,
            "target_epsilon": args.target_epsilon,
            "delta": delta,
            "threat_model": UNTRUSTED_SERVER,
            "neighbouring": REPLACE_ONE,
            "for": "most-queried client (simulated)",
            "worst_client_queries": worst,
            "expected_queries": expected,
            "seed": args.seed,
            "accountant": acct.name,
            "tolerance": DEFAULT_TOLERANCE,
        }
        if args.json:
            print(json.dumps(result))
        else:
            print(
                f"noise multiplier {sigma:.4f} (tolerance {DEFAULT_TOLERANCE:g}) meets epsilon "
                f"{args.target_epsilon:g} at delta {delta:g} for the most-queried client "
                f"({worst} queries of B={b}; simulated, seed {args.seed}) under the "
                f"{UNTRUSTED_SERVER} threat model, {REPLACE_ONE} client [{acct.name}]"
            )
        return 0

    sigma = args.noise_multiplier
    eps_expected = acct.epsilon(untrusted_client_event({(sigma, b): expected}), delta)
    eps_worst = acct.epsilon(untrusted_client_event({(sigma, b): worst}), delta)
    trusted_error = None
    trusted: dict[str, Any] = {"epsilon": None}
    if rule == LEAST_QUERIED:
        trusted_error = LEAST_QUERIED_NOTE
    else:  # the tightest valid bound, as every run reports it
        event = trusted_sampler_event(t, k, m, sigma, b)
        trusted = tightest_trusted_sampler(event, eps_worst, acct.name, delta)
    eps_trusted = trusted["epsilon"]
    eps_paper = paper_epsilon(args.setting, k, t, b, sigma, delta, clients_per_step=m)
    paper_model = (
        "untrusted server at the expected count"
        if args.setting == "federated"
        else "per-sample subsampled composition, q = 1/K, B*T times"
    )
    result = {
        "epsilon_untrusted_expected": eps_expected,
        "epsilon_untrusted_worst_client": eps_worst,
        "epsilon_trusted_sampler": eps_trusted,
        "epsilon_paper": eps_paper,
        "accountant": acct.name,
        "paper_accountant": PAPER_ACCOUNTANT,
        "delta": delta,
        "neighbouring": REPLACE_ONE,
        "expected_queries": expected,
        "worst_client_queries": worst,
        "seed": args.seed,
        "setting": args.setting,
        "threat_models": {
            "epsilon_untrusted_expected": UNTRUSTED_SERVER,
            "epsilon_untrusted_worst_client": UNTRUSTED_SERVER,
            "epsilon_trusted_sampler": TRUSTED_SAMPLER,
            "epsilon_paper": f"paper ({args.setting}: {paper_model})",
        },
        "parameters": {
            "clients": k,
            "steps": t,
            "clients_per_step": m,
            "batch_size": b,
            "noise_multiplier": sigma,
        },
    }
    if trusted_error:
        result["epsilon_trusted_sampler_error"] = trusted_error
    else:
        result["epsilon_trusted_sampler_tightest"] = trusted["tightest"]
        result["epsilon_trusted_sampler_bounds"] = trusted["bounds"]
        if "note" in trusted:
            result["notes"] = [trusted["note"]]
    if args.json:
        print(json.dumps(result))
        return 0

    def show(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.6g}"

    trusted_label = f"{TRUSTED_SAMPLER}: assumes secret uniform sampling, q = {m}/{k}"
    if args.setting == "centralized":
        trusted_label += " (= one shared subsampling event per step)"
    if eps_trusted is not None:
        trusted_label += f"; tightest valid bound: {trusted['tightest']}"
    trusted_accountant = trusted.get("accountant", acct.name)
    print(
        f"K={k} clients, T={t} steps, M={m} per step, B={b}, sigma={sigma:g}, delta={delta:g}, "
        f"neighbouring: {REPLACE_ONE} client (all of one writer's data)\n"
        f"queries per client: expected {expected:.2f} (T*M/K); most-queried client {worst} "
        f"(simulated, seed {args.seed})\n"
        f"epsilon {show(eps_worst):>12}  {UNTRUSTED_SERVER}, most-queried client: the run's "
        f"guarantee [{acct.name}]\n"
        f"epsilon {show(eps_expected):>12}  {UNTRUSTED_SERVER}, expected count: no client's "
        f"guarantee [{acct.name}]\n"
        f"epsilon {show(eps_trusted):>12}  {trusted_label} [{trusted_accountant}]\n"
        f"epsilon {show(eps_paper):>12}  paper-compatible, {args.setting}: {paper_model} "
        f"[{PAPER_ACCOUNTANT}]"
    )
    if trusted_error:
        print(f"  (trusted-sampler n/a: {trusted_error})")
    else:
        bounds = ", ".join(f"{name} {value:.6g}" for name, value in trusted["bounds"].items())
        print(f"  trusted-sampler bounds (the smallest is reported): {bounds}")
    return 0


def _max_queries(epsilon_of: Callable[[int], float], target: float) -> int:
    """The most queries one client may answer with ``epsilon_of(queries)`` <= target (0: none;
    epsilon grows with the query count)."""

    def meets(queries: int) -> bool:
        return epsilon_of(queries) <= target

    if not meets(1):
        return 0
    high = 2
    while meets(high):  # epsilon grows with the query count
        if high > 10**7:
            return high
        high *= 2
    return _largest(meets, high // 2, high)


def _max_steps(clients: int, per_step: int, queries: int, seed: int, rule: str) -> int:
    """The most steps whose simulated most-queried client answers at most ``queries``."""
    from fedgs.privacy.sampling import simulate_query_counts

    def fits(steps: int) -> bool:
        counts = simulate_query_counts(clients, steps, per_step, seed=seed, rule=rule)
        return int(counts.max()) <= queries

    return _largest(fits, 0, queries * clients // per_step + 1)  # more steps cannot fit


def _largest(fits: Any, low: int, high: int) -> int:
    """The largest n in [low, high) with ``fits(n)``, for a monotone ``fits`` that holds at
    ``low`` and fails at ``high`` (or ``high`` is a bound past every fitting n)."""
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def _plan_queries(args: argparse.Namespace, acct: Any) -> int:
    """--noise-multiplier and --target-epsilon: queries per client and steps within the target."""
    from fedgs.privacy.events import untrusted_client_event
    from fedgs.privacy.sampling import simulate_query_counts
    from fedgs.privacy.threat_models import REPLACE_ONE, UNTRUSTED_SERVER

    k, m, b, delta = args.clients, args.clients_per_step, args.batch_size, args.delta
    sigma, target = args.noise_multiplier, args.target_epsilon
    queries = _max_queries(
        lambda n: acct.epsilon(untrusted_client_event({(sigma, b): n}), delta), target
    )
    if queries == 0:
        one = acct.epsilon(untrusted_client_event({(sigma, b): 1}), delta)
        return _fail(
            f"one query at B={b}, sigma={sigma:g} already costs epsilon {one:.4g} > {target:g} "
            f"({UNTRUSTED_SERVER}, {acct.name}, delta={delta:g}): raise sigma or lower B",
            code=1,
        )
    eps = acct.epsilon(untrusted_client_event({(sigma, b): queries}), delta)
    rule = args.client_sampling
    steps = _max_steps(k, m, queries, args.seed, rule)
    result: dict[str, Any] = {
        "max_queries_per_client": queries,
        "epsilon_at_max_queries": eps,
        "target_epsilon": target,
        "max_steps": steps,
        "expected_queries_at_max_steps": steps * m / k,
        "noise_multiplier": sigma,
        "batch_size": b,
        "clients": k,
        "clients_per_step": m,
        "delta": delta,
        "threat_model": UNTRUSTED_SERVER,
        "neighbouring": REPLACE_ONE,
        "accountant": acct.name,
        "seed": args.seed,
        "client_sampling": rule,
    }
    if args.steps is not None:
        worst = int(simulate_query_counts(k, args.steps, m, seed=args.seed, rule=rule).max())
        result |= {
            "steps": args.steps,
            "worst_client_queries": worst,
            "epsilon_untrusted_worst_client": acct.epsilon(
                untrusted_client_event({(sigma, b): worst}), delta
            ),
            "fits": worst <= queries,
        }
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"B={b}, sigma={sigma:g} (one query: noise multiplier {sigma / b**0.5:.4g}), "
        f"delta={delta:g}, {REPLACE_ONE} client, {UNTRUSTED_SERVER} [{acct.name}]\n"
        f"at most {queries} queries per client within epsilon {target:g} "
        f"(epsilon {eps:.4g} at {queries})\n"
        f"K={k} clients, M={m} per step, {rule} sampling: at most {steps} steps keep the "
        f"most-queried client within {queries} queries (simulated, seed {args.seed}; expected "
        f"{steps * m / k:.2f} queries per client); run with --target-epsilon {target:g}"
        + (f" and --client-sampling {rule}" if rule != UNIFORM else "")
        + " too"
    )
    if args.steps is not None:
        print(
            f"--steps {args.steps}: most-queried client {result['worst_client_queries']} "
            f"queries, epsilon {result['epsilon_untrusted_worst_client']:.4g} "
            f"({'within' if result['fits'] else 'PAST'} the target)"
        )
    return 0


def _plan_one_event(
    args: argparse.Namespace, strategy: str, event: Callable[[float], Any]
) -> dict[str, Any] | int:
    """The plan of a strategy whose whole privacy is ``event(multiplier)``: the multiplier
    (given, or calibrated to --target-epsilon), its epsilon and how it was computed; an exit
    code on bad input."""
    from fedgs.privacy.accountants import ACCOUNTANT_NAMES, DEFAULT_ACCOUNTANT, get_accountant
    from fedgs.privacy.calibration import DEFAULT_TOLERANCE, calibrate_event

    given = [flag for flag in _secure_options_given(args) if flag != "--strategy"]
    if given:
        return _fail(f"{', '.join(given)}: for a secure-aggregation plan add --secure-aggregation")
    name = args.accountant or DEFAULT_ACCOUNTANT
    if name not in ACCOUNTANT_NAMES:
        return _fail(f"unknown accountant {name!r}; choose one of {', '.join(ACCOUNTANT_NAMES)}")
    if (args.noise_multiplier is None) == (args.target_epsilon is None):
        return _fail(f"{strategy}: give --noise-multiplier or --target-epsilon")
    acct = get_accountant(name)
    sigma = args.noise_multiplier
    if sigma is None:
        try:
            sigma = calibrate_event(event, args.target_epsilon, args.delta, acct, describe=strategy)
        except ValueError as err:
            return _fail(str(err), code=1)
    return {
        "strategy": strategy,
        "noise_multiplier": sigma,
        "epsilon": acct.epsilon(event(sigma), args.delta),
        "target_epsilon": args.target_epsilon,
        "delta": args.delta,
        "accountant": acct.name,
        "tolerance": DEFAULT_TOLERANCE if args.noise_multiplier is None else None,
    }


def _print_plan(args: argparse.Namespace, plan: dict[str, Any], line: str) -> int:
    """One JSON object with --json, else the plan's line and its target."""
    if args.json:
        print(json.dumps(plan))
    else:
        target = plan["target_epsilon"]
        print(line + ("" if target is None else f"; target {target:g}"))
    return 0


def _run_one_release(args: argparse.Namespace) -> int:
    """--strategy dp-merf under local noise: each writer releases its noised mean embedding
    once, so its epsilon is one Gaussian release's, whatever K, T or M (untrusted server)."""
    from fedgs.privacy.events import mean_embedding_event
    from fedgs.privacy.threat_models import REPLACE_ONE, UNTRUSTED_SERVER

    plan = _plan_one_event(args, "dp-merf", mean_embedding_event)
    if isinstance(plan, int):
        return plan
    plan |= {"threat_model": UNTRUSTED_SERVER, "neighbouring": REPLACE_ONE}
    plan["releases_per_writer"] = 1
    return _print_plan(
        args,
        plan,
        f"dp-merf, one release per writer (its clipped mean embedding, noise std 2C*sigma): "
        f"sigma {plan['noise_multiplier']:.4f}, epsilon {plan['epsilon']:.4g} at delta "
        f"{args.delta:g} under the {UNTRUSTED_SERVER} threat model, {REPLACE_ONE} writer "
        f"[{plan['accountant']}]",
    )


def _run_fedavg_trusted(args: argparse.Namespace) -> int:
    """--strategy fedavg-gan without secure aggregation: DP-FedAvg as a Fed-Avg GAN run accounts
    it, T rounds each Poisson-sampling clients at q = M / K with one Gaussian of multiplier z on
    the clipped sum (trusted server: clients send unnoised deltas; add/remove-one client)."""
    from dp_accounting import dp_event

    from fedgs.privacy.events import fedavg_round_event
    from fedgs.privacy.threat_models import ADD_REMOVE, TRUSTED_SERVER

    if args.clients is None or args.steps is None:
        return _fail("fedavg-gan: give --clients K and --steps T (rounds)")
    if args.clients_per_step > args.clients:
        return _fail(f"--clients-per-step {args.clients_per_step} > --clients {args.clients}")

    def rounds(z: float) -> dp_event.DpEvent:
        one = fedavg_round_event(args.clients_per_step, args.clients, z)
        return dp_event.SelfComposedDpEvent(one, args.steps)

    plan = _plan_one_event(args, "fedavg-gan", rounds)
    if isinstance(plan, int):
        return plan
    plan |= {"threat_model": TRUSTED_SERVER, "neighbouring": ADD_REMOVE}
    plan |= {"clients": args.clients, "clients_per_round": args.clients_per_step}
    plan |= {"sampling_rate": args.clients_per_step / args.clients, "rounds": args.steps}
    return _print_plan(
        args,
        plan,
        f"fedavg-gan (DP-FedAvg on the critic), {args.steps} rounds of Poisson-sampled clients "
        f"(q = {args.clients_per_step}/{args.clients}): fedavg-noise-multiplier "
        f"{plan['noise_multiplier']:.4f}, epsilon {plan['epsilon']:.4g} at delta {args.delta:g} "
        f"under the {TRUSTED_SERVER} threat model only (clients send unnoised deltas), "
        f"{ADD_REMOVE} client [{plan['accountant']}]",
    )


def _secure_options_given(args: argparse.Namespace) -> list[str]:
    """The secure planner's options given on the command line, as their flags."""
    names = ["cohort", "strategy", "fedavg_models", *(k.replace("-", "_") for k in SECURE_KEYS)]
    return [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) is not None]


def _secure_refusal(args: argparse.Namespace) -> str | None:
    """Why these options plan no secure run (the run config checks the rest), or None."""
    if args.cohort is None:
        return "--secure-aggregation needs --cohort M (one or more cohort sizes)"
    if args.clients_per_step != 1:
        return "with --secure-aggregation the cohort is --cohort, not --clients-per-step"
    if args.setting != "federated":
        return "--secure-aggregation plans a federated run (--setting federated)"
    if args.fedavg_models is not None and args.strategy != "fedavg-gan":
        return "--fedavg-models shapes a fedavg-gan plan (--strategy fedavg-gan)"
    too_big = [m for m in args.cohort if m > args.clients]
    if too_big:
        return f"--cohort {too_big[0]} > --clients {args.clients}"
    if args.noise_multiplier is None and args.target_epsilon is None:
        return "give --noise-multiplier, or --target-epsilon to calibrate it"
    if args.steps is None and (args.noise_multiplier is None or args.target_epsilon is None):
        return (
            "give --steps (optional only when planning with both --noise-multiplier "
            "and --target-epsilon)"
        )
    return None


def _run_secure(args: argparse.Namespace) -> int:
    """--secure-aggregation: one plan per cohort size, as the run config would run it."""
    from fedgs.privacy.accountants import DEFAULT_ACCOUNTANT
    from fedgs.privacy.secure_plan import SecureRun

    refusal = _secure_refusal(args)
    if refusal:
        return _fail(refusal)
    given = {key: getattr(args, key.replace("-", "_")) for key in (*SECURE_KEYS, "fedavg-models")}
    run = SecureRun(
        args.strategy or "gswgan",
        args.batch_size,
        args.delta,
        args.accountant or DEFAULT_ACCOUNTANT,
        args.client_sampling,
        tuple((key, value) for key, value in given.items() if value is not None),
    )
    try:
        for cohort in args.cohort:  # the run config's own refusals, before any accounting
            run.config(cohort, args.noise_multiplier or 1.0)  # (calibrating: any sigma)
    except ValueError as error:
        return _fail(str(error))
    try:
        rows = [_secure_row(args, run, cohort) for cohort in args.cohort]
    except ValueError as error:  # a target no noise multiplier or query count meets
        return _fail(str(error), code=1)
    head = _secure_head(args, run)
    if args.json:
        print(json.dumps(head | rows[0] if len(rows) == 1 else head | {"cohorts": rows}))
    elif len(rows) == 1:
        _print_secure_plan(head, rows[0])
    else:
        _print_secure_table(head, rows)
    return 0


def _secure_head(args: argparse.Namespace, run: Any) -> dict[str, Any]:
    """What every cohort's plan shares, each figure's threat model and accountant named."""
    from fedgs.algorithms import ALGORITHMS
    from fedgs.privacy.distributed_accounting import ACCOUNTANT as DDG
    from fedgs.privacy.threat_models import (
        NEIGHBOURING,
        SECURE_AGGREGATION,
        THREAT_MODELS,
        UNTRUSTED_SERVER,
    )

    relation = ALGORITHMS[run.strategy].neighbouring
    head: dict[str, Any] = {
        "strategy": run.strategy,
        "noise_key": ALGORITHMS[run.strategy].noise_key,
        "secure_aggregation": True,
        "clients": args.clients,
        "batch_size": args.batch_size,
        "delta": args.delta,
        "neighbouring": relation,
        "neighbouring_relation": NEIGHBOURING[relation],
        "threat_model": SECURE_AGGREGATION,
        "assumption": THREAT_MODELS[SECURE_AGGREGATION],
        "accountant": run.accountant,
        "threat_models": {
            "epsilon_secure_aggregation": f"{SECURE_AGGREGATION} [{run.accountant}]",
            "epsilon_secure_aggregation_ddg_rdp": f"{SECURE_AGGREGATION} [{DDG}]",
            "epsilon_local_noise_only": f"{UNTRUSTED_SERVER}, local noise only [{run.accountant}]",
        },
        "for": "most-queried client",
        "client_sampling": run.client_sampling,
        "seed": args.seed,
        "run_config": dict(run.options),
    }
    if args.target_epsilon is not None:
        head["target_epsilon"] = args.target_epsilon
    if args.noise_multiplier is not None:
        head["noise_multiplier"] = args.noise_multiplier
    return head


def _secure_row(args: argparse.Namespace, run: Any, cohort: int) -> dict[str, Any]:
    """One cohort's plan: its noise, the most-queried client's queries, its three epsilons
    and the payload bytes."""
    from fedgs.algorithms import ALGORITHMS
    from fedgs.privacy.calibration import DEFAULT_TOLERANCE
    from fedgs.privacy.sampling import simulate_query_counts
    from fedgs.privacy.secure_plan import calibrate

    k, rule, seed = args.clients, args.client_sampling, args.seed

    def most_queried(steps: int) -> int:
        if ALGORITHMS[run.strategy].one_shot:  # the strategy asks each client once at most
            return min(steps, 1)
        return int(simulate_query_counts(k, steps, cohort, seed=seed, rule=rule).max())

    sigma, target = args.noise_multiplier, args.target_epsilon
    row: dict[str, Any] = {"cohort": cohort}
    if sigma is None:  # calibrate for --steps
        steps, queries = args.steps, most_queried(args.steps)
        sigma = calibrate(run, cohort, queries, target)
        row["tolerance"] = DEFAULT_TOLERANCE
        step = run.step(cohort, sigma)
    elif target is None:  # evaluate --steps
        steps, queries = args.steps, most_queried(args.steps)
        step = run.step(cohort, sigma)
    else:  # plan queries per client and steps
        step = run.step(cohort, sigma)
        queries = _max_queries(step.headline_epsilon, target)
        if queries == 0:
            raise ValueError(
                f"one secure step at cohort {cohort}, noise multiplier {sigma:g} already costs "
                f"epsilon {step.headline_epsilon(1):.4g} > {target:g}: raise the noise multiplier"
            )
        steps = _max_steps(k, cohort, queries, seed, rule)
        row |= {"max_queries_per_client": queries, "max_steps": steps}
        if args.steps is not None:
            worst = most_queried(args.steps)
            row |= {
                "at_steps": {
                    "steps": args.steps,
                    "worst_client_queries": worst,
                    **step.epsilons(worst),
                    "fits": worst <= queries,
                }
            }
    row |= {
        "noise_multiplier": sigma,
        "mean_noise_multiplier": sigma / cohort,  # on the cohort's mean: the signal's lever
        "steps": steps,
        "expected_queries": steps * cohort / k,
        "worst_client_queries": queries,
        "secagg": _secagg_block(step),
        **step.epsilons(queries),
        "bytes": _bytes_block(step, queries, steps * cohort),
    }
    return row


def _secagg_block(step: Any) -> dict[str, Any]:
    """The SecAgg+ settings and the calibrated noise a cohort's step runs with."""
    settings, params = step.settings, step.calibration.params
    return settings.report() | {
        "honest_survivors": step.honest_survivors,
        "central_std": params.sigma,
        "survivor_std": step.survivor_std,
        "survivor_noise_multiplier": step.survivor_noise_multiplier,
        "gamma": params.gamma,
        "padded_dimension": params.padded_dimension,
        "wrap_probability": step.calibration.wrap_probability,
    }


def _bytes_block(step: Any, client_queries: int, run_queries: int) -> dict[str, Any]:
    """Payload bytes per secure query, for the most-queried client and for the whole run."""
    per_query = step.payload_bytes()
    both = per_query["down"] + per_query["up"]
    return {
        "down_per_query": per_query["down"],
        "up_per_query": per_query["up"],
        "plain_up_per_query": per_query["plain_up"],
        "most_queried_client": client_queries * both,
        "run": run_queries * both,
        "counts": "payload only: keys, shares and unmask lists come on top (fedgs comm-cost)",
    }


def _size(count: float) -> str:
    """Bytes in the largest unit that keeps a number >= 1."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count:.0f} B"


def _secure_title(head: dict[str, Any]) -> str:
    return (
        f"secure aggregation, {head['strategy']}: K={head['clients']} clients, "
        f"B={head['batch_size']}, delta={head['delta']:g}, neighbouring: {head['neighbouring']} "
        f"client; {head['client_sampling']} sampling"
        + (f" (seed {head['seed']})" if head["client_sampling"] == UNIFORM else "")
    )


def _print_secure_plan(head: dict[str, Any], row: dict[str, Any]) -> None:
    """One cohort's plan, each figure with its threat model and accountant."""
    from fedgs.privacy.distributed_accounting import ACCOUNTANT as DDG

    s, b, m = row["secagg"], row["bytes"], row["cohort"]
    measured = head["strategy"] == "gswgan"  # the secure step fedgs comm-cost measures
    acct, sigma = head["accountant"], row["noise_multiplier"]
    lines = [
        _secure_title(head),
        f"cohort M={m}: SecAgg+ m_min {s['min_survivors']} survivors, threshold t={s['threshold']}"
        f" (up to {s['colluders']} colluding clients), {s['honest_survivors']} honest survivors "
        f"carry the noise; {s['degree']} neighbours each, {s['bits']}-bit modulus",
    ]
    if "tolerance" in row:
        lines.append(
            f"{head['noise_key']} {sigma:.4f} (tolerance {row['tolerance']:g}) meets epsilon "
            f"{head['target_epsilon']:g} for the most-queried client [{acct}]"
        )
    if "max_queries_per_client" in row:
        lines.append(
            f"at most {row['max_queries_per_client']} secure steps per client within epsilon "
            f"{head['target_epsilon']:g} at {head['noise_key']} {sigma:g} "
            f"[{acct}]; at most {row['max_steps']} steps keep the most-queried client within "
            f"them; run with --target-epsilon {head['target_epsilon']:g} too"
        )
    lines += [
        f"noise: std {s['central_std']:.4g} per coordinate on the cohort's sum; each honest "
        f"survivor adds std {s['survivor_std']:.4g} (noise multiplier "
        f"{s['survivor_noise_multiplier']:.4g}); on the cohort's mean, noise multiplier "
        f"{row['mean_noise_multiplier']:.4g} (sigma / M); wrap-around probability <= "
        f"{s['wrap_probability']:.2g}",
        f"queries per client: expected {row['expected_queries']:.2f} over {row['steps']} steps "
        f"(T*M/K); most-queried client {row['worst_client_queries']}",
        f"epsilon {row['epsilon_secure_aggregation']:>12.6g}  secure-aggregation, most-queried "
        f"client: the run's headline, its steps' events composed [{acct}]",
        f"epsilon {row['epsilon_secure_aggregation_ddg_rdp']:>12.6g}  secure-aggregation, "
        f"most-queried client [{DDG}]",
        f"epsilon {row['epsilon_local_noise_only']:>12.6g}  untrusted-server, local noise only: "
        f"if the secure-aggregation assumptions fail [{acct}]",
        f"bytes per client and secure query: down {b['down_per_query']:,}, up "
        f"{b['up_per_query']:,} (int64 masked vector; float32 without secure aggregation: "
        f"{b['plain_up_per_query']:,}); most-queried client {_size(b['most_queried_client'])}, "
        f"the run {_size(b['run'])}; payload only: keys, shares and unmask lists come on top"
        + (f" (fedgs comm-cost --secagg-cohorts {m} measures them)" if measured else ""),
    ]
    at = row.get("at_steps")
    if at:
        lines.append(
            f"--steps {at['steps']}: most-queried client {at['worst_client_queries']} queries, "
            f"epsilon {at['epsilon_secure_aggregation']:.4g} "
            f"({'within' if at['fits'] else 'PAST'} the target)"
        )
    print("\n".join(lines))


def _print_secure_table(head: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """One line per cohort size."""
    from fedgs.privacy.distributed_accounting import ACCOUNTANT as DDG

    acct = head["accountant"]
    aim = (
        f"target epsilon {head['target_epsilon']:g}"
        if "target_epsilon" in head
        else f"{head['noise_key']} {head['noise_multiplier']:g}"
    )
    queries = "max queries" if "max_queries_per_client" in rows[0] else "queries"
    print(
        f"{_secure_title(head)}\n{aim} for the most-queried client; sigma: the run's "
        f"{head['noise_key']}; per survivor: the noise multiplier each of the m_min - (t - 1) "
        "honest survivors adds; on mean: sigma / M, the noise on the cohort's mean; up: bytes "
        "per client and secure query (payload)"
    )
    print(
        f"{'M':>5} {'m_min':>5} {'t':>4} {'honest':>6} {'sigma':>9} {'per survivor':>12} "
        f"{'on mean':>8} "
        f"{'steps':>7} {queries:>11} {'eps ' + acct:>15} {'eps ' + DDG:>12} {'up':>10}"
    )
    for row in rows:
        s = row["secagg"]
        print(
            f"{row['cohort']:>5} {s['min_survivors']:>5} {s['threshold']:>4} "
            f"{s['honest_survivors']:>6} {row['noise_multiplier']:>9.4f} "
            f"{s['survivor_noise_multiplier']:>12.4f} {row['mean_noise_multiplier']:>8.4f} "
            f"{row['steps']:>7} "
            f"{row['worst_client_queries']:>11} {row['epsilon_secure_aggregation']:>15.4f} "
            f"{row['epsilon_secure_aggregation_ddg_rdp']:>12.4f} "
            f"{_size(row['bytes']['up_per_query']):>10}"
        )
