"""Issue 43, item 10: QAdapterConfig refuses non-finite and out-of-range settings in the API itself
(before: NaN/inf passed the ``<=``/``<`` checks and ``lora_dropout=2.0`` reached peft)."""

from __future__ import annotations

import math

import pytest

from iclr25.q_adapter import QAdapterConfig


@pytest.mark.parametrize("kw, message", [
    (dict(alpha_tilde=math.nan), "alpha_tilde must be a finite number"),
    (dict(alpha_tilde=math.inf), "alpha_tilde must be a finite number"),
    (dict(alpha_0=math.inf), "alpha_0 must be a finite number"),
    (dict(alpha_0=math.nan), "alpha_0 must be a finite number"),
    (dict(reg_beta=math.nan), "reg_beta must be a finite number"),
    (dict(gamma=math.nan), "gamma must be a finite number"),
    (dict(lora_dropout=2.0), "lora_dropout must be in [0, 1)"),
    (dict(lora_dropout=1.0), "lora_dropout must be in [0, 1)"),
    (dict(lora_dropout=-0.1), "lora_dropout must be in [0, 1)"),
    (dict(lora_dropout=math.nan), "lora_dropout must be a finite number"),
    (dict(lora_alpha=0), "lora_alpha must be > 0"),
])
def test_config_rejects_non_finite_and_out_of_range(kw, message):
    with pytest.raises(ValueError) as e:
        QAdapterConfig(**kw)
    assert message in str(e.value)


def test_config_keeps_valid_edges():
    cfg = QAdapterConfig(alpha_tilde=1e-6, alpha_0=0.0, gamma=0.0, reg_beta=0.0, lora_dropout=0.0)
    assert cfg.lora_dropout == 0.0 and cfg.alpha_0 == 0.0
    assert QAdapterConfig.official_code().reg_beta == 0.1


def test_loaded_config_is_checked(tmp_path):
    p = tmp_path / "cfg.json"
    d = QAdapterConfig().to_dict()
    d["alpha_tilde"] = float("nan")
    import json
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="alpha_tilde must be a finite number"):
        QAdapterConfig.load(p)
