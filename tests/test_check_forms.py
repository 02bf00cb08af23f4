"""Top-level forms in the checker (sexpgpu_lang/check/forms.py): `run`'s settings in a whole run
file (the fixture, tests/fixtures/tiny-generate.sx, with one edit)."""
from __future__ import annotations

from helpers import check, edited


def test_eight_devices_divide_a_batch_of_64():
    """Data parallel over 8 devices; 8 divides `:batch 64`."""
    check(edited(("     :seed 0",
                  """\
     :devices 8
     :seed 0""")))
