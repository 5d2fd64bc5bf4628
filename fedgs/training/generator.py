"""The generator's side of a GS-WGAN step: propose fake batches, apply sanitized gradients.

It needs no data: the sanitized rows x_i-gradients are back-propagated through G's Jacobian,
so the same object serves the Flower server and the plain loop.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fedgs.models import ConditionalResNetGenerator, make_ema, mode_seeking_loss
from fedgs.training.hparams import GSWGANConfig
from fedgs.training.smoothing import smooth_images


@dataclass
class GeneratorQuery:
    """The fake batches for one client, which its critic steps train on (cycled when there are
    fewer than steps; the last one is also the batch whose gradient comes back), and the labels
    they were generated for."""

    images: list[torch.Tensor]
    labels: list[torch.Tensor]


class GeneratorTrainer:
    """G, its EMA copy and optimizer; one :meth:`propose` / :meth:`apply` pair per step."""

    def __init__(
        self,
        num_classes: int,
        config: GSWGANConfig,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        self.config = config
        self.num_classes = num_classes
        self.seed = seed
        self.device = torch.device(device)
        self.rng = torch.Generator().manual_seed(seed)  # on the CPU: the same latents anywhere
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.generator = ConditionalResNetGenerator(
                num_classes, config.z_dim, config.generator_width
            ).to(self.device)
        self.ema = make_ema(self.generator, config.ema_decay)
        self.optimizer = torch.optim.Adam(
            self.generator.parameters(), lr=config.lr_generator, betas=(config.beta1, config.beta2)
        )
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None
        self._codes: dict[str, torch.Tensor] = {}

    def restart_from_generator(self) -> None:
        """Make G's current weights the starting point: a fresh EMA copy of them and fresh Adam
        moments (after public pretraining, whose optimizer is not G's private one)."""
        self.ema = make_ema(self.generator, self.config.ema_decay)
        self.optimizer = torch.optim.Adam(
            self.generator.parameters(),
            lr=self.config.lr_generator,
            betas=(self.config.beta1, self.config.beta2),
        )

    def latent(self, count: int, paired: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Latent codes and uniform labels: data-independent, so free of privacy cost. ``paired``
        (``count`` even): the second half's labels are the first half's, the pairs (i, i +
        count/2) of the mode-seeking term."""
        z = torch.randn(count, self.config.z_dim, generator=self.rng)
        if paired:
            y = torch.randint(self.num_classes, (count // 2,), generator=self.rng).repeat(2)
        else:
            y = torch.randint(self.num_classes, (count,), generator=self.rng)
        return z.to(self.device), y.to(self.device)

    def client_code(self, client: str) -> torch.Tensor:
        """The client's fixed latent code (``client_code_dims`` standard normal values, drawn
        from the run seed and the client's name): G's sampling draws these dims from the same
        normal, so it samples between the codes it was trained at."""
        if client not in self._codes:
            digest = hashlib.sha256(f"{self.seed}:{client}".encode()).digest()
            rng = torch.Generator().manual_seed(int.from_bytes(digest[:8], "big"))
            self._codes[client] = torch.randn(self.config.client_code_dims, generator=rng)
        return self._codes[client]

    def _coded(self, z: torch.Tensor, clients: Sequence[str], rows: int) -> torch.Tensor:
        """``z`` with the last ``client_code_dims`` of each client's ``rows`` rows set to its
        code (unchanged when the codes are off)."""
        dims = self.config.client_code_dims
        if dims == 0:
            return z
        codes = torch.stack([self.client_code(c) for c in clients]).to(z.device)
        z = z.clone()
        z[:, -dims:] = codes.repeat_interleave(rows, dim=0)
        return z

    def propose(self, num_clients: int, clients: Sequence[str] = ()) -> list[GeneratorQuery]:
        """Fresh fake batches for each client; keeps the graph of every client's answer batch
        (drawn in label-sharing pairs when the mode-seeking term is on). With client codes on,
        ``clients`` names the client of each query, in order."""
        b, n_dis = self.config.batch_size, self.config.fakes_per_query
        if self.config.client_code_dims and len(clients) != num_clients:
            raise ValueError(f"client codes need {num_clients} client names, got {len(clients)}")
        self.generator.train()
        with torch.no_grad():
            z, y = self.latent(num_clients * (n_dis - 1) * b)
            z = self._coded(z, clients, (n_dis - 1) * b)
            warmup = self.generator(z, y).split(b) if n_dis > 1 else ()
            warmup_labels = y.split(b) if n_dis > 1 else ()
        # the config ensures an even batch when the mode-seeking term is on
        z, y = self.latent(num_clients * b, paired=self.config.diversity_weight > 0)
        z = self._coded(z, clients, b)
        answer_batch = self.generator(z, y)
        self._pending = (answer_batch, z)
        queries = []
        for k, (x, labels) in enumerate(
            zip(answer_batch.detach().split(b), y.split(b), strict=True)
        ):
            rows = slice(k * (n_dis - 1), (k + 1) * (n_dis - 1))
            queries.append(
                GeneratorQuery(images=[*warmup[rows], x], labels=[*warmup_labels[rows], labels])
            )
        return queries

    def apply(self, gradients: list[torch.Tensor | None]) -> int:
        """Back-propagate the mean of the answered clients' sanitized gradients (blurred when
        ``gradient_smoothing`` is set: post-processing, no privacy cost), plus the mode-seeking
        term over the whole answer batch when ``diversity_weight`` is set (no data, no privacy
        cost); Adam step; EMA.

        ``gradients[k]`` is client k's (B, 784) reply, or None when it did not answer (dropped
        replies leave G untouched if no client answered). Returns the number of rows used.
        """
        if self._pending is None:
            raise RuntimeError("apply() called without a pending propose()")
        (answer_batch, latents), self._pending = self._pending, None
        b = self.config.batch_size
        kept = [k for k, g in enumerate(gradients) if g is not None]
        if not kept:
            return 0
        outputs = torch.cat([answer_batch[k * b : (k + 1) * b] for k in kept])
        upstream = torch.cat([gradients[k].to(self.device) for k in kept]).view_as(outputs)
        upstream = smooth_images(upstream, self.config.gradient_smoothing)
        roots, root_gradients = [outputs], [upstream / outputs.shape[0]]
        if self.config.diversity_weight > 0:
            roots.append(mode_seeking_loss(answer_batch, latents))
            root_gradients.append(torch.tensor(self.config.diversity_weight, device=self.device))
        self.optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(roots, root_gradients)
        self.optimizer.step()
        self.ema.update_parameters(self.generator)
        return int(outputs.shape[0])

    @torch.no_grad()
    def state_dict(self) -> dict[str, Any]:
        """G, its EMA copy, the optimizer and the latent RNG: a checkpoint's trainer state."""
        return {
            "generator": self.generator.state_dict(),
            "ema": self.ema.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "latent_rng": self.rng.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.generator.load_state_dict(state["generator"])
        self.ema.load_state_dict(state["ema"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.set_state(state["latent_rng"])

    def sample(self, labels: torch.Tensor, use_ema: bool = True, seed: int = 0) -> torch.Tensor:
        """Images (on the CPU) for the given labels from the EMA (default) or the raw generator,
        eval mode."""
        model = self.ema.module if use_ema else self.generator
        was_training = model.training
        model.eval()
        z = torch.randn(
            labels.shape[0], self.config.z_dim, generator=torch.Generator().manual_seed(seed)
        )
        images = model(z.to(self.device), labels.to(self.device))
        model.train(was_training)
        return images.cpu()
