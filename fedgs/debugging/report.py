"""Step 5's outputs a person looks at: the side-by-side sample figure and the markdown report."""

from __future__ import annotations

import math
import string
from pathlib import Path
from typing import Any

import torch

from fedgs.privacy.report import epsilon_blocks, read_privacy

CLASS_NAMES = string.digits + string.ascii_uppercase + string.ascii_lowercase  # LEAF label order


def save_side_by_side(
    panels: list[tuple[str, torch.Tensor]], num_classes: int, per_class: int, path: Path
) -> Path:
    """One PNG with a grid per panel (row c = class c, ``per_class`` samples each), titled.

    Each panel's images are in [-1, 1], ordered class by class. Side by side because the bug
    must show at a glance: one generator draws bright backgrounds, the other dark ones.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from torchvision.utils import make_grid

    cell, pad = 28, 2
    height_px = num_classes * (cell + pad) + pad
    width_px = per_class * (cell + pad) + pad
    dpi = 100
    figure, axes = plt.subplots(
        1,
        len(panels),
        figsize=(len(panels) * (width_px + 140) / dpi, (height_px + 90) / dpi),
        dpi=dpi,
        squeeze=False,
    )
    centres = [pad + c * (cell + pad) + cell / 2 for c in range(num_classes)]
    for axis, (title, images) in zip(axes[0], panels, strict=True):
        if images.shape[0] != num_classes * per_class:
            raise ValueError(f"{title}: expected {num_classes * per_class} images")
        grid = make_grid((images + 1) / 2, nrow=per_class, padding=pad, pad_value=0.5)
        axis.imshow(grid.permute(1, 2, 0).clamp(0, 1).numpy(), interpolation="nearest")
        axis.set_title(title, fontsize=9)
        axis.set_xticks([])
        axis.set_yticks(centres, list(CLASS_NAMES[:num_classes]), fontsize=6)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


EXACT_GROUPING_PRIVACY = (
    "Not privacy-accounted: each writer's exact accuracy on its own images decides its group "
    "(as in the papers' procedure, where the deployed model's per-user metrics do), and no "
    "noise is added to it; the epsilons below cover the generators' training on the groups as "
    "formed, not the grouping, so they are NOT an end-to-end guarantee of the procedure."
)


def grouping_privacy(epsilon: float | None) -> str:
    """What the grouping step releases and what it costs (None: the exact grouping)."""
    if epsilon is None:
        return EXACT_GROUPING_PRIVACY
    return (
        f"Private: each writer thresholds its own accuracy on its device and releases one bit "
        f"by randomized response with epsilon {epsilon:g} (untrusted server, replace-one "
        "writer; the coin from a fresh ChaCha20 key per writer); the server forms the groups "
        "from the released bits alone. The classifier and the threshold come from the held-out "
        "writers, outside the federated population, and are not accounted for them."
    )


def ratio_text(suspected: float, normal: float) -> str:
    """suspected / normal share, with a normal share of 0 spelled out instead of a division."""
    if normal == 0:
        return "inf (normal group: no inverted samples)" if suspected > 0 else "undefined (0 / 0)"
    return f"{suspected / normal:.2f}x"


def privacy_digest(privacy: dict[str, Any]) -> dict[str, Any]:
    """A run's privacy.json (any strategy, any version) cut to steps, delta and one epsilon per
    threat model (every block that carries an epsilon) with its accountant and neighbouring
    relation; an infinite, missing or void (fixed sampling seed) epsilon becomes None with the
    run's note."""
    epsilons = {}
    privacy = read_privacy(privacy)
    relation = privacy["neighbouring"]
    blocks = sorted(epsilon_blocks(privacy).items(), key=lambda item: item[0] != "untrusted_server")
    for name, block in blocks:  # the untrusted-server guarantee first: the papers' threat model
        epsilon = block["epsilon"]
        finite = epsilon is not None and math.isfinite(epsilon) and block.get("holds") is not False
        epsilons[name] = {
            "epsilon": float(epsilon) if finite else None,
            "accountant": block.get("accountant"),
            "neighbouring": block.get("neighbouring", relation),
            "note": None if finite else block.get("note") or block.get("error"),
        }
    return {"steps": privacy.get("steps"), "delta": privacy["delta"], "epsilons": epsilons}


