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


def test_log_show_names_the_metrics_the_bar_shows():
    """`:log (:show [...])`: `:loss`, `:lr` and the metrics `objective` reports are clean; another
    name is E-NAME-004 at it (with the nearest name), and a value that is no vector of names E-TYPE-003."""
    res = check(edited(("     :log (:every 50))", "     :log (:every 50 :show [:generation-accuracy :loss :lr]))")))
    assert res.program.run.log["show"] == ("generation-accuracy", "loss", "lr")
    check(edited(("     :log (:every 50))", """\
     :log (:every 50 :show [:loss :generation-acuracy]))
;;                                ^^^^^^^^^^^^^^^^^^^ E-NAME-004""")))
    check(edited(("     :log (:every 50))", """\
     :log (:every 50 :show :loss))
;;                         ^^^^^ E-TYPE-003""")))


def test_log_show_is_no_part_of_the_identity():
    """A resume may change what the bar shows: `:show` is left out of the checkpoint's identity."""
    from helpers import program_of
    a = program_of(edited(("     :log (:every 50))", "     :log (:every 50 :show [:loss :lr]))")))
    b = program_of(edited(("     :log (:every 50))", "     :log (:every 50))")))
    c = program_of(edited(("     :log (:every 50))", "     :log (:every 25))")))
    assert a.identity == b.identity != c.identity
