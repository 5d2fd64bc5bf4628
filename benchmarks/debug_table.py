"""One markdown table of finished debugging-scenario runs (fedgs debug-scenario summary.json).

Usage: python benchmarks/debug_table.py OUT/*/summary.json
A row per run: data, strategy, sampling, steps per generator, each generator's epsilon (threat
model, accountant), the suspected and normal generators' shares (inverted / normal / undecided)
and median frame mean, the untrained controls' medians, and the margin rule's verdict.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fedgs.debugging.detection import margin_rule
from fedgs.privacy.client_sampling import UNIFORM

GROUPS = ("suspected", "normal")


def _shares(profile: dict[str, float]) -> str:
    return (
        f"{profile['inverted']:.1%} / {profile['normal']:.1%} / {profile['undecided']:.1%}, "
        f"{profile['frame_mean_median']:.2f}"
    )


def _epsilons(privacy: dict) -> str:
    parts = []
    for group in GROUPS:
        stated = [(n, b) for n, b in privacy[group]["epsilons"].items() if b["epsilon"] is not None]
        if not stated:
            parts.append("none")
            continue
        name, first = stated[0]  # the digest lists the untrusted-server figure first
        parts.append(f"{first['epsilon']:.3f} ({name.replace('_', ' ')}, {first['accountant']})")
    return " / ".join(parts)


def row(path: Path) -> str:
    s = json.loads(path.read_text())
    detection, gan, privacy = s["detection"], s["gan"], s["privacy"]
    profiles, controls = detection["profile"], list(detection["untrained"].values())
    verdict = detection.get("margin_rule") or margin_rule(
        profiles["suspected"], profiles["normal"], controls
    )
    sampling = gan["config"].get("client-sampling", UNIFORM)
    steps = " / ".join(str(privacy[group]["steps"]) for group in GROUPS)
    control_medians = " and ".join(f"{c['frame_mean_median']:.2f}" for c in controls)
    writers = " + ".join(str(s["split"]["confusion"][g]["total"]) for g in GROUPS)
    return (
        f"| {path.parent.name} | {s['data']['dataset']} ({writers} writers), seed {s['seed']} | "
        f"{gan['strategy']}{'' if sampling == UNIFORM else ', ' + sampling} | {steps} | "
        f"{_epsilons(privacy)} | "
        f"{_shares(profiles['suspected'])} | {_shares(profiles['normal'])} | "
        f"{control_medians} | **{verdict}** | "
        f"{s['seconds']['total'] / 60:.1f} min |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("summaries", nargs="+", type=Path)
    args = parser.parse_args()
    print(
        "| run | data | strategy (client sampling if not uniform) | steps (suspected / normal) "
        "| epsilon per generator "
        "| suspected: inverted / normal / undecided, median frame mean | normal: the same "
        "| untrained controls' median frame means | margin rule | wall |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | ---: |")
    for path in args.summaries:
        print(row(path))


if __name__ == "__main__":
    main()
