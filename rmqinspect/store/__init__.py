"""Read-only model of a broker store directory."""
