"""One module per rewrite; importing this package registers them all (in code order)."""

from . import mask_unit_attention  # noqa: F401  HR001
from . import pool_amax  # noqa: F401  HR002
from . import token_drop  # noqa: F401  HR003
from . import decoder_fill  # noqa: F401  HR004
from . import masked_select  # noqa: F401  HR005
from . import explicit_attention  # noqa: F401  HR006
