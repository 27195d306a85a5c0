"""MGVGA model: DeepGCN/GENConv encoder, MGM latent masking, GraphMAE-style input masking, VGA
alignment decoder, losses, LR schedule and the downstream QoR head (spec Sec. 1.3–1.7)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import DeepGCNLayer, GENConv, global_mean_pool

from .graph import mask_nodes_batched

__all__ = [
    "MGVGAConfig",
    "MGVGAEncoder",
    "GCNStack",
    "CrossAttention",
    "AlignBlock",
    "MGVGAPretrainer",
    "QoRHead",
    "masked_type_ce",
    "huber",
    "cosine_schedule",
    "param_groups",
    "Objective",
]

Objective = Literal["mgvga", "mgm", "vga", "graphmae"]


@dataclass
class MGVGAConfig:
    """Architecture and objective hyper-parameters (defaults = released script, spec Sec. 1.6)."""

    hidden_size: int = 64
    """d, width of every block (paper/code: 64)."""
    num_encoder_layers: int = 7
    """GENConv res+ blocks in the encoder g_E (code: 7)."""
    num_mgm_decoder_layers: int = 1
    """blocks in the MGM decoder g_D (code: 1)."""
    num_align_layers: int = 2
    """pre-norm cross-attention + MLP blocks in the VGA alignment decoder (code: 2)."""
    num_heads: int = 8
    """cross-attention heads (code: 8, head dim 8)."""
    text_dim: int = 384
    """d_v of the text embedding (all-MiniLM-L6-v2: 384; official gte-Qwen2-7B: 3584)."""
    num_classes: int = 4
    """node classes PI/PO/AND/NOT."""
    mgm_mask_ratio: float = 0.3
    """r_MGM, fraction of nodes masked in latent space (code: 0.3)."""
    vga_mask_ratio: float = 0.7
    """r_VGA, fraction of input nodes masked in the VGA branch (script: 0.7; checkpoint name: 0.5)."""
    degree_loss_weight: float = 0.1
    """weight of the D_in/D_out Huber loss on the MGM branch (code: 0.1)."""
    vga_degree_loss_weight: float = 0.0
    """degree loss on the VGA branch (paper Fig. 3 variant; code: 0)."""
    huber_delta: float = 1.0
    """Huber δ of the degree loss (code: 1.0)."""
    align_dropout: float = 0.1
    """dropout in the alignment MLP (code: 0.1)."""
    graphmae_remask: bool = True
    """GraphMAE baseline: re-mask the masked nodes' latents with the decoder mask token."""
    direction: Literal["fanin", "fanout", "bidirectional"] = "fanin"
    """edge orientation used when converting circuits (official: fanin = consumer → fanin)."""
    objective: Objective = "mgvga"
    """which loss to optimise: mgvga (MGM+VGA), mgm, vga, graphmae (input-masking baseline)."""

    def __post_init__(self) -> None:
        """Range checks (``ValueError`` naming the field): ratios and dropout in [0, 1] (mask ratios in
        (0, 1)), loss weights ≥ 0, ``huber_delta`` > 0, sizes ≥ 1, a known objective/direction."""
        for k in ("mgm_mask_ratio", "vga_mask_ratio"):
            v = getattr(self, k)
            if not (math.isfinite(v) and 0.0 < v < 1.0):
                raise ValueError(f"MGVGAConfig.{k}={v} must be in (0, 1)")
        if not (math.isfinite(self.align_dropout) and 0.0 <= self.align_dropout < 1.0):
            raise ValueError(f"MGVGAConfig.align_dropout={self.align_dropout} must be in [0, 1)")
        for k in ("degree_loss_weight", "vga_degree_loss_weight"):
            v = getattr(self, k)
            if not (math.isfinite(v) and v >= 0.0):
                raise ValueError(f"MGVGAConfig.{k}={v} must be a finite number >= 0")
        if not (math.isfinite(self.huber_delta) and self.huber_delta > 0.0):
            raise ValueError(f"MGVGAConfig.huber_delta={self.huber_delta} must be a finite number > 0")
        for k in ("hidden_size", "num_encoder_layers", "num_mgm_decoder_layers", "num_align_layers", "num_heads",
                  "text_dim", "num_classes"):
            if int(getattr(self, k)) < 1:
                raise ValueError(f"MGVGAConfig.{k}={getattr(self, k)} must be >= 1")
        if self.objective not in ("mgvga", "mgm", "vga", "graphmae"):
            raise ValueError(f"MGVGAConfig.objective={self.objective!r}; use mgvga, mgm, vga or graphmae")
        if self.direction not in ("fanin", "fanout", "bidirectional"):
            raise ValueError(f"MGVGAConfig.direction={self.direction!r}; use fanin, fanout or bidirectional")

    def to_dict(self) -> dict:
        return asdict(self)


