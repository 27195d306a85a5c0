"""Check data-parallel training under 2 CPU processes (run: ``torchrun --nproc_per_node 2 check_distributed.py``).

Every process trains the same tiny model on its shard of each batch with gradients averaged by
accelerate. Checks: (1) after training the parameters are bit-identical in every process (gradients
really synchronised); (2) they stay close to a single-process run on the full batches (they differ
only through BatchNorm's per-shard batch statistics). Prints one summary line on rank 0.
"""

import torch
from accelerate import Accelerator

from iclr25.wm_transfer.models import HiddenConfig
from iclr25.wm_transfer.train import TrainSettings, train_watermark_model

torch.set_num_threads(1)
acc = Accelerator(cpu=True)
cfg = HiddenConfig(H=16, W=16, n_bits=8, enc_ch=8, dec_ch=8, msg_ch=4, msg_grid=4, residual_scale=1.0)
g = torch.Generator().manual_seed(0)
x = torch.rand(80, 3, 16, 16, generator=g) * 2 - 1
st = TrainSettings(epochs=2, batch_size=16)
m = train_watermark_model(cfg, x[:64], 0, settings=st, val_images=x[64:], message=torch.ones(8), accelerator=acc,
                          quiet=True)
flat = torch.cat([p.detach().flatten() for p in m.decoder.parameters()])
allp = acc.gather(flat[None])
same = bool((allp - allp[0]).abs().max() == 0)
if acc.is_main_process:
    single = train_watermark_model(cfg, x[:64], 0, settings=st, val_images=x[64:], message=torch.ones(8), quiet=True)
    sflat = torch.cat([p.detach().flatten() for p in single.decoder.parameters()])
    rel = float((flat - sflat).norm() / sflat.norm())
    print(f"processes {acc.num_processes}: parameters identical across processes: {same}; relative distance to "
          f"the single-process run {rel:.3g} (BatchNorm per-shard statistics)")
    if not same:
        raise SystemExit(1)
