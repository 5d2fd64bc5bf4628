"""GS-WGAN training pieces shared by the Flower apps and the single-process loop."""
