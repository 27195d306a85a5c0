"""DPO on a chain of preferences: tabular policy and causal LMs (torch; ``[dpo]`` extra).

The paper's experiment (Fig. 3): a policy is DPO-trained on synthetic pairwise preferences over
three options (dog, cat, bird) — pairs (dog, cat) with ``P(dog > cat) = p12`` and (cat, bird) with
``P(cat > bird) = p23``; (dog, bird) is never shown. The DPO implicit reward
``r(y) = beta log(pi(y|x) / pi_ref(y|x))`` defines the learned held-out preference
``p13 = sigmoid(r(dog) - r(bird))``. At the DPO optimum the rewards are a BT model fitted to the
training proportions, so ``p13 = g(p12_hat, p23_hat)`` (Result 1) and inherits its sensitivity.

Backends:

- ``tabular``: ``pi = softmax(theta)``, ``theta in R^3``, ``pi_ref`` uniform; the DPO loss on the
  aggregated counts is minimised to convergence with L-BFGS (float64).
- ``tiny-gpt2``: a randomly initialised 2-layer GPT-2 (core ``tiny_causal_lm``), a 4-token prompt,
  one token per option; Adam, minibatches of pairs, ``pi_ref`` a frozen copy (spec item 4).
- ``hf``: any Hugging Face causal LM and tokenizer (e.g. ``meta-llama/Meta-Llama-3-8B-Instruct``,
  the paper's model) on a text prompt with the options as responses; same loop.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from iclr25.core.lm import dpo_loss, sequence_logprobs

from ._checks import check_probabilities
from .closed_form import bt_predict
from .mle import single_threaded_blas

__all__ = [
    "ChainData",
    "make_chain_data",
    "dpo_tabular",
    "OptionBatch",
    "tiny_gpt2_options",
    "tokenize_options",
    "train_dpo_lm",
    "dpo_chain_experiment",
]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one intra-op thread (restored afterwards). Tiny models and 3-parameter problems
    are many times slower with 2+ threads on a shared machine (spec: ~60x for tiny matmuls)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@dataclass(frozen=True)
class ChainData:
    """Pairwise DPO training data on the chain option0 - option1 - option2.

    Attributes:
        chosen, rejected: ``(N,)`` int64 option indices of each preference pair.
        p12_hat, p23_hat: empirical ``P(0 > 1)`` and ``P(1 > 2)`` of the data.
    """

    chosen: np.ndarray
    rejected: np.ndarray
    p12_hat: float
    p23_hat: float

    def wins(self) -> np.ndarray:
        """``(3, 3)`` counts ``W[i, j]`` = pairs with ``i`` chosen over ``j``."""
        W = np.zeros((3, 3))
        np.add.at(W, (self.chosen, self.rejected), 1.0)
        return W


def make_chain_data(p12: float, p23: float, n_pairs: int = 500, *, sampling: str = "exact",
                    seed: int = 0) -> ChainData:
    """Build the training pairs: ``n_pairs`` per trained edge (0,1) and (1,2).

    Args:
        p12, p23: preference probabilities in (0, 1).
        n_pairs: pairs per edge (``>= 1``).
        sampling: ``"exact"`` (``round(p * n_pairs)`` wins; the proportions are the targets up to
            rounding) or ``"bernoulli"`` (each pair's winner drawn independently).
        seed: seed of the Bernoulli draws and of the pair order.

    Returns:
        :class:`ChainData` (shuffled).

    Raises:
        ValueError: bad probability, ``n_pairs < 1`` or unknown ``sampling``.
    """
    check_probabilities([p12, p23], "p12/p23")
    if n_pairs < 1:
        raise ValueError(f"n_pairs must be >= 1, got {n_pairs}")
    rng = np.random.default_rng(seed)
    if sampling == "exact":
        w12, w23 = int(round(p12 * n_pairs)), int(round(p23 * n_pairs))
    elif sampling == "bernoulli":
        w12, w23 = int(rng.binomial(n_pairs, p12)), int(rng.binomial(n_pairs, p23))
    else:
        raise ValueError(f"sampling must be 'exact' or 'bernoulli', got {sampling!r}")
    ch = np.array([0] * w12 + [1] * (n_pairs - w12) + [1] * w23 + [2] * (n_pairs - w23), dtype=np.int64)
    rj = np.array([1] * w12 + [0] * (n_pairs - w12) + [2] * w23 + [1] * (n_pairs - w23), dtype=np.int64)
    perm = rng.permutation(ch.size)
    return ChainData(ch[perm], rj[perm], w12 / n_pairs, w23 / n_pairs)


def dpo_tabular(W, *, beta: float = 0.1, ref_logp=None, tol: float = 1e-13, max_iter: int = 500
                ) -> dict[str, Any]:
    """Tabular DPO on aggregated preference counts (spec item 3), minimised with L-BFGS (scipy).

    Loss: ``(1/N) sum_ij W_ij * dpo_loss(theta_i, theta_j)`` with ``log pi = log_softmax(theta)``.

    Args:
        W: ``(n, n)`` counts, ``W[i, j]`` = pairs with ``i`` chosen over ``j``.
        beta: DPO ``beta > 0`` (0.1, the DPO default).
        ref_logp: ``(n,)`` reference log-probabilities (default uniform).
        tol: L-BFGS gradient tolerance.
        max_iter: L-BFGS iterations.

    Returns:
        dict with ``theta`` (n,), ``rewards`` ``beta (log pi - log pi_ref)`` (n,),
        ``implied`` (n, n) ``sigmoid(r_i - r_j)``, ``loss``, ``grad_norm``, ``converged``.

    Raises:
        ValueError: bad ``W`` (not square, negative, no pairs) or ``beta <= 0``.
    """
    Wn = np.asarray(W, dtype=np.float64)
    if Wn.ndim != 2 or Wn.shape[0] != Wn.shape[1] or (Wn < 0).any() or Wn.sum() <= 0:
        raise ValueError("W must be a square matrix of non-negative counts with at least one pair")
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    n = Wn.shape[0]
    iw, jw = np.nonzero(Wn)
    w = torch.as_tensor(Wn[iw, jw] / Wn.sum())
    iw_t, jw_t = torch.as_tensor(iw), torch.as_tensor(jw)
    ref = torch.full((n,), -math.log(n), dtype=torch.float64) if ref_logp is None else \
        torch.as_tensor(np.asarray(ref_logp, dtype=np.float64))
    with one_thread():
        return _dpo_tabular(w, iw_t, jw_t, ref, n, beta, tol, max_iter)


def _dpo_tabular(w, iw_t, jw_t, ref, n, beta, tol, max_iter) -> dict[str, Any]:
    # scipy's L-BFGS on torch's loss and gradient: torch.optim.LBFGS imports torch._dynamo on its
    # first step (tens of seconds on a busy machine) for a 3-parameter problem.
    from scipy.optimize import minimize

    def fg(x):
        theta = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        logp = torch.log_softmax(theta, 0)
        losses, _, _ = dpo_loss(logp[iw_t], logp[jw_t], ref[iw_t], ref[jw_t], beta=beta, reduction="none")
        loss = (w * losses).sum()
        (g,) = torch.autograd.grad(loss, theta)
        return float(loss.detach()), g.numpy()

    x = np.zeros(n)
    with single_threaded_blas():
        for _ in range(3):  # restart L-BFGS (fresh curvature memory) if it stopped early
            res = minimize(fg, x, jac=True, method="L-BFGS-B",
                           options={"maxiter": max_iter, "gtol": tol, "ftol": 0.0, "maxcor": 20})
            x = res.x
            if np.abs(res.jac).max() < 1e-10:
                break
    loss, g = fg(x)
    theta = torch.as_tensor(x)
    logp = torch.log_softmax(theta, 0)
    r = beta * (logp - ref)
    implied = torch.sigmoid(r[:, None] - r[None, :]).numpy()
    gn = float(np.abs(g).max())
    return dict(theta=x.copy(), rewards=r.numpy(), implied=implied, loss=loss, grad_norm=gn, converged=bool(gn < 1e-8))


@dataclass
class OptionBatch:
    """The option sequences of one prompt: ``input_ids``, ``attention_mask``, ``response_mask``,
    each ``(n_options, seq)`` (right padded); row ``o`` is prompt + option ``o``."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor

    def to(self, device) -> OptionBatch:
        return OptionBatch(self.input_ids.to(device), self.attention_mask.to(device), self.response_mask.to(device))


def tiny_gpt2_options(n_options: int = 3, prompt_len: int = 4, *, seed: int = 0):
    """The spec's tiny-LM setting: a random 2-layer GPT-2 (vocab 16, 16 positions, width 64),
    prompt = ``prompt_len`` fixed tokens ``1..prompt_len``, option ``o`` = the single token
    ``prompt_len + 1 + o``.

    Returns:
        ``(model, OptionBatch)``.
    """
    from iclr25.core.lm import tiny_causal_lm

    if prompt_len + 1 + n_options > 14:
        raise ValueError("prompt_len + n_options too large for the 16-token vocabulary")
    model = tiny_causal_lm(vocab_size=16, n_positions=16, n_embd=64, n_layer=2, n_head=2,
                           eos_token_id=15, pad_token_id=14, seed=seed)
    prompt = torch.arange(1, prompt_len + 1)
    ids = torch.stack([torch.cat([prompt, torch.tensor([prompt_len + 1 + o])]) for o in range(n_options)])
    resp = torch.zeros_like(ids)
    resp[:, -1] = 1
    return model, OptionBatch(ids, torch.ones_like(ids), resp)


def tokenize_options(tokenizer, prompt: str, options: Sequence[str]) -> OptionBatch:
    """Tokenise ``prompt + option`` for each option (Hugging Face tokenizer), marking the option
    tokens as the response.

    Raises:
        ValueError: an empty option, or an option that adds no token after the prompt.
    """
    if not options or any(not o for o in options):
        raise ValueError("options must be non-empty strings")
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    rows, masks = [], []
    for o in options:
        full = tokenizer(prompt + o, add_special_tokens=False)["input_ids"]
        # the boundary may merge; count the shared prefix
        shared = 0
        while shared < min(len(p_ids), len(full)) and p_ids[shared] == full[shared]:
            shared += 1
        if shared == len(full) or shared == 0:
            raise ValueError(f"option {o!r} adds no token after the prompt (or the prompt is empty)")
        rows.append(full)
        masks.append([0] * shared + [1] * (len(full) - shared))
    L = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(rows), L), pad, dtype=torch.long)
    am = torch.zeros((len(rows), L), dtype=torch.long)
    rm = torch.zeros((len(rows), L), dtype=torch.long)
    for t, (r, m) in enumerate(zip(rows, masks)):
        ids[t, : len(r)] = torch.tensor(r)
        am[t, : len(r)] = 1
        rm[t, : len(m)] = torch.tensor(m)
    return OptionBatch(ids, am, rm)


