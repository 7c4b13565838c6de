"""Video frames (the camera beside the third-person view, the text below) and the MP4 they are written to."""

from __future__ import annotations

import numpy as np
import pytest

from sim.video import MACROBLOCK, Mp4Writer, compose, mp4_path

RNG = np.random.default_rng(0)
VIEW = RNG.integers(0, 256, (16, 20, 3), dtype=np.uint8)  # (H, W, 3)
CAMERA = RNG.integers(0, 256, (4, 8, 3), dtype=np.uint8)  # (h, w, 3): enlarged 16 // 4 = 4 times


def test_the_camera_is_enlarged_pixel_for_pixel_beside_the_view_and_the_frame_fits_the_codec() -> None:
    frame = compose(VIEW, CAMERA, ["one", "two"])
    assert frame.dtype == np.uint8 and frame.shape[0] % MACROBLOCK == 0 and frame.shape[1] % MACROBLOCK == 0
    assert frame.shape[1] == 64  # 4 * 8 + 20 = 52, padded
    blocks = frame[:16, :32].reshape(4, 4, 8, 4, 3)  # (h, k, w, k, 3): each camera pixel a 4x4 square
    assert (blocks == CAMERA[:, None, :, None]).all()
    assert (frame[:16, 32:52] == VIEW).all()
    alone = compose(VIEW, None, ["one", "two"])  # a policy without a camera: the view only
    assert alone.shape[1] == 32 and (alone[:16, :20] == VIEW).all()


def test_the_text_below_says_what_it_is_given() -> None:
    student, teacher = compose(VIEW, CAMERA, ["acted: student"]), compose(VIEW, CAMERA, ["acted: teacher"])
    assert (student[:16] == teacher[:16]).all()  # the pictures are the same
    assert (student[16:] != teacher[16:]).any() and student[16:].any()  # the text differs, and is drawn


def test_an_mp4_reads_back_with_every_frame_at_its_size_and_rate(tmp_path) -> None:
    import imageio.v2 as imageio

    frame = compose(VIEW, CAMERA, ["x"])
    writer = Mp4Writer(tmp_path / "deep" / "er" / "v.mp4", fps=20)
    for k in range(5):
        writer.append(np.roll(frame, k, axis=1))
    writer.close()
    reader = imageio.get_reader(writer.path)
    frames = list(reader.iter_data())  # list(reader) asks its length: inf for an MP4
    assert len(frames) == 5 and frames[0].shape == frame.shape
    assert reader.get_meta_data()["fps"] == 20


def test_a_video_path_that_cannot_be_written_is_refused_before_anything_runs(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=r"cannot create its folder .*file"):
        mp4_path(blocker / "sub" / "v.mp4")
    with pytest.raises(ValueError, match=r"ending in \.mp4"):
        mp4_path(tmp_path / "v.avi")
    (tmp_path / "d.mp4").mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        mp4_path(tmp_path / "d.mp4")
