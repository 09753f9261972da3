"""norm_utils: what the course's demos use besides PyTorch.

Toy data, the shared figures, padding, and Transformer stacks built from PyTorch's own
``nn.TransformerEncoderLayer``. It holds no implementation of a graded exercise: the graded
references live with the grader (``grader.reference``), which the demos never import. One mask
convention everywhere: a bool tensor, True = real token.

- `answers`: yours_or, the student's answer in a demo, or the library's while it is a stub
- `bag_of_words`: notebook 02's text classifier on length-bucketed batches
- `blocks`: Encoder, TinyLM, and the helpers of notebook 04's experiments
- `gradients`: numerical_grad (finite differences) and autograd's gradients, to check a backward
- `masking`: pad_sequences
- `data`, `plotting`: seeded toy data and the figures the notebooks share
"""

from norm_utils import blocks, masking
from norm_utils.blocks import *  # noqa: F403 (the package's names are its modules' public ones)
from norm_utils.masking import *  # noqa: F403

__all__ = [*blocks.__all__, *masking.__all__]