def _epsilon_line(group: str, digest: dict[str, Any]) -> str:
    parts = [
        f"{name.replace('_', ' ')}: "
        + (
            f"{block['epsilon']:.4g} ({block['accountant']}, {block['neighbouring']})"
            if block["epsilon"] is not None
            else block["note"] or "none"
        )
        for name, block in digest["epsilons"].items()
    ]
    return f"| {group} | {digest['steps']} | {'; '.join(parts)} | {digest['delta']:g} |"


def _grouping_text(split: dict[str, Any]) -> str:
    """How step 3 formed the groups: two accuracy bounds, or one threshold and the bits."""
    thresholds, grouping = split["thresholds"], split.get("grouping") or {}
    if grouping.get("epsilon") is None:
        return (
            f"Thresholds ({thresholds['source']}): suspected if accuracy <= "
            f"{_pct(thresholds['suspect_max'])}, normal if >= {_pct(thresholds['normal_min'])}."
        )
    return (
        f"Each writer's bit: low if its accuracy <= {_pct(grouping['threshold'])} "
        f"({thresholds['source']}), released by randomized response with epsilon "
        f"{grouping['epsilon']:g} (the truth with probability "
        f"{_pct(grouping['truth_probability'])}). Suspected: the {grouping['released_low']} "
        f"writers who released low; normal: the others. The coin flipped {grouping['flipped']} "
        f"of {grouping['writers']} bits ({grouping['flipped_with_bug']} of writers with the bug, "
        f"{grouping['flipped_without_bug']} without): ground truth, which the server cannot know."
    )


def end_to_end_line(block: dict[str, Any]) -> str:
    """The printed summary's privacy line: one end-to-end figure, or why there is none."""
    if block["epsilon"] is None:
        return f"end-to-end epsilon per writer: none ({block['note']})"
    return (
        f"end-to-end epsilon per writer (max over writers): {block['epsilon']:.4g} (grouping "
        f"{block['grouping_epsilon']:g} + generator; {block['threat_model']}, "
        f"{block['accountant']}, delta {block['delta']:g}, {block['neighbouring']} writer)"
    )


def _end_to_end_text(block: dict[str, Any] | None) -> str:
    """The procedure's end-to-end epsilon per writer, or why there is none."""
    if block is None:
        return "End-to-end epsilon: not recorded (older summary)."
    if block["epsilon"] is None:
        return f"End-to-end epsilon per writer: none ({block['note']})."
    groups = ", ".join(f"{g} {e:.4g}" for g, e in block["per_group"].items())
    target = (
        f"; target {block['target']:g} end to end, so each generator stopped at its own "
        f"{block['generator_target']:.4g} ({block['queries_per_writer']} queries per writer at "
        "most)"
        if block.get("target") is not None and block.get("queries_per_writer") is not None
        else ""
    )
    return (
        f"**End-to-end epsilon per writer (max over writers): {block['epsilon']:.4g}** "
        f"(grouping bit epsilon {block['grouping_epsilon']:g} composed with the writer's "
        f"queries in its group's generator; {block['threat_model']}, {block['accountant']}, "
        f"delta {block['delta']:g}, {block['neighbouring']} writer; max per group: "
        f"{groups}{target})."
    )