def _init_linear(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0.0, 0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, 0.0, 0.02)
        if m.padding_idx is not None:
            with torch.no_grad():
                m.weight[m.padding_idx].zero_()
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


class GCNStack(nn.Module):
    """``n`` DeepGCN ``res+`` blocks ``x ← x + GENConv(LN(x), A)``; ReLU between blocks, none after the last.

    GENConv(d, d, aggr="softmax", t=1, learn_t=True, num_layers=2, norm="layer"): 16,769
    parameters per block at d = 64 (PyG 2.8).
    """

    def __init__(self, d: int, n: int):
        super().__init__()
        self.layers = nn.ModuleList(
            DeepGCNLayer(GENConv(d, d, aggr="softmax", t=1.0, learn_t=True, num_layers=2, norm="layer"),
                         nn.LayerNorm(d), None, block="res+", dropout=0.0)
            for _ in range(n)
        )

    def forward(self, h: Tensor, edge_index: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):
            h = layer(h, edge_index)
            if i < len(self.layers) - 1:
                h = F.relu(h)
        return h


class MGVGAEncoder(nn.Module):
    """g_E: node-type embedding (index ``type + 1``; 0 = padding) followed by the GENConv stack.

    ``forward(x: Long[N], edge_index: Long[2, E]) -> Float[N, d]``. Unlike the official
    ``AIGMAEEmbeddingModel``, the type embedding is part of the encoder, so a saved encoder embeds
    circuits on its own.
    """

    def __init__(self, cfg: MGVGAConfig):
        super().__init__()
        self.cfg = cfg
        self.token_emb = nn.Embedding(cfg.num_classes + 1, cfg.hidden_size, padding_idx=0)
        self.gnn = GCNStack(cfg.hidden_size, cfg.num_encoder_layers)
        _init_linear(self.token_emb)

    def embed_tokens(self, x: Tensor) -> Tensor:
        """Float[N, d] input embeddings of node classes ``x`` (Long[N] in 0..3)."""
        return self.token_emb(x + 1)

    def encode(self, h0: Tensor, edge_index: Tensor) -> Tensor:
        """Run the GNN on given input features ``h0`` (Float[N, d])."""
        return self.gnn(h0, edge_index)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.encode(self.embed_tokens(x), edge_index)

    @torch.no_grad()
    def embed_graph(self, data) -> Tensor:
        """Mean-pooled graph embeddings Float[B, d] of a ``Data``/``Batch`` (eval mode, no grad)."""
        was = self.training
        self.eval()
        h = self(data.x, data.edge_index)
        batch = getattr(data, "batch", None)
        if batch is None:
            batch = torch.zeros(h.shape[0], dtype=torch.long)
        out = global_mean_pool(h, batch)
        self.train(was)
        return out


