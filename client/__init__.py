"""Client side of fedgs: the Flower ClientApp, one private critic per writer."""
