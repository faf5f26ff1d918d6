"""Privacy mechanisms of Section 5 (output and objective perturbation) and their accounting (Appendix C)."""

from .accounting import (NO_GLM, NO_GUARANTEE, SGD_CAVEAT, NoGuaranteeError, PrivacyParameterError,
                         gaussian_epsilon, objective_assumptions, output_epsilons, participation, pld_epsilon,
                         privacy_report, rdp_epsilon, release_counts, theorem_c1_epsilon, theorem_c2_condition,
                         theorem_c2_epsilon, training_rounds)
from .mechanisms import (clip_to_norm, gaussian_output_noise, objective_noise_draws, output_perturbation,
                         sample_objective_noise, scale_objective_noise, standard_normal_rows)

__all__ = [
    "clip_to_norm", "gaussian_output_noise", "objective_noise_draws", "output_perturbation",
    "sample_objective_noise", "scale_objective_noise", "standard_normal_rows",
    "NO_GLM", "NO_GUARANTEE", "SGD_CAVEAT", "NoGuaranteeError", "PrivacyParameterError",
    "gaussian_epsilon", "objective_assumptions", "output_epsilons", "participation", "pld_epsilon",
    "privacy_report", "rdp_epsilon", "release_counts", "theorem_c1_epsilon", "theorem_c2_condition",
    "theorem_c2_epsilon", "training_rounds",
]
