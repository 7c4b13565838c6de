import torch

from policies.distill_losses import categorical_kl, masked_param_loss
from policies.hybrid_head import HybridActionHead


def test_kl_is_zero_for_equal_logits_and_positive_otherwise():
    t = torch.tensor([[2.0, 0.0, -1.0]])
    assert categorical_kl(t, t).item() == 0.0
    assert categorical_kl(t, torch.zeros(1, 3)).item() > 0.0


def test_param_loss_ignores_slots_of_skills_not_chosen(contract):
    head = HybridActionHead(4, contract)
    teacher = head.defaults.repeat(2, 1)
    student = teacher.clone()
    student[:, 2] += 1.0  # slot of skill 1 (turn)
    mask = head.slot_mask(torch.tensor([0, 1]))  # row 0 chose drive, row 1 chose turn
    loss = masked_param_loss(student, teacher, mask, head.low, head.high)
    assert loss[0].item() == 0.0
    assert loss[1].item() == (1.0 / 2.0) ** 2  # error 1 over half-range 2 of [-2, 2]
    stop = head.slot_mask(torch.tensor([2]))  # a skill without parameters contributes zero
    assert masked_param_loss(student[:1], teacher[:1], stop, head.low, head.high).item() == 0.0


def test_distillation_losses_fall_when_training_student_on_teacher(contract):
    torch.manual_seed(0)
    teacher = HybridActionHead(6, contract).eval()
    student = HybridActionHead(6, contract)
    opt = torch.optim.Adam(student.parameters(), lr=1e-2)
    x = torch.randn(256, 6)
    with torch.no_grad():
        t_dist = teacher(x)
        t_skill, t_params = teacher.deterministic(t_dist)
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    losses = []
    for _ in range(150):
        s_dist = student(x)
        s_params = student.to_bounds(s_dist.mean)
        loss = (
            categorical_kl(t_dist.logits, s_dist.logits)
            + masked_param_loss(s_params, t_params, student.slot_mask(t_skill), student.low, student.high)
        ).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]
    # The frozen teacher never changes.
    for k, v in teacher.state_dict().items():
        torch.testing.assert_close(v, before[k])