def train_dpo_lm(model, batch: OptionBatch, data: ChainData, *, beta: float = 0.1, lr: float = 1e-3,
                 steps: int = 300, batch_size: int = 64, seed: int = 0, ref_model=None,
                 progress: bool = False, checkpoint_dir: str | Path | None = None,
                 checkpoint_every: int = 0) -> dict[str, Any]:
    """DPO-train a causal LM on the chain data (minibatch Adam; Rafailov et al. 2023 Eq. 7).

    All pairs share one prompt, so each step scores the ``n_options`` sequences once
    (``sequence_logprobs``) and gathers them for a minibatch of ``batch_size`` pairs.

    Args:
        model: causal LM (``forward(input_ids, attention_mask).logits``), trained in place.
        batch: :class:`OptionBatch` of the options.
        data: the pairs.
        beta, lr, steps, batch_size: DPO/Adam hyperparameters (spec item 4 defaults).
        seed: seed of the minibatch order.
        ref_model: frozen reference (default: a deep copy of ``model`` before training).
        progress: show a tqdm bar.
        checkpoint_dir: folder for ``model.safetensors`` + ``trainer_state.pt`` (optimizer, step,
            minibatch order, loss history). If it already holds a checkpoint, training resumes from
            it (``model`` must be the same initial model, which also serves as the reference; a
            checkpoint saved with another ``beta``, ``lr``, ``batch_size``, ``seed`` or number of
            pairs, or past ``steps``, is refused).
        checkpoint_every: save every this many steps (0: only at the end, when a folder is given).

    Returns:
        dict with ``implied`` (n, n) ``sigmoid(r_i - r_j)`` of the implicit rewards ``r`` (n,),
        ``rewards``, ``loss_history`` (per step), ``final_full_loss`` (DPO loss on all pairs),
        ``resumed_from`` (step, 0 when started fresh).
    """
    from iclr25.core.progress import progress as bar

    if steps < 1 or batch_size < 1:
        raise ValueError("steps and batch_size must be >= 1")
    if ref_model is None:
        ref_model = copy.deepcopy(model)
    ref_model.eval()
    model.train()
    device = next(model.parameters()).device
    batch = batch.to(device)
    with torch.no_grad():
        ref = sequence_logprobs(ref_model, batch.input_ids, batch.attention_mask, batch.response_mask)
    ch = torch.as_tensor(data.chosen, device=device)
    rj = torch.as_tensor(data.rejected, device=device)
    n = ch.numel()
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    hist: list[float] = []
    perm, pos = torch.randperm(n, generator=gen), 0
    start = 0
    #: what a checkpoint must have been trained with (more ``steps`` continue it; Adam's saved lr would win)
    ident = {"beta": float(beta), "lr": float(lr), "batch_size": int(batch_size), "seed": int(seed), "n_pairs": int(n)}
    ck = Path(checkpoint_dir) if checkpoint_dir is not None else None
    if ck is not None and (ck / "trainer_state.pt").is_file():
        from safetensors.torch import load_model

        load_model(model, str(ck / "model.safetensors"), device=str(device))
        st = torch.load(ck / "trainer_state.pt", weights_only=True)
        saved = st.get("settings") or {}  # checkpoints of older versions carry none: not checkable
        changed = [f"{k}: {saved[k]!r} -> {v!r}" for k, v in ident.items() if k in saved and saved[k] != v]
        if int(st["step"]) > steps:
            changed.append(f"steps: the checkpoint is at step {int(st['step'])}, past steps={steps}")
        if changed:
            raise ValueError(f"checkpoint {ck} was made with other settings ({', '.join(changed)}); resume with "
                             "the same settings, or delete the checkpoint folder to start this point over")
        opt.load_state_dict(st["optimizer"])
        start, pos, perm = int(st["step"]), int(st["pos"]), st["perm"]
        hist = [float(x) for x in st["loss_history"]]
        gen.set_state(st["generator"])

    def save(step: int) -> None:
        from safetensors.torch import save_model

        ck.mkdir(parents=True, exist_ok=True)
        save_model(model, str(ck / "model.safetensors"))
        torch.save({"optimizer": opt.state_dict(), "step": step, "pos": pos, "perm": perm,
                    "loss_history": torch.tensor(hist, dtype=torch.float64), "generator": gen.get_state(),
                    "settings": ident},
                   ck / "trainer_state.pt")

    for step in bar(range(start, steps), desc="dpo", quiet=None if progress else True,
                     initial=start, total=steps):
        if pos + batch_size > n:
            perm, pos = torch.randperm(n, generator=gen), 0
        idx = perm[pos : pos + batch_size].to(device)
        pos += batch_size
        logp = sequence_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask)
        loss, _, _ = dpo_loss(logp[ch[idx]], logp[rj[idx]], ref[ch[idx]], ref[rj[idx]], beta=beta)
        opt.zero_grad()
        loss.backward()
        opt.step()
        hist.append(float(loss.detach()))
        if ck is not None and checkpoint_every > 0 and (step + 1) % checkpoint_every == 0:
            save(step + 1)
    if ck is not None and start < steps:
        save(steps)
    model.eval()
    with torch.no_grad():
        logp = sequence_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask)
        full, _, _ = dpo_loss(logp[ch], logp[rj], ref[ch], ref[rj], beta=beta)
        r = (beta * (logp - ref)).double().cpu()
        implied = torch.sigmoid(r[:, None] - r[None, :]).numpy()
    return dict(implied=implied, rewards=r.numpy(), loss_history=hist, final_full_loss=float(full),
                resumed_from=start)


