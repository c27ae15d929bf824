"""The PD router's image: vllm-router locked with hashes, its build context, its build.

A pd_cluster deployment puts vllm-router in front of its prefill and decode pools. vllm-router is its own
program (PyPI `vllm-router`, a Rust extension with a small Python launcher), so it gets its own small image
rather than riding in every vLLM image: locked (`lock`), generated (`image`), built (`build`)."""