class CrossAttention(nn.Module):
    """Multi-head attention of node queries (Float[N, d]) to their own graph's text tokens.

    ``text``: Float[B, T, d_v]; ``batch``: Long[N] graph of each node; ``text_mask``: Bool[B, T]
    (True = real token). With one token (the official setting) the weights are exactly 1 and
    the output is ``W_o(W_v e + b_v) + b_o`` for every node of the graph (spec Sec. 1.3).
    Padded tokens are masked on the *keys* (fixes official defect 2; no NaN rows); a graph whose
    text has no valid token gets a zero attention output (and is excluded from the VGA loss by
    :meth:`MGVGAPretrainer.vga_branch`).
    """

    def __init__(self, d: int, text_dim: int, heads: int):
        super().__init__()
        if d % heads:
            raise ValueError(f"hidden size {d} is not divisible by {heads} heads")
        self.h, self.dh = heads, d // heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(text_dim, d)
        self.v = nn.Linear(text_dim, d)
        self.o = nn.Linear(d, d)

    def forward(self, x: Tensor, batch: Tensor, text: Tensor, text_mask: Tensor | None = None) -> Tensor:
        N = x.shape[0]
        B, T, _ = text.shape
        q = self.q(x).view(N, self.h, self.dh)
        k = self.k(text).view(B, T, self.h, self.dh)[batch]  # [N, T, h, dh]
        v = self.v(text).view(B, T, self.h, self.dh)[batch]
        s = torch.einsum("nhd,nthd->nht", q, k) / math.sqrt(self.dh)
        if text_mask is not None:
            valid = text_mask[batch][:, None, :]
            s = s.masked_fill(~valid, float("-inf"))
            # a graph without any valid token attends to nothing: weights 0 (no NaN rows)
            a = torch.softmax(s.masked_fill(~valid.any(-1, keepdim=True), 0.0), dim=-1) * valid
        else:
            a = torch.softmax(s, dim=-1)
        out = torch.einsum("nht,nthd->nhd", a, v).reshape(N, -1)
        return self.o(out)


class AlignBlock(nn.Module):
    """Pre-norm block: ``X ← X + CrossAttn(LN(X), e)``; ``X ← X + MLP(LN(X))``,
    MLP = Dropout → Linear(d, d) → ReLU → Linear(d, d)."""

    def __init__(self, d: int, text_dim: int, heads: int, dropout: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CrossAttention(d, text_dim, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Dropout(dropout), nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))

    def forward(self, x: Tensor, batch: Tensor, text: Tensor, text_mask: Tensor | None = None) -> Tensor:
        x = x + self.attn(self.ln1(x), batch, text, text_mask)
        return x + self.mlp(self.ln2(x))


def masked_type_ce(logits: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    """Mean cross-entropy over masked rows only (Float scalar; 0 if nothing is masked).

    Args:
        logits: Float[N, C]; y: Long[N]; mask: Bool[N].
    """
    if not bool(mask.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[mask], y[mask])


def huber(pred: Tensor, target: Tensor, delta: float = 1.0) -> Tensor:
    """Mean Huber loss: ½(a−b)² if |a−b| ≤ δ else δ(|a−b| − ½δ)."""
    return F.huber_loss(pred, target.to(pred.dtype), delta=delta)


def _deg_head(d: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 1))


