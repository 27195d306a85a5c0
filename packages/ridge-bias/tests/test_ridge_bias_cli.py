"""CLI as a subprocess: --help, tiny theory/simulate runs, bad input exit codes."""

import json
import os
import subprocess
import sys

import pytest

ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def run(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "iclr25.ridge_bias", *args], capture_output=True, text=True,
                       env=ENV, timeout=120)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_help_lists_subcommands():
    out = run("--help").stdout
    for sub in ("theory", "simulate", "digits-demo", "reproduce"):
        assert sub in out
    assert "--lam-grid" in run("theory", "--help").stdout
    assert "--quick" in run("reproduce", "--help").stdout


def test_theory_and_simulate_tiny(tmp_path):
    p = run("theory", "--scenario", "s1", "--lam-grid", "0.001", "1", "3", "--out", str(tmp_path))
    res = json.loads((tmp_path / "theory.json").read_text())
    assert [round(v, 3) for v in res["ADD"]] == [0.106, 1.191, 1.323]
    from iclr25.ridge_bias.plots import have_matplotlib

    assert (tmp_path / "theory.png").is_file() == have_matplotlib()  # PNG only with the [plot] extra
    assert p.stdout.strip().splitlines()[-1].startswith("theory:")
    run("simulate", "--scenario", "B", "--d", "40", "--mc-draws", "3", "--lam-grid", "0.1", "--no-plot",
        "--quiet", "--out", str(tmp_path))
    sim = json.loads((tmp_path / "simulate.json").read_text())
    assert len(sim["mc_mean"]) == 1 and len(sim["mc_mean"][0]) == 2
    # the 0.1 flags still work for one release, with a warning naming the new one
    p = run("simulate", "--scenario", "B", "--d", "40", "--seeds", "2", "--lam-grid", "0.1", "--no-plot",
            "--no-progress", "--out", str(tmp_path))
    assert "--seeds is deprecated" in p.stderr and "use --mc-draws" in p.stderr
    assert json.loads((tmp_path / "simulate.json").read_text())["config"]["mc_draws"] == 2


def test_version_and_default_out(tmp_path):
    from iclr25.ridge_bias import __version__

    assert run("--version").stdout.strip() == f"iclr25-ridge-bias {__version__}"
    p = subprocess.run([sys.executable, "-m", "iclr25.ridge_bias", "theory", "--lam-grid", "0.1", "--no-plot"],
                       capture_output=True, text=True, env=ENV, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "runs" / "ridge-bias" / "theory" / "theory.json").is_file()


def test_mixture_file_errors_name_the_real_problem(tmp_path):
    import numpy as np

    txt = tmp_path / "m.npz"
    txt.write_text("cov1,cov2\n1,2\n")
    p = run("theory", "--mixture-file", str(txt), "--no-plot", "--out", str(tmp_path), check=False)
    assert p.returncode == 2 and "not a NumPy .npz archive" in p.stderr and "pickle" not in p.stderr
    npy = tmp_path / "a.npz"
    with open(npy, "wb") as fh:
        np.save(fh, np.eye(2))
    p = run("theory", "--mixture-file", str(npy), "--no-plot", "--out", str(tmp_path), check=False)
    assert p.returncode == 2 and "a single .npy array" in p.stderr
    part = tmp_path / "p.npz"
    np.savez(part, cov1=np.eye(2))
    p = run("theory", "--mixture-file", str(part), "--no-plot", "--out", str(tmp_path), check=False)
    assert p.returncode == 2 and "missing array(s)" in p.stderr
    p = run("theory", "--mixture-file", str(tmp_path / "none.npz"), "--no-plot", check=False)
    assert p.returncode == 2 and "does not exist" in p.stderr


