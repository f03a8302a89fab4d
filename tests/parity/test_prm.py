"""Tier 2 for the process reward model: the twins' step_mask, mc_step_labels (on one deterministic
stub policy), masked_bce_loss (value and gradient), aggregate_step_scores, best_of_n_select,
best_of_n_table and best_of_n_kl agree within 1e-4 on identical inputs, and so does the whole
chain -- one checkpoint and head, one batch of solutions, per-position logits, the PRM and ORM
losses and the aggregated scores."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TOL = 1e-4
tasks = load_script("llm/tasks.py")


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    B, T = 32, 10
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    mask = np.zeros((B, T), dtype=np.float32)
    mask[:, 6:9] = 1.0
    mask[rng.random(B) < 0.3, 8:] = 0.0
    mask[:3] = 0.0  # solutions without a step
    return {
        "logits": f32(rng.normal(0, 2, (B, T))),
        "labels": f32(rng.random((B, T))),
        "hard": f32(rng.random((B, T)) < 0.5),
        "mask": mask,
        "scores": f32(rng.normal(size=(8, 4, 4)).round(1)),
    }  # rounded: ties happen


def stub(prefixes, max_new_tokens):
    """A deterministic 'policy': each row's continuation is drawn from a generator seeded by the row's
    tokens and its position, so both twins see the same rollouts."""
    out = np.zeros((len(prefixes), max_new_tokens), dtype=np.int64)
    for i, row in enumerate(np.asarray(prefixes)):
        r = np.random.default_rng([int(t) for t in row] + [i])
        out[i] = r.choice([2, 3, 4, tasks.EOS], size=max_new_tokens, p=[0.4, 0.3, 0.2, 0.1])
    return out


@pytest.mark.parametrize("soft", [True, False])
def test_mc_step_labels_parity(twins, soft):
    pt, jx = twins
    rng = np.random.default_rng(0)
    pairs = tasks.make_splits(2, 40)[1]
    completions = rng.choice([2, 3, 4, 5, tasks.EOS], size=(40, 4), p=[0.3, 0.3, 0.2, 0.1, 0.1])
    completions[::4, :3] = [tasks.encode(tasks.answer_text(int(a + b), 2)) for a, b in pairs[::4]]
    completions[::4, 3] = tasks.EOS
    l_t, s_t = pt.mc_step_labels(pairs, completions, stub, 3, 2, soft)
    l_j, s_j, _ = jx.mc_step_labels(
        pairs, completions, lambda p, k, key: (stub(p, k), key), 3, 2, jax.random.PRNGKey(0), soft
    )
    np.testing.assert_array_equal(s_t, s_j)
    np.testing.assert_array_equal(s_t, pt.step_mask(completions))
    np.testing.assert_allclose(l_t, l_j, atol=TOL)
    assert ((l_t >= 0) & (l_t <= 1)).all() and (l_t[s_t == 0] == 0).all()


@pytest.mark.parametrize("labels", ["labels", "hard"])
def test_masked_bce_loss_and_gradient_parity(twins, batch, labels):
    pt, jx = twins
    z = torch.tensor(batch["logits"], requires_grad=True)
    loss_t, acc_t = pt.masked_bce_loss(z, torch.as_tensor(batch[labels]), torch.as_tensor(batch["mask"]))
    loss_t.backward()
    f = lambda z: jx.masked_bce_loss(z, jnp.asarray(batch[labels]), jnp.asarray(batch["mask"]))
    loss_j, acc_j = f(jnp.asarray(batch["logits"]))
    g_j = jax.grad(lambda z: f(z)[0])(jnp.asarray(batch["logits"]))
    assert abs(loss_t.item() - float(loss_j)) < TOL and abs(acc_t.item() - float(acc_j)) < TOL
    np.testing.assert_allclose(z.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("how", ["min", "product"])
def test_aggregate_step_scores_parity(twins, batch, how):
    pt, jx = twins
    a_t = pt.aggregate_step_scores(
        torch.as_tensor(batch["logits"]), torch.as_tensor(batch["mask"]), how
    ).numpy()
    a_j = np.asarray(jx.aggregate_step_scores(jnp.asarray(batch["logits"]), jnp.asarray(batch["mask"]), how))
    np.testing.assert_allclose(a_t, a_j, atol=TOL, rtol=TOL)
    assert (a_t[:3] == 0).all()


def test_best_of_n_select_table_and_kl_parity(twins, batch):
    pt, jx = twins
    np.testing.assert_array_equal(
        pt.best_of_n_select(torch.as_tensor(batch["scores"])).numpy(),
        np.asarray(jx.best_of_n_select(jnp.asarray(batch["scores"]))),
    )
    rng = np.random.default_rng(0)
    gold = (rng.random((8, 16)) < 0.5).astype(np.float32)
    answers = rng.choice(["100", "200", "300"], size=(8, 16))
    scores = {"prm": batch["scores"].reshape(8, 16), "orm": -batch["scores"].reshape(8, 16)}
    assert pt.best_of_n_table(scores, gold, answers, [1, 2, 4, 8, 16]) == jx.best_of_n_table(
        scores, gold, answers, [1, 2, 4, 8, 16]
    )
    for n in (1, 2, 4, 8, 16):
        assert abs(pt.best_of_n_kl(n) - jx.best_of_n_kl(n)) < 1e-12


def test_reward_models_on_one_checkpoint_and_batch(twins, tmp_path):
    """Same transformer weights and the same head: per-position logits, the PRM (step positions) and
    ORM (last token) losses with their gradients, and the min / product scores agree."""
    pt, jx = twins
    lm_t = load_script("llm/tinylm_torch.py")
    torch.manual_seed(0)
    lm_t.save_checkpoint(lm_t.TinyLM(tasks.VOCAB_SIZE, 16, 128, 2, 4), tmp_path / "sft.npz")
    rng = np.random.default_rng(0)
    w, b = rng.normal(0, 0.5, 128).astype(np.float32), np.float32(0.1)
    pairs = tasks.make_splits(2, 32)[1]
    completions = rng.integers(2, 12, size=(32, 4))
    completions[::3, 3] = tasks.EOS
    completions[::5, 1] = tasks.EOS
    P = tasks.prompt_len(2)
    tokens = np.concatenate([tasks.encode_prompts(pairs, 2), completions], axis=1)
    steps = np.concatenate(
        [np.zeros((32, P), dtype=np.float32), pt.step_mask(completions).astype(np.float32)], axis=1
    )
    labels = (rng.random(steps.shape) < 0.5).astype(np.float32)
    last = np.zeros_like(steps)
    last[np.arange(32), pt.last_index(P, completions)] = 1.0

    def chain_torch():
        model = pt.StepRewardModel(lm_t.load_checkpoint(tmp_path / "sft.npz"))
        with torch.no_grad():
            model.head.weight.copy_(torch.as_tensor(w)[None])
            model.head.bias.fill_(float(b))
        z = model(torch.as_tensor(tokens)).detach().requires_grad_(True)
        prm_loss, _ = pt.masked_bce_loss(z, torch.as_tensor(labels), torch.as_tensor(steps))
        orm_loss, _ = pt.masked_bce_loss(z, torch.as_tensor(labels), torch.as_tensor(last))
        (prm_loss + orm_loss).backward()
        s_min = pt.aggregate_step_scores(z.detach(), torch.as_tensor(steps), "min").numpy()
        s_prod = pt.aggregate_step_scores(z.detach(), torch.as_tensor(steps), "product").numpy()
        return z.detach().numpy(), prm_loss.item(), orm_loss.item(), z.grad.numpy(), s_min, s_prod

    def chain_jax():
        lm_j = load_script("llm/tinylm_jax.py")
        policy, params = lm_j.load_checkpoint(tmp_path / "sft.npz")
        model = jx.StepRewardModel(policy.config)
        params = {
            "params": {
                "lm": params["params"],
                "head": {"kernel": jnp.asarray(w)[:, None], "bias": jnp.asarray([b])},
            }
        }
        z = model.apply(params, jnp.asarray(tokens))
        f = lambda z: (
            jx.masked_bce_loss(z, jnp.asarray(labels), jnp.asarray(steps))[0]
            + jx.masked_bce_loss(z, jnp.asarray(labels), jnp.asarray(last))[0]
        )
        prm_loss = jx.masked_bce_loss(z, jnp.asarray(labels), jnp.asarray(steps))[0]
        orm_loss = jx.masked_bce_loss(z, jnp.asarray(labels), jnp.asarray(last))[0]
        return (
            np.asarray(z),
            float(prm_loss),
            float(orm_loss),
            np.asarray(jax.grad(f)(z)),
            np.asarray(jx.aggregate_step_scores(z, jnp.asarray(steps), "min")),
            np.asarray(jx.aggregate_step_scores(z, jnp.asarray(steps), "product")),
        )

    for a, c in zip(chain_torch(), chain_jax()):
        np.testing.assert_allclose(a, c, atol=TOL, rtol=TOL)
