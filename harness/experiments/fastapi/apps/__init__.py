"""Applications under test (the FastAPI app of 000)."""
