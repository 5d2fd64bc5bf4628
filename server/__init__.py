"""Server side of fedgs (Flower ServerApp and strategies); filled by the Flower issues."""
