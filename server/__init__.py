"""Server side of fedgs: the Flower ServerApp and the GS-WGAN strategy."""
