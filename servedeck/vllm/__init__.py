"""vllm"""
