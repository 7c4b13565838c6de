"""The TensorRT engine cache's naming is plain Python: tested here without a GPU (its atomic write is
policies.files', tests/policies/test_files.py)."""

from policies.runtime.tensorrt_backend import engine_cache_path


def test_cache_name_changes_with_every_input_that_invalidates_an_engine(tmp_path):
    base = dict(cache_dir=tmp_path, model="encoder", onnx_sha256="ab" * 32, trt_version="10.9.0",
                capability=(9, 0), precision="fp16")  # fmt: skip
    ref = engine_cache_path(**base)
    assert ref.parent == tmp_path and ref.suffix == ".engine"
    for key, other in [("onnx_sha256", "cd" * 32), ("trt_version", "10.10.0"), ("capability", (8, 9)),
                       ("precision", "fp32"), ("model", "policy")]:  # fmt: skip
        assert engine_cache_path(**{**base, key: other}) != ref, key
