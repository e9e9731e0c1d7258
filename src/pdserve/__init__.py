"""pdserve: prefill/decode disaggregated LLM serving on Kubernetes."""

__version__ = "0.1.0"
