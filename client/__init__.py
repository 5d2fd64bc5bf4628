"""Client side of fedgs (Flower ClientApp with private discriminators); filled by the Flower issues."""
