import torch

# The suite runs on small shared CPUs: one intra-op thread avoids OpenMP spinning against other
# processes (measured 3-5x faster on a loaded 2-core machine); results do not depend on it.
torch.set_num_threads(1)
