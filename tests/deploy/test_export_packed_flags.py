"""The C runtime's loader checks the flags word of packed int8 weights that are the model's
weights (qconv_i8.c's flags_check, as ops/quantized_pack.py's packed_flags_error in Python): a
blob whose word claims QG_PAIRS_FIT on weights whose k pairs overflow int16 (AVX2's vpmaddubsw
tile would saturate), disagrees with the zero points or has unknown bits is refused with its
message; a word without QG_PAIRS_FIT on weights that fit still runs, bitwise the Python plan."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from .cbuild import assert_refused, cc, make, model_run

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "io"),
                str(Path(__file__).resolve().parents[1])]
import test_packed_flags as flags  # noqa: E402  the io tests' packed consts and forged words

from mgegraph.deploy import export_c  # noqa: E402


def _forged(blob: bytes, packed: np.ndarray, word: int) -> bytes:
    """``blob`` with the flags word (the last int32) of const ``packed`` replaced by ``word``"""
    at = blob.find(packed.tobytes())
    assert at > 0 and blob.find(packed.tobytes(), at + 1) < 0
    end = at + packed.nbytes
    return blob[:end - 4] + np.int32(word).tobytes() + blob[end:]


def test_forged_flags_words_are_refused_and_an_older_word_runs(tmp_path):
    cc()
    for w, name in ((flags.FULL, "full"), (flags.SEVEN, "seven")):
        packed = flags.packed_of(w)
        plan = flags.plan_of(packed)
        out = export_c(plan, tmp_path / name)
        make(out.directory)
        blob = (out.directory / "model.mgr").read_bytes()
        feeds = {"x": flags.X}
        cases = {"unknown bit": (_forged(blob, packed, int(packed[-1]) | 4),
                                 "bits no kernel knows"),
                 "zero points": (_forged(blob, packed, int(packed[-1]) ^ flags.ZERO_POINTS),
                                 "disagrees with their zero points")}
        if w is flags.FULL:
            cases["pairs fit"] = (_forged(blob, packed, flags.PAIRS_FIT), "QG_PAIRS_FIT")
        got = assert_refused(out.directory, cases, feeds, out.input_names)
        np.testing.assert_array_equal(got[0], plan.run(feeds)[0])
        # the word a pack from before QG_PAIRS_FIT has: the widening tile, the same integers
        (out.directory / "model.mgr").write_bytes(_forged(blob, packed, 0))
        done, older = model_run(out.directory, feeds, out.input_names)
        assert done.returncode == 0, done.stderr
        np.testing.assert_array_equal(older[0], got[0])
