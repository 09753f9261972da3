"""Settings shared by the whole test suite."""

import torch

# The tests use tiny tensors, where a second intra-op thread only adds synchronization; on a busy
# 2-core machine its spin-waiting made the suite several times slower.
torch.set_num_threads(1)