def markdown_report(summary: dict[str, Any]) -> str:
    """REPORT.md of a scenario from its summary (the same numbers as summary.json)."""
    s = summary
    data, split, detection = s["data"], s["split"], s["detection"]
    noise = ", ".join(f"`{key}` {value:g}" for key, value in s["gan"]["noise"].items())
    lines = [
        "# Flipped-pixel debugging scenario",
        "",
        f"Data: `{data['dataset']}` ({data['labels']}, {data['num_classes']} classes), "
        f"{data['writers']} writers: {data['holdout_writers']} held out for the classifier, "
        f"{data['population_writers']} in the federated population. Bug: pixels inverted on "
        f"all images of {data['buggy_writers']} population writers (fraction "
        f"{data['bug_fraction']:g}, seed {s['seed']}; ground truth in `writers.csv`).",
        "",
        "## 1. Classifier and writer scores",
        "",
        f"A {data['num_classes']}-class CNN trained on {s['classifier']['images']} clean images "
        f"of the held-out writers scores each population writer by its accuracy on that "
        f"writer's (possibly inverted) training images. Median accuracy: writers with the bug "
        f"{_pct(s['classifier']['median_accuracy_with_bug'])}, without "
        f"{_pct(s['classifier']['median_accuracy_without_bug'])}.",
        "",
        _grouping_text(split),
        "",
        split["confusion_markdown"],
        "",
        f"Privacy of this step: {split.get('privacy', EXACT_GROUPING_PRIVACY)}",
        "",
        "## 2. One private generator per group",
        "",
        f"Strategy `{s['gan']['strategy']}`, {s['gan']['steps']} steps each, same settings "
        f"({noise}, batch {s['gan']['batch_size']}). "
        "Privacy per generator (threat model: epsilon (accountant, neighbouring relation)):",
        "",
        "| group | steps | epsilon by threat model | delta |",
        "| --- | ---: | --- | ---: |",
        *(_epsilon_line(g, p) for g, p in s["privacy"].items()),
        "",
        _end_to_end_text(s.get("end_to_end")),
        "",
        "## 3. Detection: share of samples that look inverted",
        "",
        f"Statistic: an image looks inverted when the mean intensity of its {detection['border']}"
        f"-pixel frame is above +{detection['margin']:g}, normal below -{detection['margin']:g}"
        " (background is -1, ink +1; in between: undecided, e.g. a flat grey image). "
        f"{detection['samples']} samples per generator, classes balanced.",
        "",
        "| samples | inverted | normal | undecided | frame mean q10 / median / q90 |",
        "| --- | ---: | ---: | ---: | --- |",
        *(
            f"| {g} | {_pct(p['inverted'])} | {_pct(p['normal'])} | {_pct(p['undecided'])} | "
            f"{p['frame_mean_q10']:.2f} / {p['frame_mean_median']:.2f} / "
            f"{p['frame_mean_q90']:.2f} |"
            for g, p in (
                *((f"{g} group's generator", p) for g, p in detection["profile"].items()),
                *detection["untrained"].items(),
            )
        ),
        "",
        "Legibility: the held-out classifier's accuracy on each generator's samples w.r.t. the "
        "requested labels, as drawn and with samples of bright frame flipped back "
        f"(chance: {1 / data['num_classes']:.1%}):",
        "",
        "| group | as drawn | polarity normalised |",
        "| --- | ---: | ---: |",
        *(
            f"| {g} | {_pct(v['as_drawn'])} | {_pct(v['polarity_normalised'])} |"
            for g, v in detection["legibility"].items()
        ),
        "",
        "| images | inverted share |",
        "| --- | ---: |",
        *(
            f"| generated, {g} group | {_pct(detection['generated'][g])} |"
            for g in detection["generated"]
        ),
        *(
            f"| real training images of the {g} group (ground truth, not visible to the "
            f"modeller) | {_pct(detection['real_group'][g])} |"
            for g in detection["real_group"]
        ),
        f"| sanity: clean held-out real images | {_pct(detection['sanity']['clean'])} |",
        f"| sanity: the same images inverted | {_pct(detection['sanity']['inverted'])} |",
        "",
        f"Suspected / normal: **{detection['ratio']}** (bar: >= {detection['bar']:g}x: "
        f"{'met' if detection['bar_met'] else 'NOT met'}).",
        "",
        f"Margin rule (each generator's largest share; met when the suspected group's says "
        f"inverted, the normal group's normal and every untrained control undecided): "
        f"**{detection.get('margin_rule', 'not recorded (older summary)')}**.",
        "",
        f"![samples]({Path(s['grid']).name})",
        "",
        f"`{Path(s['grid']).name}`: left the suspected group's generator, right the normal "
        "group's; one row per class.",
    ]
    return "\n".join(lines) + "\n"
