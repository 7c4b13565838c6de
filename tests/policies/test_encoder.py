import pytest
import torch
import torchvision

from policies.config import ConfigError
from policies.encoder import EncoderConfig, StateEncoder
from policies.fusion import MODALITIES
from policies.image_encoder import ImageConfig
from policies.student_policy import StudentPolicy


def _inputs(cfg: EncoderConfig, batch: int = 3) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return (
        torch.randint(0, 256, (batch, cfg.image.height, cfg.image.width, 3), dtype=torch.uint8, generator=g),
        torch.randn(batch, cfg.imu.window, 6, generator=g),
        torch.tensor([0, 1, 2])[:batch],
        torch.rand(batch, generator=g),
        torch.randint(0, 500, (batch,), generator=g).float(),
    )


def test_encoder_shapes_and_gates(tiny_cfg, contract):
    enc = StateEncoder(tiny_cfg.encoder, contract.num_skills).eval()
    emb, gates = enc(*_inputs(tiny_cfg.encoder))
    assert emb.shape == (3, tiny_cfg.encoder.embed_dim)
    assert gates.shape == (3, len(MODALITIES))
    assert torch.all((gates > 0) & (gates < 1))
    assert torch.all(torch.isfinite(emb))


def test_every_modality_changes_the_embedding(tiny_cfg, contract):
    torch.manual_seed(0)
    enc = StateEncoder(tiny_cfg.encoder, contract.num_skills).eval()
    base = _inputs(tiny_cfg.encoder, 1)
    ref, _ = enc(*base)
    for i, name in enumerate(["image", "imu", "skill", "progress", "step"]):
        changed = list(base)
        x = changed[i]
        changed[i] = (255 - x) if x.dtype == torch.uint8 else (x + 1 if name != "progress" else 1 - x)
        if name == "skill":
            changed[i] = torch.tensor([2])
        out, _ = enc(*changed)
        assert not torch.allclose(out, ref), f"{name} has no effect on the embedding"


def test_config_validation_names_fields():
    with pytest.raises(ConfigError, match="fusion"):
        EncoderConfig.from_dict({"fusion": {"dim": 30, "heads": 4}})
    with pytest.raises(ConfigError, match="image.height"):
        EncoderConfig.from_dict({"image": {"height": 100}})
    with pytest.raises(ConfigError, match="image.backbone"):
        EncoderConfig.from_dict({"image": {"backbone": "vit"}})
    with pytest.raises(ConfigError, match="imu.window"):
        EncoderConfig.from_dict({"imu": {"window": 0}})


def test_fewer_trunk_stages_halve_the_stride_and_shrink_the_trunk():
    from policies.image_encoder import ImageEncoder

    full = ImageEncoder(ImageConfig(backbone="resnet18", height=64, width=64), dim=32)
    three = ImageEncoder(ImageConfig(backbone="resnet18", stages=3, height=64, width=64), dim=32)
    image = torch.zeros(2, 64, 64, 3, dtype=torch.uint8)
    assert full(image).shape == (2, 4, 32)  # stride 32: 2 x 2 tokens
    assert three(image).shape == (2, 16, 32)  # stride 16: 4 x 4 tokens
    size = [sum(p.numel() for p in m.trunk.parameters()) for m in (full, three)]
    assert size[1] < size[0] / 3  # the last stage holds three quarters of ResNet18's weights
    with pytest.raises(ConfigError, match="image.height"):
        EncoderConfig.from_dict({"image": {"stages": 3, "height": 72}})  # not a multiple of 16
    EncoderConfig.from_dict({"image": {"stages": 3, "height": 48}})  # 48 = 3 x 16 is fine at stride 16


def test_a_wider_camera_keeps_the_narrow_position_embedding_at_its_centre():
    from policies.image_encoder import widen_positions

    pos = torch.arange(2 * 3 * 4, dtype=torch.float32).view(1, 6, 4)  # 2 rows x 3 columns, dim 4
    wide = widen_positions(pos, rows=2, cols=7).view(1, 2, 7, 4)
    narrow = pos.view(1, 2, 3, 4)
    assert torch.equal(wide[:, :, 2:5], narrow)  # the centre columns are the narrow camera's
    assert torch.equal(wide[:, :, :2], narrow[:, :, :1].expand(-1, -1, 2, -1))  # the left edge repeated
    assert torch.equal(wide[:, :, 5:], narrow[:, :, 2:].expand(-1, -1, 2, -1))  # and the right one
    assert torch.equal(widen_positions(pos, 2, 3), pos)
    with pytest.raises(ValueError, match="cannot widen"):
        widen_positions(pos, rows=2, cols=2)  # narrower
    with pytest.raises(ValueError, match="cannot widen"):
        widen_positions(pos, rows=4, cols=8)  # 6 tokens are not 4 rows


def test_loads_a_local_trunk_weights_file_and_says_which(tmp_path, tiny_cfg, contract):
    torch.manual_seed(3)
    ref = torchvision.models.resnet18(weights=None)
    path = tmp_path / "r18.pt"
    torch.save(ref.state_dict(), path)
    cfg = tiny_cfg.model_copy(deep=True)
    cfg.encoder.image = ImageConfig(backbone="resnet18", height=64, width=64, weights=str(path))
    policy = StudentPolicy(cfg, contract)
    assert policy.encoder.weights_source == str(path)
    torch.testing.assert_close(policy.encoder.image.trunk[0].weight, ref.conv1.weight)
    assert StudentPolicy(tiny_cfg, contract).encoder.weights_source == "random-init"


def test_missing_or_mismatched_weights_are_refused(tmp_path, tiny_cfg, contract):
    cfg = tiny_cfg.model_copy(deep=True)
    cfg.encoder.image = ImageConfig(
        backbone="resnet18", height=64, width=64, weights=str(tmp_path / "none.pt")
    )
    with pytest.raises(FileNotFoundError, match="image.weights"):
        StudentPolicy(cfg, contract)
    wrong = tmp_path / "r34.pt"
    torch.save(torchvision.models.resnet34(weights=None).state_dict(), wrong)
    cfg.encoder.image = ImageConfig(backbone="resnet18", height=64, width=64, weights=str(wrong))
    with pytest.raises(ValueError, match="unexpected keys"):
        StudentPolicy(cfg, contract)
