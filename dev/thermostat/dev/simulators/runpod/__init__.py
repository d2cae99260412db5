"""The RunPod REST v2 simulator: the HTTP server (server), the pods' lifecycle (world), the GPU catalogue
(catalog) and the vLLM metrics a simulated pod serves through its proxy (vllm_exposition)."""
