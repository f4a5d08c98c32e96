"""attention.mla_decode's native kernels, one module per kernel, each its own row (ops/attention/__init__.py):

triton.py          native/mla_decode                 pointer loads through the page table (any device)
triton_tma.py      native/mla_decode_tma             TMA tile loads (sm90+)
gluon.py           native/mla_decode_gluon           Gluon, positions as the product rows (sm90, Hq < 64)
gluon_pingpong.py  native/mla_decode_gluon_pingpong  Gluon, two warp-specialised warpgroups (sm90, Hq >= 64)
launch.py          each kernel's launch policy (tiles, split counts)
"""

from .. import MLA_VALUE_DIM

#: Width of one value box of the TMA kernels (TMA boxes are at most 256 elements per dimension).
VALUE_HALF = MLA_VALUE_DIM // 2
