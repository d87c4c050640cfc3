"""The fuse pipeline: kernel selection inside torch.compile (runtime/) and the understand/act/verify stages."""
