"""Storage: the StorageAdapter contract and its records, and opening an adapter from a URL."""