class MGVGAPretrainer(nn.Module):
    """Pre-training model: shared encoder + MGM decoder/heads + VGA alignment decoder/head.

    ``forward(mgm, vga=None, text=None, text_mask=None, generator=None) -> dict`` with ``loss``
    and the logged terms (``mgm_type_ce``, ``vga_type_ce``, ``deg_in_huber``, ``deg_out_huber``,
    ``deg_in_l1``, ``deg_out_l1``, ``mgm_acc``, ``vga_acc``). ``mgm`` / ``vga`` are PyG batches
    (``x``, ``edge_index``, ``batch``, ``d_in``, ``d_out``); ``text``: Float[B, d_v] or
    Float[B, T, d_v] aligned with the graphs of ``vga``.

    Objectives (``cfg.objective``): ``mgvga`` L = CE_MGM + CE_VGA + 0.1·L_deg (code); ``mgm``
    CE_MGM + 0.1·L_deg; ``vga`` CE_VGA (+ optional degree term); ``graphmae`` — the input-masking
    baseline: mask token on the *input* embeddings, same encoder, (re-masked) latents into the
    same decoder/heads, CE + 0.1·L_deg.
    """

    def __init__(self, cfg: MGVGAConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        self.encoder = MGVGAEncoder(cfg)
        self.mgm_mask = nn.Parameter(torch.zeros(d))
        self.vga_mask = nn.Parameter(torch.zeros(d))
        self.mgm_decoder = GCNStack(d, cfg.num_mgm_decoder_layers)
        self.mgm_type_head = nn.Linear(d, cfg.num_classes)
        self.deg_in_head = _deg_head(d)
        self.deg_out_head = _deg_head(d)
        self.align = nn.ModuleList(AlignBlock(d, cfg.text_dim, cfg.num_heads, cfg.align_dropout)
                                   for _ in range(cfg.num_align_layers))
        self.vga_type_head = nn.Linear(d, cfg.num_classes)
        for mod in (self.mgm_type_head, self.deg_in_head, self.deg_out_head, self.align, self.vga_type_head):
            mod.apply(_init_linear)
        nn.init.normal_(self.mgm_mask, 0.0, 0.02)
        nn.init.normal_(self.vga_mask, 0.0, 0.02)

    # --- branches ----------------------------------------------------------------------------
    def _degree(self, z: Tensor, g) -> dict[str, Tensor]:
        pin = self.deg_in_head(z).squeeze(-1)
        pout = self.deg_out_head(z).squeeze(-1)
        return {
            "deg_in_huber": huber(pin, g.d_in, self.cfg.huber_delta),
            "deg_out_huber": huber(pout, g.d_out, self.cfg.huber_delta),
            "deg_in_l1": (pin.detach() - g.d_in).abs().mean(),
            "deg_out_l1": (pout.detach() - g.d_out).abs().mean(),
        }

    def mgm_branch(self, g, mask: Tensor, *, input_masking: bool = False) -> dict[str, Tensor]:
        """MGM (latent masking, Sec. 1.4) or, with ``input_masking``, the GraphMAE-style baseline."""
        h0 = self.encoder.embed_tokens(g.x)
        if input_masking:
            h0 = torch.where(mask[:, None], self.vga_mask.expand_as(h0), h0)
        x = self.encoder.encode(h0, g.edge_index)
        if not input_masking or self.cfg.graphmae_remask:
            x = torch.where(mask[:, None], self.mgm_mask.expand_as(x), x)
        z = self.mgm_decoder(x, g.edge_index)
        logits = self.mgm_type_head(z)
        out = {"mgm_type_ce": masked_type_ce(logits, g.x, mask)}
        with torch.no_grad():
            out["mgm_acc"] = (logits[mask].argmax(-1) == g.x[mask]).float().mean() if mask.any() else logits.new_zeros(())
        out.update(self._degree(z, g))
        return out

    def vga_branch(self, g, mask: Tensor, text: Tensor, text_mask: Tensor | None = None) -> dict[str, Tensor]:
        """VGA: input masking with m', shared encoder, alignment decoder conditioned on ``text``.

        Graphs whose ``text_mask`` row has no valid token are excluded from the loss (their nodes
        leave the mask); ``out["vga_empty_text"]`` counts them."""
        if text.dim() == 2:
            text = text[:, None, :]
        batch = g.batch if getattr(g, "batch", None) is not None else torch.zeros(g.x.shape[0], dtype=torch.long)
        if text.shape[0] != int(batch.max()) + 1:
            raise ValueError(f"text has {text.shape[0]} rows but the VGA batch has {int(batch.max()) + 1} graphs")
        n_empty = 0
        if text_mask is not None:
            if text_mask.shape != text.shape[:2]:
                raise ValueError(f"text_mask has shape {tuple(text_mask.shape)}; expected {tuple(text.shape[:2])}")
            empty = ~text_mask.any(1)  # graphs whose text has no valid token: no Verilog constraint
            n_empty = int(empty.sum())
            if n_empty:
                mask = mask & ~empty[batch]
        h0 = self.encoder.embed_tokens(g.x)
        h0 = torch.where(mask[:, None], self.vga_mask.expand_as(h0), h0)
        z = self.encoder.encode(h0, g.edge_index)
        for blk in self.align:
            z = blk(z, batch, text, text_mask)
        logits = self.vga_type_head(z)
        out = {"vga_type_ce": masked_type_ce(logits, g.x, mask), "vga_empty_text": logits.new_tensor(float(n_empty))}
        with torch.no_grad():
            out["vga_acc"] = (logits[mask].argmax(-1) == g.x[mask]).float().mean() if mask.any() else logits.new_zeros(())
        if self.cfg.vga_degree_loss_weight > 0:
            dd = self._degree(z, g)
            out["vga_deg_huber"] = dd["deg_in_huber"] + dd["deg_out_huber"]
        return out

    def forward(self, mgm=None, vga=None, text: Tensor | None = None, text_mask: Tensor | None = None,
                generator: torch.Generator | None = None, mgm_mask: Tensor | None = None,
                vga_mask: Tensor | None = None) -> dict[str, Tensor]:
        cfg = self.cfg
        out: dict[str, Tensor] = {}
        loss = None
        if cfg.objective in ("mgvga", "mgm", "graphmae"):
            if mgm is None:
                raise ValueError(f"objective {cfg.objective!r} needs an MGM batch")
            if mgm_mask is None:
                mgm_mask = mask_nodes_batched(_batch_vec(mgm), cfg.mgm_mask_ratio, generator)
            r = self.mgm_branch(mgm, mgm_mask, input_masking=cfg.objective == "graphmae")
            out.update(r)
            loss = r["mgm_type_ce"] + cfg.degree_loss_weight * (r["deg_in_huber"] + r["deg_out_huber"])
        if cfg.objective in ("mgvga", "vga"):
            if vga is None or text is None:
                raise ValueError(f"objective {cfg.objective!r} needs a VGA batch and its text embeddings")
            if vga_mask is None:
                vga_mask = mask_nodes_batched(_batch_vec(vga), cfg.vga_mask_ratio, generator)
            r = self.vga_branch(vga, vga_mask, text, text_mask)
            out.update(r)
            lv = r["vga_type_ce"]
            if "vga_deg_huber" in r:
                lv = lv + cfg.vga_degree_loss_weight * r["vga_deg_huber"]
            loss = lv if loss is None else loss + lv
        out["loss"] = loss
        return out


def _batch_vec(g) -> Tensor:
    b = getattr(g, "batch", None)
    return b if b is not None else torch.zeros(g.x.shape[0], dtype=torch.long)


def cosine_schedule(optimizer: torch.optim.Optimizer, total_steps: int, min_ratio: float = 0.1,
                    warmup: int = 0) -> torch.optim.lr_scheduler.LambdaLR:
    """HF ``get_cosine_schedule_with_warmup`` with ``num_cycles = acos(2·min_ratio − 1)/(2π)``, so
    the learning rate ends at ``min_ratio · lr`` (official: 0.1, 0 warm-up)."""
    cycles = math.acos(2 * min_ratio - 1) / (2 * math.pi)

    def f(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup)
        p = (step - warmup) / max(1, total_steps - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 2.0 * cycles * p)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, f)


