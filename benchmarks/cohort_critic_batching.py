"""Does batching a cohort's critic work (``torch.func.vmap`` over stacked critics) make a
GS-WGAN step cheaper on the CPU? Issue 43 asked before building a simulation path for it.

Usage: OMP_NUM_THREADS=1 python benchmarks/cohort_critic_batching.py --critics 20 --repeats 5

A cohort step of GS-WGAN is, per member, ``--critic-steps`` critic updates (WGAN-GP with the
gradient penalty's double backward, the drift and label-mismatch terms, Adam) on a batch of its
own images against the server's fake batch. Two ways to run the cohort's updates, side by side
in each repeat so they share the machine's load:

  loop   one critic after the other, as each client does today (autograd, one module each)
  vmap   one batched update of all critics: their parameters stacked, the loss's gradient by
         ``torch.func.grad`` (the penalty by a nested ``grad``), vmapped over the critics, and
         one Adam over the stacked tensors (Adam is elementwise, so the same update)

The critic is the project's ``ConditionalDCGANDiscriminator`` WITHOUT spectral norm: torch's
spectral-norm parametrization updates its power-iteration vectors with ``out=`` ops that vmap
cannot batch. The power iteration is a few matrix-vector products per layer, so the comparison
is of the arithmetic that dominates a step. Both paths draw the same real batches, interpolation
weights and wrong labels; the script checks their critics agree after the updates (max abs
difference of every parameter), stops if the loss both paths use is not fedgs' ``critic_loss``
(checked on one batch), and prints, per repeat and as medians, seconds per path and the
ratio loop / vmap, with the load average before and after.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time

import torch
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap
from torch.nn.utils import parametrize

from fedgs.models import ConditionalDCGANDiscriminator, critic_loss
from fedgs.training.hparams import GSWGANConfig

CONFIG = GSWGANConfig(critic_width=16)
NUM_CLASSES = 10


def critic_without_spectral_norm() -> nn.Module:
    critic = ConditionalDCGANDiscriminator(NUM_CLASSES, CONFIG.critic_width)
    for module in critic.modules():
        if parametrize.is_parametrized(module):
            parametrize.remove_parametrizations(module, "weight")
    return critic


def loss_of(critic, real, labels, fake, fake_labels, alpha, shift, input_gradient):
    """fedgs' critic loss (fedgs.models.losses.critic_loss with the mismatch term), written once
    for both paths: ``critic(x, y)`` scores, ``input_gradient(x, y)`` is d sum D / dx."""
    real_scores = critic(real, labels)
    wasserstein = real_scores.mean() - critic(fake, fake_labels).mean()
    gradients = input_gradient(alpha * real + (1.0 - alpha) * fake, labels)
    penalty = ((gradients.flatten(1).norm(dim=1) - 1.0) ** 2).mean()
    mismatch = critic(real, (labels + shift) % NUM_CLASSES).mean() - real_scores.mean()
    drift = (real_scores**2).mean()
    return -wasserstein + CONFIG.gp_weight * penalty + CONFIG.drift_weight * drift + mismatch


def difference_from_fedgs_loss(critic: nn.Module, draws: dict[str, torch.Tensor]) -> float:
    """|loss_of - fedgs' critic_loss| on the first batch: the copy above must stay the loss
    clients train with. critic_loss draws its interpolation weights, then its wrong-label
    shifts, from torch's global generator; the same seed gives loss_of the same draws."""
    real, labels = draws["real"][0, 0], draws["labels"][0, 0]
    fake, fake_labels = draws["fake"], draws["fake_labels"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        fedgs_loss = critic_loss(critic, real, labels, fake, fake_labels, CONFIG.gp_weight,
                                 CONFIG.drift_weight, mismatch_weight=1.0).loss  # fmt: skip
        torch.manual_seed(7)
        alpha = torch.rand(real.shape[0], 1, 1, 1)
        shift = torch.randint(1, NUM_CLASSES, labels.shape)
    ours = loss_of(critic, real, labels, fake, fake_labels, alpha, shift,
                   autograd_input_gradient(critic))  # fmt: skip
    return float((ours - fedgs_loss).detach().abs())


def autograd_input_gradient(critic: nn.Module):
    def input_gradient(x, labels):
        x = x.requires_grad_(True)
        (gradients,) = torch.autograd.grad(critic(x, labels).sum(), x, create_graph=True)
        return gradients

    return input_gradient


def adam(params) -> torch.optim.Adam:
    return torch.optim.Adam(params, lr=CONFIG.lr_critic, betas=(CONFIG.beta1, CONFIG.beta2))


def run_loop(critics: list[nn.Module], draws: dict[str, torch.Tensor]) -> list[nn.Module]:
    for k, critic in enumerate(critics):
        optimizer = adam(critic.parameters())
        for s in range(draws["real"].shape[1]):
            loss = loss_of(
                critic,
                draws["real"][k, s],
                draws["labels"][k, s],
                draws["fake"],
                draws["fake_labels"],
                draws["alpha"][k, s],
                draws["shift"][k, s],
                autograd_input_gradient(critic),
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return critics


def run_vmap(critics: list[nn.Module], draws: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    params, buffers = stack_module_state(critics)
    template = copy.deepcopy(critics[0]).to("meta")
    fake, fake_labels = draws["fake"], draws["fake_labels"]

    def one_loss(p, b, real, labels, alpha, shift):
        def critic(x, y):
            return functional_call(template, (p, b), (x, y))

        def input_gradient(x, y):
            return grad(lambda xx: critic(xx, y).sum())(x)

        return loss_of(critic, real, labels, fake, fake_labels, alpha, shift, input_gradient)

    gradient_of_cohort = vmap(grad(one_loss))
    optimizer = adam(list(params.values()))
    for s in range(draws["real"].shape[1]):
        gradients = gradient_of_cohort(
            params,
            buffers,
            draws["real"][:, s],
            draws["labels"][:, s],
            draws["alpha"][:, s],
            draws["shift"][:, s],
        )
        for name, tensor in params.items():
            tensor.grad = gradients[name]
        optimizer.step()
    return params


def draws_for(critics: int, steps: int, seed: int) -> dict[str, torch.Tensor]:
    """Every random input of the cohort's updates, drawn once so both paths see the same."""
    g = torch.Generator().manual_seed(seed)
    b = CONFIG.batch_size
    return {
        "real": torch.rand(critics, steps, b, 1, 28, 28, generator=g),
        "labels": torch.randint(NUM_CLASSES, (critics, steps, b), generator=g),
        "fake": torch.rand(b, 1, 28, 28, generator=g) * 2 - 1,
        "fake_labels": torch.randint(NUM_CLASSES, (b,), generator=g),
        "alpha": torch.rand(critics, steps, b, 1, 1, 1, generator=g),
        "shift": torch.randint(1, NUM_CLASSES, (critics, steps, b), generator=g),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--critics", type=int, default=20, help="cohort size m")
    parser.add_argument("--critic-steps", type=int, default=8, help="updates per critic")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one per client)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    critics = [critic_without_spectral_norm() for _ in range(args.critics)]
    draws = draws_for(args.critics, args.critic_steps, seed=1)
    load_before = os.getloadavg()

    looped = run_loop(copy.deepcopy(critics), draws)
    batched = run_vmap(copy.deepcopy(critics), draws)
    difference = max(
        float((dict(critic.named_parameters())[name] - batched[name][k]).detach().abs().max())
        for k, critic in enumerate(looped)
        for name in batched
    )
    loss_gap = difference_from_fedgs_loss(copy.deepcopy(critics[0]), draws)
    print(
        json.dumps({"max_abs_parameter_difference": difference, "loss_gap": loss_gap}), flush=True
    )
    if loss_gap > 1e-5:
        raise SystemExit(f"the benchmark's loss is not fedgs' critic_loss (gap {loss_gap:.3g})")

    seconds: dict[str, list[float]] = {"loop": [], "vmap": []}
    for repeat in range(args.repeats):
        for path, run in (("loop", run_loop), ("vmap", run_vmap)):
            fresh = copy.deepcopy(critics)
            start = time.perf_counter()
            run(fresh, draws)
            seconds[path].append(time.perf_counter() - start)
        ratio = seconds["loop"][-1] / seconds["vmap"][-1]
        print(
            json.dumps(
                {
                    "repeat": repeat,
                    **{p: s[-1] for p, s in seconds.items()},
                    "loop_over_vmap": ratio,
                }
            ),
            flush=True,
        )
    ratios = [lo / vm for lo, vm in zip(seconds["loop"], seconds["vmap"], strict=True)]
    summary = {
        "critics": args.critics,
        "critic_steps": args.critic_steps,
        "threads": args.threads,
        "median_s": {path: statistics.median(s) for path, s in seconds.items()},
        "ms_per_critic_step_loop": 1000
        * statistics.median(seconds["loop"])
        / (args.critics * args.critic_steps),
        "median_loop_over_vmap": statistics.median(ratios),
        "ratio_range": [min(ratios), max(ratios)],
        "load_before_after": [load_before, os.getloadavg()],
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
