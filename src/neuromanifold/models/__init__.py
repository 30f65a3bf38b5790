"""Real models: the functional dimension of any PyTorch module, and symmetry-aware parameter
counts of Hugging Face transformer configurations (docs/models.md)."""