def param_groups(model: nn.Module, weight_decay: float = 0.01) -> list[dict]:
    """AdamW groups: weight decay on everything except biases (what the official exclusion list
    effectively does, spec Sec. 1.6)."""
    dec, nodec = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (nodec if n.endswith("bias") else dec).append(p)
    return [{"params": dec, "weight_decay": weight_decay}, {"params": nodec, "weight_decay": 0.0}]


class QoRHead(nn.Module):
    """QoR regressor (OpenABC-D style): graph embedding ⊕ recipe encoder → MLP → scalar.

    Recipe encoder: Embedding(n_ops, 16) over the ``steps`` commands → Conv1d(16, 32, 3) → ReLU →
    flatten. ``forward(graph_emb: Float[B, d], recipe: Long[B, steps]) -> Float[B]`` (z-scored
    AND count). ``use_graph=False`` gives the recipe-only baseline.
    """

    def __init__(self, d: int, n_ops: int = 7, steps: int = 20, hidden: int = 64, use_graph: bool = True):
        super().__init__()
        self.use_graph = use_graph
        self.op_emb = nn.Embedding(n_ops, 16)
        self.conv = nn.Conv1d(16, 32, 3)
        r_dim = 32 * (steps - 2)
        self.mlp = nn.Sequential(nn.Linear(r_dim + (d if use_graph else 0), hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, graph_emb: Tensor, recipe: Tensor) -> Tensor:
        r = F.relu(self.conv(self.op_emb(recipe).transpose(1, 2))).flatten(1)
        h = torch.cat([graph_emb, r], 1) if self.use_graph else r
        return self.mlp(h).squeeze(-1)
