"""The TensorRT engine cache's naming and atomic writes are plain Python: tested here without a GPU."""

from pathlib import Path

import pytest

from policies.runtime.tensorrt_backend import _write_atomic, engine_cache_path


def test_cache_name_changes_with_every_input_that_invalidates_an_engine(tmp_path):
    base = dict(cache_dir=tmp_path, model="encoder", onnx_sha256="ab" * 32, trt_version="10.9.0",
                capability=(9, 0), precision="fp16")  # fmt: skip
    ref = engine_cache_path(**base)
    assert ref.parent == tmp_path and ref.suffix == ".engine"
    for key, other in [("onnx_sha256", "cd" * 32), ("trt_version", "10.10.0"), ("capability", (8, 9)),
                       ("precision", "fp32"), ("model", "policy")]:  # fmt: skip
        assert engine_cache_path(**{**base, key: other}) != ref, key


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "sub" / "x.engine"
    _write_atomic(target, b"engine-bytes")
    assert target.read_bytes() == b"engine-bytes"

    def boom(*_args):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError):
        _write_atomic(tmp_path / "y.engine", b"data")
    assert not (tmp_path / "y.engine").exists()
    assert [p.name for p in Path(tmp_path).iterdir() if p.suffix == ".tmp"] == []
