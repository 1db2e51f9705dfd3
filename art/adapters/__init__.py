"""art.adapters: storage adapters (memory, sqlite, postgres) and the in-process local model."""
