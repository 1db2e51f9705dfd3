"""What every part of art shares: the model base, JSON and bytes, usage, span ids,
secrets, logging."""
