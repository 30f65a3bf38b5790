"""The paper's figures and other experiments, and the plotting they use."""
