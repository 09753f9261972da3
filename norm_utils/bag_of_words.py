"""Notebook 02's text classifier: a bag-of-words model trained on length-bucketed batches.

Two classes of synthetic sentences, a model that sums word embeddings (so its representation
grows with the sentence length), and its training loop, one sentence length per batch as NLP
pipelines bucket them. The notebook swaps the norm layer (BatchNorm or LayerNorm) and compares
training with validation.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["BagOfWords", "accuracy_of", "train_bag_of_words", "two_class_sentences"]

VOCAB, EMBED, HIDDEN = 40, 16, 32  # vocabulary, embedding size, hidden units


def two_class_sentences(n: int, length: int | Tensor, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """``n`` sentences of two classes: a class-c word comes from half c of the vocabulary with
    probability 0.6, from the whole vocabulary otherwise.

    Args:
        n: how many sentences.
        length: an int, one length for all (a bucket); or a tensor of lengths, one of them drawn
            for every sentence (a validation set of mixed lengths).
        seed: seed of the draw (its own generator: the global RNG is left alone).

    Returns:
        ``tokens`` (n, L) and ``mask`` (n, L), True on a sentence's own words (L the longest
        length), and the labels ``y`` (n,).
    """
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=gen)
    if isinstance(length, int):  # one bucket
        length = torch.full((n,), length)
    else:  # a length drawn for every sentence
        length = length[torch.randint(0, len(length), (n,), generator=gen)]
    L = int(length.max())
    own = y[:, None] * (VOCAB // 2) + torch.randint(0, VOCAB // 2, (n, L), generator=gen)
    other = torch.randint(0, VOCAB, (n, L), generator=gen)
    tokens = torch.where(torch.rand(n, L, generator=gen) < 0.6, own, other)
    return tokens, torch.arange(L) < length[:, None], y


class BagOfWords(nn.Module):
    """Sum of word embeddings → Linear → ``norm`` → ReLU → Linear, two classes.

    Every embedding shares a direction (+3 on every coordinate), so the summed representation,
    and the Linear's output that ``norm`` receives, grow with the sentence length.
    """

    def __init__(self, norm: type[nn.Module]):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, EMBED)
        with torch.no_grad():
            self.emb.weight += 3.0  # a direction every word shares
        self.fc, self.norm, self.out = nn.Linear(EMBED, HIDDEN), norm(HIDDEN), nn.Linear(HIDDEN, 2)

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        bag = (self.emb(tokens) * mask[..., None]).sum(1)  # grows with the sentence length
        return self.out(self.norm(self.fc(bag)).relu())


def train_bag_of_words(
    norm: type[nn.Module], seed: int, lengths: Tensor, steps: int = 120
) -> BagOfWords:
    """A `BagOfWords` with ``norm``, trained by Adam (lr 1e-2) on ``steps`` batches of 32
    sentences, each batch one length of ``lengths`` in turn (length-bucketed batches).

    ``seed`` seeds the initialization (``torch.manual_seed``) and the batches. The model is
    returned in train mode.
    """
    torch.manual_seed(seed)
    model = BagOfWords(norm)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(steps):
        length = int(lengths[step % len(lengths)])
        tokens, mask, y = two_class_sentences(32, length, seed=1000 * seed + step)
        loss = F.cross_entropy(model(tokens, mask), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def accuracy_of(model: nn.Module, data: tuple[Tensor, Tensor, Tensor]) -> float:
    """The fraction of ``data`` (tokens, mask, labels) that ``model`` classifies right, in the
    mode the model is in, without gradients (in train mode BatchNorm still updates its
    running statistics)."""
    tokens, mask, y = data
    with torch.no_grad():
        return (model(tokens, mask).argmax(1) == y).float().mean().item()
