"""LLM calls: the Model seam, the client every call goes through, and art.chat."""
