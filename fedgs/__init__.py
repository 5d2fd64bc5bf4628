"""fedgs: federated, differentially private GANs (GS-WGAN and Fed-Avg GAN) on Flower.

The core library lives here; ``fedgs.server``, ``fedgs.client`` and ``fedgs.simulations`` are
installed from the repository's ``server/``, ``client/`` and ``simulations/`` folders.
"""

__version__ = "0.1.0"
