"""Shared pieces of the attention family's Gluon kernels (sm90; imported only where they run).

GL_DTYPES   torch dtype -> Gluon element type of the fp16/bf16 kernels
cache_row   first cache row of a whole tile of positions (inside one page) through a page-table row
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


@gluon.jit
def cache_row(table_row, table_stride1, max_pages, tile, PAGE_SIZE: gl.constexpr):
    """First cache row of the whole tile starting at position `tile` (inside one page)."""
    page = gl.load(table_row + gl.minimum(tile // PAGE_SIZE, max_pages - 1) * table_stride1)
    return page * PAGE_SIZE + tile % PAGE_SIZE