def test_config_file_and_rp(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("scenario: s3\nmodel: rp\nm: 50\nlam_grid: [0.001]\nplot: false\n")
    run("theory", "--config", str(cfg), "--out", str(tmp_path))
    assert json.loads((tmp_path / "theory.json").read_text())["config"]["m"] == 50
    run("theory", "--config", str(cfg), "--m-grid", "150", "1600", "--out", str(tmp_path))
    odd = json.loads((tmp_path / "theory.json").read_text())["ODD"]
    assert [round(o[0], 4) for o in odd] == [0.0699, 0.0707]  # spec S3 table (seed 0)


def test_p2_and_t_sweeps(tmp_path):
    run("theory", "--scenario", "s2", "--p2-grid", "0.1", "0.2", "--lam-grid", "0.001", "--no-plot", "--out", str(tmp_path))
    res = json.loads((tmp_path / "theory.json").read_text())
    assert res["p2"] == [0.1, 0.2] and round(res["ADD"][1][0], 3) == 1.192  # spec S2 at lam = 1e-3
    run("theory", "--scenario", "s2", "--model", "gradient_flow", "--t-grid", "1000", "--no-plot", "--out", str(tmp_path))
    assert round(json.loads((tmp_path / "theory.json").read_text())["ADD"][0], 3) == 1.192  # t = 1/lam


def test_digits_demo_tiny(tmp_path):
    p = run("digits-demo", "--splits", "2", "--lam-grid", "0.1", "1", "--p2-values", "0.2", "--no-plot",
            "--out", str(tmp_path))
    res = json.loads((tmp_path / "digits.json").read_text())
    assert len(res["theory"][0]) == 2 and 0.0 <= res["ordering_agreement"] <= 1.0
    assert p.stdout.strip().splitlines()[-1].startswith("digits: ordering agreement")


@pytest.mark.parametrize(
    "args,needle",
    [
        (["theory", "--lam-grid", "0", "1"], "lam_grid"),
        (["theory", "--p2", "1.5"], "proportions"),
        (["theory", "--model", "rp"], "--m"),
        (["theory", "--m", "10"], "--m/--draws are for --model rp"),  # trial s52: silently ignored
        (["simulate", "--model", "gradient_flow", "--draws", "3"], "--m/--draws are for --model rp"),
    ],
)
def test_bad_input_exit_2(args, needle, tmp_path):
    p = run(*args, "--out", str(tmp_path), check=False)
    assert p.returncode == 2
    assert needle in p.stderr and "Traceback" not in p.stderr


def test_theory_extreme_lam_exit_codes(tmp_path):
    """Trial s52: --lam-grid 1e-300 ended in a traceback (exit 1) and 1e300 wrote NaN (bare NaN in theory.json)."""
    p = run("theory", "--scenario", "s2", "--d", "50", "--lam-grid", "0.1", "1e-300", "--out", str(tmp_path / "a"),
            check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "RuntimeWarning" not in p.stderr, p.stderr
    assert "lam" in p.stderr.strip().splitlines()[-1]
    run("theory", "--scenario", "s2", "--d", "50", "--lam-grid", "0.1", "1e300", "--out", str(tmp_path / "b"),
        "--no-plot")
    res = json.loads((tmp_path / "b" / "theory.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert all(v is not None for row in res["R_joint"] for v in row)


@pytest.mark.parametrize("field,value,needle", [
    ("noise_var", [0.1, 0.2, 0.3], "noise_var has shape (3,)"),  # was silently truncated to 2 values
    ("n", [60, 70], "n has shape (2,)"),  # was a TypeError traceback
    ("cov1", ["a"] * 6, "array 'cov1' is not numeric"),
])
def test_mixture_file_bad_arrays_exit_2_naming_them(tmp_path, field, value, needle):
    """Trial s52: malformed optional arrays of --mixture-file (one line, exit 2, the array named)."""
    import numpy as np

    d = 6
    arrs = dict(cov1=np.ones(d), cov2=2 * np.ones(d), teacher1=np.ones(d) / d, teacher2=-np.ones(d) / d)
    arrs[field] = np.array(value)
    np.savez(tmp_path / "m.npz", **arrs)
    p = run("theory", "--mixture-file", str(tmp_path / "m.npz"), "--lam-grid", "0.1", "--out", str(tmp_path / "o"),
            "--no-plot", check=False)
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_mixture_file_scalar_noise_applies_to_both_groups(tmp_path):
    import numpy as np

    d = 6
    base = dict(cov1=np.ones(d), cov2=2 * np.ones(d), teacher1=np.ones(d) / d, teacher2=-np.ones(d) / d)
    np.savez(tmp_path / "s.npz", **base, noise_var=np.array(0.3))  # 0-d: was an IndexError traceback
    np.savez(tmp_path / "v.npz", **base, noise_var=np.array([0.3, 0.3]))
    for f in ("s", "v"):
        run("theory", "--mixture-file", str(tmp_path / f"{f}.npz"), "--lam-grid", "0.1", "1", "--risk", "noisy",
            "--out", str(tmp_path / f), "--no-plot")
    a, b = (json.loads((tmp_path / f / "theory.json").read_text()) for f in ("s", "v"))
    assert a["R_joint"] == b["R_joint"]


# ---------------------------------------------------------------- follow-up (session 52): messages that name the input

@pytest.mark.parametrize("cmd", ["theory", "simulate"])
def test_fractional_n_is_named_as_given(cmd, tmp_path, capsys):
    """`--n 0.5` was rounded to 0 first and reported as 'got 0'."""
    from iclr25.ridge_bias.cli import main

    assert main([cmd, "--n", "0.5", "--d", "4", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "n=0.5" in err and "got 0" not in err and "Traceback" not in err, err


def test_theory_and_simulator_refuse_a_group_under_one_sample_alike(tmp_path, capsys):
    """p2 n = 0.1 < 1: the theory's EDD computed a separate model on 0.1 samples (exit 0) while the
    simulator refused the empty group; both refuse it with one message."""
    from iclr25.ridge_bias import MixtureSpec
    from iclr25.ridge_bias.cli import main
    from iclr25.ridge_bias.scenarios import scenario

    msgs = []
    for cmd in ("theory", "simulate"):
        assert main([cmd, "--p2", "0.001", "--n", "100", "--d", "4", "--out", str(tmp_path / cmd)]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        msgs.append(err.split("error: ", 1)[-1])
    assert msgs[0] == msgs[1] and "group 2" in msgs[0] and "p_2 n = 0.001 * 100 = 0.1 < 1" in msgs[0], msgs
    mix = scenario("s2", 4, 10)
    with pytest.raises(ValueError, match=r"group 2 .*p_2 n = 0\.05 \* 10 = 0\.5 < 1"):
        MixtureSpec(mix.groups, (0.95, 0.05), 10.0)
    MixtureSpec(mix.groups, (0.9, 0.1), 10.0)  # one sample per group is allowed


@pytest.mark.parametrize("t", ["0", "-1"])
def test_gradient_flow_time_errors_name_t(t, tmp_path, capsys):
    """--t-grid 0 said 'the ridge penalty must be ... > 0'."""
    from iclr25.ridge_bias.cli import main
    from iclr25.ridge_bias.theory import gradient_flow_risk_theory

    assert main(["theory", "--model", "gradient_flow", f"--t-grid={t}", "--d", "4", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "t_grid=" in err and "gradient-flow time" in err and "ridge penalty" not in err, err
    from iclr25.ridge_bias.scenarios import scenario

    with pytest.raises(ValueError, match="gradient-flow time") as e:
        gradient_flow_risk_theory(scenario("s2", 4, 8), float(t))
    assert "ridge penalty" not in str(e.value)
