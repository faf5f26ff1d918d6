"""Privacy mechanisms of Section 5 (output and objective perturbation)."""

from .mechanisms import clip_to_norm, gaussian_output_noise, output_perturbation, sample_objective_noise

__all__ = ["clip_to_norm", "gaussian_output_noise", "output_perturbation", "sample_objective_noise"]
