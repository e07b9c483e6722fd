"""Internals of the vLLM test double (gpuhost-vllm-double)."""
