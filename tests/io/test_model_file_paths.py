"""Where a model file is read from and written to: only regular files are read (a device, a
FIFO or a directory is one ModelFormatError naming the path, at once), and saves replace the
file whole, each under a temporary name of its own."""
from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from threads import run_in_threads

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import runtime
from mgegraph.io import Predictor


def small_plan(scale: float = 1.0):
    g = mg.Graph()
    x = g.input("x", (2, 3))
    w = g.param("w", np.full((3, 4), scale, np.float32))
    return mg.compile([F.relu(x @ w)])


@pytest.mark.parametrize("path, kind", [("/dev/zero", "a character device"),
                                        ("/dev/urandom", "a character device"),
                                        (".", "a directory")])
def test_a_device_or_a_directory_is_refused_before_it_is_read(path, kind):
    for load in (mg.load, runtime.load, mg.io.read):
        with pytest.raises(mg.ModelFormatError, match=f"{path!r} is {kind}, not a regular file"):
            load(path)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "m.mgm"
    os.mkfifo(fifo)
    with pytest.raises(mg.ModelFormatError, match="is a FIFO"):
        mg.load(fifo)  # blocked in open() (no writer) or read without end before


def test_a_link_to_a_model_file_is_followed(tmp_path):
    mg.save(small_plan(), tmp_path / "m.mgm")
    os.symlink(tmp_path / "m.mgm", tmp_path / "link.mgm")
    assert isinstance(mg.load(tmp_path / "link.mgm"), Predictor)
    os.symlink("/dev/zero", tmp_path / "zero.mgm")
    with pytest.raises(mg.ModelFormatError, match="character device"):
        mg.load(tmp_path / "zero.mgm")


def test_a_missing_file_is_a_model_format_error_naming_it(tmp_path):
    with pytest.raises(mg.ModelFormatError, match=r"cannot read .*nope\.mgm'"):
        mg.load(tmp_path / "nope.mgm")


def test_saving_to_a_directory_is_refused_and_leaves_nothing(tmp_path):
    folder = tmp_path / "some_dir"
    folder.mkdir()
    for obj in (small_plan(), {"w": np.ones(3, np.float32)}):
        with pytest.raises(mg.ModelFormatError, match="some_dir': it is a directory"):
            mg.save(obj, folder)
    assert sorted(os.listdir(tmp_path)) == ["some_dir"] and not os.listdir(folder)


def test_saving_over_a_device_or_a_fifo_is_refused_and_leaves_it(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), ("/dev/null", "a character device")):
        with pytest.raises(mg.ModelFormatError, match=f"'{path}': it is {kind}"):
            mg.save(small_plan(), path)  # the rename would have put a file in its place
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert os.listdir(tmp_path) == ["pipe"]


def test_saving_into_a_missing_folder_names_the_path_asked_for(tmp_path):
    with pytest.raises(mg.ModelFormatError, match=r"cannot write .*nope/m\.mgm': No such file"):
        mg.save(small_plan(), tmp_path / "nope" / "m.mgm")


def test_a_saved_file_gets_the_permissions_open_would_give(tmp_path):
    mg.save(small_plan(), tmp_path / "m.mgm")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(tmp_path / "m.mgm").st_mode) == 0o666 & ~mask


def test_a_failed_save_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "m.mgm"
    mg.save(small_plan(1.0), path)
    before = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("zipfile.ZipFile.writestr", broken)
    with pytest.raises(OSError, match="disk full"):
        mg.save(small_plan(2.0), path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["m.mgm"]


def test_concurrent_saves_to_one_path_each_write_a_whole_file(tmp_path):
    path = tmp_path / "m.mgm"
    plans = [small_plan(float(k)) for k in range(1, 9)]

    def save(plan):
        for _ in range(5):
            mg.save(plan, path)

    errors = run_in_threads(save, [(p,) for p in plans])
    assert not errors and os.listdir(tmp_path) == ["m.mgm"]
    y = mg.load(path).run({"x": np.ones((2, 3), np.float32)})[0]
    assert y[0, 0] in {3.0 * k for k in range(1, 9)}  # one of the saves, whole


def test_the_predictor_lives_with_the_model_file_and_keeps_its_public_names():
    assert runtime.Predictor is Predictor is mg.io.predictor.Predictor
    assert runtime.Limits is mg.io.Limits and runtime.ModelFormatError is mg.ModelFormatError