def _row_key(r: dict[str, Any]) -> tuple:
    return (round(r["p12"], 12), round(r["p23"], 12), int(r["seed"]))


def sweep_settings(backend: str, *, beta: float, n_pairs: int, sampling: str, steps: int, lr: float,
                   batch_size: int, model_name: str | None = None, prompt: str | None = None,
                   options: Sequence[str] | None = None) -> dict[str, Any]:
    """The training settings a sweep point depends on besides ``(p12, p23, seed)``; each row of the
    sweep file carries them and ``resume`` refuses points made with other values."""
    lm = backend != "tabular"
    return {"beta": float(beta), "n_pairs": int(n_pairs), "sampling": str(sampling),
            "steps": int(steps) if lm else None, "lr": float(lr) if lm else None,
            "batch_size": int(batch_size) if lm else None,
            "model": model_name if backend == "hf" else None, "prompt": prompt if backend == "hf" else None,
            "options": list(options) if backend == "hf" and options is not None else None}


def check_sweep_resume(out_file: str | Path, backend: str, settings: dict[str, Any]) -> dict[tuple, dict[str, Any]]:
    """The finished points of ``backend`` in ``out_file`` (key ``(p12, p23, seed)``; the last line of a
    key wins), after checking they were made with ``settings`` (:func:`sweep_settings`).

    Raises:
        ValueError: a finished point made with other settings (naming each, old -> new), or a
            malformed line (file and line).
    """
    done: dict[tuple, dict[str, Any]] = {}
    p = Path(out_file)
    if not p.is_file():
        return done
    changed: dict[str, tuple[Any, Any]] = {}
    raw = p.read_bytes()
    if raw and not raw.endswith(b"\n"):  # a row cut short by a kill: drop it (it is recomputed)
        head, _, tail = raw.rpartition(b"\n")
        try:
            json.loads(tail)
            raw += b"\n"
        except json.JSONDecodeError:
            log.warning("%s: dropping a partial last line (interrupted write)", p)
            raw = head + b"\n" if head else b""
        p.write_bytes(raw)
    for i, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"{p}: line {i}: not valid JSON; delete the line (or the file) and resume") from None
        if r.get("backend") != backend:
            continue
        for k, v in settings.items():  # rows of older versions lack some fields: those cannot be checked
            if k in r and r[k] != v and k not in changed:
                changed[k] = (r[k], v)
        done[_row_key(r)] = r
    if changed:
        what = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
        raise ValueError(f"--resume into {p.parent}: its finished points were made with other settings ({what}); "
                         "resume with the same settings, or start over without --resume (or another --out)")
    return done


