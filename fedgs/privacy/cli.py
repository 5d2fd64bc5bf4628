"""``fedgs privacy``: the epsilon of a planned run, under each threat model, or the noise for a
target epsilon.

The accounting libraries take seconds to import, so they are imported by the handler only,
not when the ``fedgs`` parser is built.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fedgs.argtypes import number, positive
from fedgs.privacy.client_sampling import RULES, UNIFORM

_DESCRIPTION = "User-level privacy (one client = one writer) of a GS-WGAN run."
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
untrusted-server one)."""


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
    parser.add_argument("--clients", type=_positive_int, required=True, help="K clients")
    parser.add_argument(
        "--steps",
        type=_positive_int,
        help="T generator steps (optional with both --noise-multiplier and --target-epsilon)",
    )
    parser.add_argument("--batch-size", type=_positive_int, required=True, help="B rows a query")
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
    parser.set_defaults(handler=run)


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


def _max_queries(acct: Any, sigma: float, batch: int, target: float, delta: float) -> int:
    """The most queries one client may answer at (sigma, B) with epsilon <= target (0: none)."""
    from fedgs.privacy.events import untrusted_client_event

    def meets(queries: int) -> bool:
        return acct.epsilon(untrusted_client_event({(sigma, batch): queries}), delta) <= target

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
    queries = _max_queries(acct, sigma, b, target, delta)
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
