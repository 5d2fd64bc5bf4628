"""User-facing scenarios (simulation runner, debugging scenario, communication cost)."""