def dpo_chain_experiment(
    p12: float = 0.99,
    p23_grid: Sequence[float] = (0.01, 0.05, 0.2, 0.5, 0.9),
    *,
    backend: str = "tabular",
    beta: float = 0.1,
    n_pairs: int = 500,
    seeds: int | Sequence[int] = 1,
    sampling: str = "exact",
    steps: int = 300,
    lr: float = 1e-3,
    batch_size: int = 64,
    model_name: str | None = None,
    prompt: str = "Which animal do you prefer? Answer:",
    options: Sequence[str] = (" dog", " cat", " bird"),
    device: str = "cpu",
    out_file: str | Path | None = None,
    resume: bool = False,
    checkpoint_every: int = 0,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """The paper's DPO sweep: vary ``p23`` with ``p12`` fixed and record the implied held-out ``p13``.

    Args:
        p12: ``P(option0 > option1)`` in the training data (0.99: dominant).
        p23_grid: values of ``P(option1 > option2)``.
        backend: ``"tabular"``, ``"tiny-gpt2"`` or ``"hf"`` (needs ``model_name``).
        beta: DPO beta (0.1).
        n_pairs: pairs per trained edge (500).
        seeds: the seeds (a sequence), or a count ``n`` meaning seeds ``0..n-1`` (model init +
            minibatch order; data too with ``sampling="bernoulli"``).
        sampling: see :func:`make_chain_data`.
        steps, lr, batch_size: Adam settings of the LM backends.
        model_name: Hugging Face model id or path (``backend="hf"``).
        prompt, options: text prompt and option strings (``backend="hf"``).
        device: torch device of the LM backends.
        out_file: JSON-lines file; each finished (p23, seed) point is appended (a checkpoint).
        resume: skip points already in ``out_file`` (same p12, p23, seed) and continue a point's
            interrupted LM training from its checkpoint; points made with other training settings
            (:func:`sweep_settings`) are refused. Without it an existing ``out_file`` is started over.
        checkpoint_every: LM backends with ``out_file``: save model + optimizer every this many steps
            under ``<out_file dir>/checkpoints/p12=..._p23=..._seed=.../`` (0: no mid-run checkpoints).
        progress: tqdm bars.

    Returns:
        One dict per (p23, seed): ``backend, p12, p23, seed, p12_hat, p23_hat, p13_bt`` (Result 1 on
        the empirical proportions), ``p13_implied``, ``p12_implied``, ``p23_implied``, ``loss``,
        ``converged`` (tabular: gradient < 1e-8; LMs: None), the :func:`sweep_settings` fields
        (``beta, n_pairs, sampling, steps, lr, batch_size, model, prompt, options``; ``None`` where
        the backend does not use them), ``seconds``.

    Raises:
        ValueError: unknown backend, ``hf`` without ``model_name``, bad probabilities, ``resume``
            into points made with other settings (named).
    """
    from iclr25.core.progress import progress as bar

    if backend not in ("tabular", "tiny-gpt2", "hf"):
        raise ValueError(f"backend must be 'tabular', 'tiny-gpt2' or 'hf', got {backend!r}")
    if backend == "hf" and not model_name:
        raise ValueError("backend='hf' needs model_name (a Hugging Face model id or local path)")
    check_probabilities([p12, *p23_grid], "p12/p23_grid")
    settings = sweep_settings(backend, beta=beta, n_pairs=n_pairs, sampling=sampling, steps=steps, lr=lr,
                              batch_size=batch_size, model_name=model_name, prompt=prompt, options=options)
    done: dict[tuple, dict[str, Any]] = {}
    if out_file is not None and resume:
        done = check_sweep_resume(out_file, backend, settings)
    elif out_file is not None and Path(out_file).exists():
        Path(out_file).unlink()  # a fresh run starts the sweep file over (as its checkpoints)
    hf = None
    if backend == "hf":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_name)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        hf = (tok, tokenize_options(tok, prompt, options))
    rows = []
    seed_list = list(range(seeds)) if isinstance(seeds, int) else [int(x) for x in seeds]
    jobs = [(p23, s) for p23 in p23_grid for s in seed_list]
    for p23, s in bar(jobs, desc=f"dpo[{backend}] p12={p12:g}", quiet=None if progress else True):
        key = (round(float(p12), 12), round(float(p23), 12), s)
        if key in done:
            rows.append(done[key])
            continue
        t0 = time.perf_counter()
        data = make_chain_data(p12, p23, n_pairs, sampling=sampling, seed=s)
        if backend == "tabular":
            res = dpo_tabular(data.wins(), beta=beta)
            loss, conv = res["loss"], res["converged"]
        else:
            if backend == "tiny-gpt2":
                model, batch = tiny_gpt2_options(seed=s)
            else:
                model = AutoModelForCausalLM.from_pretrained(model_name)
                batch = hf[1]
            model.to(device)
            ctx = one_thread() if backend == "tiny-gpt2" and str(device) == "cpu" else contextlib.nullcontext()
            ckdir = None
            if out_file is not None and checkpoint_every > 0:
                ckdir = Path(out_file).parent / "checkpoints" / f"{backend}_p12={p12:g}_p23={p23:g}_seed={s}"
                if not resume and ckdir.exists():
                    import shutil

                    shutil.rmtree(ckdir)
            with ctx:
                res = train_dpo_lm(model, batch, data, beta=beta, lr=lr, steps=steps, batch_size=batch_size,
                                   seed=s, checkpoint_dir=ckdir, checkpoint_every=checkpoint_every)
            loss, conv = res["final_full_loss"], None
        P = res["implied"]
        row = dict(backend=backend, p12=float(p12), p23=float(p23), seed=s, p12_hat=data.p12_hat,
                   p23_hat=data.p23_hat, p13_bt=float(bt_predict(data.p12_hat, data.p23_hat)),
                   p13_implied=float(P[0, 2]), p12_implied=float(P[0, 1]), p23_implied=float(P[1, 2]),
                   loss=float(loss), converged=conv, **settings, seconds=time.perf_counter() - t0)
        rows.append(row)
        if out_file is not None:
            Path(out_file).parent.mkdir(parents=True, exist_ok=True)
            with open(out_file, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
    return rows
