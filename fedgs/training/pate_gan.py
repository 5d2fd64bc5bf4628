"""PATE-GAN (Jordon, Yoon, van der Schaar, ICLR 2019) with clients as teachers.

Client side (:class:`TeacherDiscriminator`): a private discriminator trained as a real/fake
classifier (binary cross-entropy, as in the paper) on the client's data against the server's
fakes; it votes real where its logit is positive. Server side (:class:`PateGANTrainer`): G, its
EMA and a student discriminator; per step it proposes the teachers' training and ballot batches,
trains the student on the ballot with the noisy labels (n_S steps) and G against the student
(one step). G uses the non-saturating loss -log S(G(z)) instead of the paper's log(1 - S(G(z))),
whose gradient vanishes while the student calls every fake fake. No step of the server touches
data: the noisy labels are its only input that depends on clients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedgs.models import ConditionalDCGANDiscriminator
from fedgs.training.critic import PrivateCritic
from fedgs.training.generator import GeneratorQuery, GeneratorTrainer
from fedgs.training.hparams import GSWGANConfig


class TeacherDiscriminator(PrivateCritic):
    """A client's teacher: GS-WGAN's critic network and state, trained with BCE instead of WGAN-GP.

    The second number of each step's stats is the gap between the mean real and fake logits,
    which stands where a critic reports its Wasserstein estimate.
    """

    def _critic_step(
        self, fake: torch.Tensor, fake_labels: torch.Tensor, step: int = 0
    ) -> tuple[float, float]:
        """One BCE step; ``step`` is unused: BCE has no label-mismatch term to schedule."""
        real, real_labels = self._real_batch()
        real_logits = self.critic(real, real_labels)
        fake_logits = self.critic(fake.detach(), fake_labels)
        loss = F.binary_cross_entropy_with_logits(
            real_logits, torch.ones_like(real_logits)
        ) + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach()), float((real_logits.mean() - fake_logits.mean()).detach())

    @torch.no_grad()
    def vote(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """True where the teacher calls the sample real."""
        return self.critic(images, labels) > 0


@dataclass(frozen=True)
class StudentStats:
    """What one server step did: the student's and G's losses, the share labelled real."""

    student_loss: float
    generator_loss: float
    real_fraction: float


class PateGANTrainer:
    """G (with EMA, via GeneratorTrainer) and the student discriminator S."""

    def __init__(self, num_classes: int, config: GSWGANConfig, seed: int = 0) -> None:
        self.config = config
        self.num_classes = num_classes
        self.generator = GeneratorTrainer(num_classes, config, seed=seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            self.student = ConditionalDCGANDiscriminator(num_classes, config.critic_width)
        self.student_optimizer = torch.optim.Adam(
            self.student.parameters(), lr=config.lr_critic, betas=(config.beta1, config.beta2)
        )
        self._ballot: GeneratorQuery | None = None

    @torch.no_grad()
    def _batches(self, count: int) -> GeneratorQuery:
        b = self.config.batch_size
        z, y = self.generator.latent(count * b)
        self.generator.generator.train()
        images = self.generator.generator(z, y)
        return GeneratorQuery(images=list(images.split(b)), labels=list(y.split(b)))

    def propose(self, teacher_batches: int, ballot_batches: int) -> tuple[GeneratorQuery, ...]:
        """Fakes for the teachers' training steps and the ballot they vote on (kept for
        :meth:`apply`). Both are sent to every sampled teacher."""
        training = self._batches(teacher_batches)
        self._ballot = self._batches(ballot_batches)
        return training, self._ballot

    def apply(self, labels: torch.Tensor | None) -> StudentStats | None:
        """Train S on the ballot with the noisy labels (one step per batch), then G against S.

        ``labels`` (bool, one per ballot sample) is None when no teacher answered: the ballot is
        dropped and nothing trains.
        """
        if self._ballot is None:
            raise RuntimeError("apply() called without a pending propose()")
        ballot, self._ballot = self._ballot, None
        if labels is None:
            return None
        targets = labels.to(torch.float32).split(self.config.batch_size)
        losses = []
        for images, classes, target in zip(ballot.images, ballot.labels, targets, strict=True):
            logits = self.student(images, classes)
            loss = F.binary_cross_entropy_with_logits(logits, target)
            self.student_optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.student_optimizer.step()
            losses.append(float(loss.detach()))
        generator_loss = self._generator_step()
        return StudentStats(sum(losses) / len(losses), generator_loss, float(labels.float().mean()))

    def _generator_step(self) -> float:
        trainer = self.generator
        z, y = trainer.latent(self.config.batch_size)
        trainer.generator.train()
        logits = self.student(trainer.generator(z, y), y)
        loss = F.softplus(-logits).mean()  # -log sigmoid(S): non-saturating
        trainer.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        trainer.optimizer.step()
        trainer.ema.update_parameters(trainer.generator)
        return float(loss.detach())

    def sample(self, labels: torch.Tensor) -> torch.Tensor:
        return self.generator.sample(labels)

    def state_dict(self) -> dict[str, object]:
        """G's checkpoint state (the GeneratorTrainer's) and the student's."""
        return self.generator.state_dict() | {
            "student": self.student.state_dict(),
            "student_optimizer": self.student_optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.generator.load_state_dict(state)
        self.student.load_state_dict(state["student"])
        self.student_optimizer.load_state_dict(state["student_optimizer"])
