"""Reference Post-LN and Pre-LN Transformer encoder blocks (the answers to notebook 04's
Exercises 1 and 2).

Both share one set of sublayers; each class only writes its own two-line ``forward``. Attribute
names match :class:`torch.nn.TransformerEncoderLayer`, so weights load both ways with
``load_state_dict``. Masks follow the course's convention (``True`` = real token / may attend);
the blocks invert it once, in ``_sa_block``.
"""

import torch.nn.functional as F
from torch import Tensor, nn

from norm_utils.blocks import _to_torch_mask, xavier_init_

__all__ = ["PostLNBlock", "PreLNBlock"]


class _Block(nn.Module):
    """Self-attention and feed-forward sublayers shared by every block; subclasses add ``forward``.

    All weights get a Xavier-normal init, as in Xiong et al. (2020).
    """

    def __init__(
        self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, eps: float = 1e-5
    ) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)  # stateless, so one module serves every sublayer
        xavier_init_(self)

    def _sa_block(
        self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None
    ) -> Tensor:
        attn_mask, key_padding_mask = _to_torch_mask(attn_mask), _to_torch_mask(key_padding_mask)
        x = self.self_attn(
            x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False
        )[0]  # (B, T, D)
        return self.dropout(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        x = self.dropout(F.relu(self.linear1(x)))  # (B, T, d_ff)
        return self.dropout(self.linear2(x))  # (B, T, D)


class PostLNBlock(_Block):
    r"""Post-LN Transformer encoder block: normalize *after* adding the residual.

    The original Transformer (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762). Every
    residual path goes through a LayerNorm; Xiong et al. (2020, https://arxiv.org/abs/2002.04745)
    measure large gradients near the output at init and a need for learning-rate warm-up.

    .. math::
        x_{l+1} = \mathrm{LN}(x_l + F(x_l))

    Equals ``nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, batch_first=True)``
    with ReLU, and has the same ``state_dict`` keys.

    Args:
        d_model: width D of the residual stream.
        n_heads: attention heads; must divide ``d_model``.
        d_ff: hidden width of the feed-forward sublayer.
        dropout: dropout on attention weights, sublayer outputs and the FFN hidden layer.
        eps: LayerNorm epsilon.

    Shape:
        - x: :math:`(B, T, D)`; output: same shape.
        - attn_mask: :math:`(T, T)` bool, True = query row may attend to key column.
        - key_padding_mask: :math:`(B, T)` bool, True = real token, False = padding.

    Example:
        >>> block = PostLNBlock(d_model=16, n_heads=2, d_ff=64)
        >>> block(torch.randn(3, 5, 16)).shape
        torch.Size([3, 5, 16])
    """

    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, key_padding_mask: Tensor | None = None
    ) -> Tensor:
        x = self.norm1(x + self._sa_block(x, attn_mask, key_padding_mask))  # (B, T, D)
        x = self.norm2(x + self._ff_block(x))  # (B, T, D)
        return x


class PreLNBlock(_Block):
    r"""Pre-LN Transformer encoder block: normalize the sublayer *input*, keep the residual clean.

    Xiong et al. 2020, https://arxiv.org/abs/2002.04745 (as in GPT-2 and nanoGPT). The residual
    stream is never normalized, so its norm grows with depth and a stack needs a final LayerNorm
    (``norm_utils.blocks.Encoder`` with ``final_norm=True``).

    .. math::
        x_{l+1} = x_l + F(\mathrm{LN}(x_l))

    Equals ``nn.TransformerEncoderLayer(..., batch_first=True, norm_first=True)``. Args and Shape
    as in :class:`PostLNBlock`.

    Example:
        >>> block = PreLNBlock(d_model=16, n_heads=2, d_ff=64)
        >>> block(torch.randn(3, 5, 16)).shape
        torch.Size([3, 5, 16])
    """

    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, key_padding_mask: Tensor | None = None
    ) -> Tensor:
        x = x + self._sa_block(self.norm1(x), attn_mask, key_padding_mask)  # (B, T, D)
        x = x + self._ff_block(self.norm2(x))  # (B, T, D)
        return x
