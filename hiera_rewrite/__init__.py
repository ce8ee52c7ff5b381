"""hiera-rewrite: rewrite vendored FAIR Hiera source into fast, plain PyTorch."""

__version__ = "0.1.0"
