"""Transition re-export: the hash-word tokenizer now lives in
``pdserve.tokenization.mock`` (``--tokenizer-mode mock``). The router no longer uses
it implicitly; remaining importers (mock worker, demo) should move to
``pdserve.tokenization``."""

from pdserve.tokenization.mock import *  # noqa: F401,F403
from pdserve.tokenization.mock import (  # noqa: F401  (names the star import skips)
    _FIXED_BY_ID,
    _FIXED_PIECES,
    _PIECE_RE,
    _SPECIAL_BY_ID,
    _hashed_id,
    _ids,
    _reverse,
)
