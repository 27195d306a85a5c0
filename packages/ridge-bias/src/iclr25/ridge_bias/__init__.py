"""iclr25-ridge-bias: An Effective Theory of Bias Amplification (Subramonian et al., ICLR 2025).

Exact (deterministic-equivalent) group-wise test risks of ridge regression, random-projection ridge
and gradient flow on a two-group Gaussian mixture, the disparity metrics EDD / ODD / ADD, and a
Monte-Carlo twin for validation.
"""

from ._version import __version__
from .digits import ColoredDigits, digits_experiment, digits_mixture, load_colored_digits
from .disparity import disparity_metrics
from .random_projections import projected_mixture, projection_matrix, rp_risk_theory
from .scenarios import SCENARIOS, scenario
from .simulate import (
    fit_gradient_flow,
    fit_ridge,
    group_risks,
    sample_mixture,
    simulate_gradient_flow,
    simulate_ridge,
    simulate_ridge_decomposition,
    simulate_rp,
)
from .theory import (
    GroupSpec,
    MixtureSpec,
    TheoryResult,
    gradient_flow_risk_theory,
    ridge_risk_theory,
    separate_risk_theory,
    solve_fixed_point,
)

__all__ = [
    "__version__",
    "GroupSpec",
    "MixtureSpec",
    "TheoryResult",
    "solve_fixed_point",
    "ridge_risk_theory",
    "separate_risk_theory",
    "gradient_flow_risk_theory",
    "disparity_metrics",
    "rp_risk_theory",
    "projection_matrix",
    "projected_mixture",
    "simulate_ridge",
    "simulate_ridge_decomposition",
    "simulate_rp",
    "simulate_gradient_flow",
    "sample_mixture",
    "fit_ridge",
    "fit_gradient_flow",
    "group_risks",
    "scenario",
    "SCENARIOS",
    "ColoredDigits",
    "load_colored_digits",
    "digits_mixture",
    "digits_experiment",
]
