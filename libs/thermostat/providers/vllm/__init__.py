"""vLLM: scraping a model server's /metrics through the pod proxy."""
