"""What one step of MuZero's search can see: the model's one-step action values against the true ones.
Not a test: a probe for docs/algorithms/muzero.md ("Why the search does not leave the plateau").

It loads a CartPole-v1 model saved by the JAX twin (`python algos/muzero_jax.py --seed 9 --save-model`
writes <run dir>/model.msgpack), plays one greedy episode (the noiseless search, argmax of the visits,
as the twin's evaluation) and prints how it ends and how fast the cart drifts. The network sizes, the
search settings and gamma are the defaults of algos/muzero_jax.py's Args (a model of other sizes is
refused; one trained with another gamma or search would be probed under the defaults'). Then, at
the chosen steps of that episode, for each action a it prints

    model Q(s, a) = r + gamma V(g(s, a))  the model's one-step value: reward and value predicted after
                                          one step of the dynamics network (what the root of the search
                                          compares before it looks deeper)
    true  Q(s, a)                         the simulator put into the episode's exact state at that step,
                                          action a taken, then the same greedy search policy to the end:
                                          the discounted return (the default gamma), a truncation at 500
                                          bootstrapping from the model's value of the last observation
                                          as the training targets do; with the steps it lasted

    python algos/muzero_jax.py --seed 9 --td-steps 50 --learning-starts 1000 --save-model --log-dir runs_probe
    python -m benchmarks.muzero_true_q runs_probe/CartPole-v1__muzero_jax__9__*/ --steps 0,30,60,100,150

(the two flags restore the fifty-step defaults under which the docs' probed models were trained; the
probe itself reads only the network sizes, the search settings and gamma, which did not change).

The true values need one search per simulated step (about 500 per action on a 500-step episode): a few
seconds per listed step on a 2-core CPU.
"""

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "algos"))


def probe(run_dir, steps=(0, 30, 60, 100, 150), env_seed=777):
    """Play the greedy episode and compare model and true Q at `steps` (see the module docstring).
    Returns {"length", "end", "terminated", "mean_velocity", "xs", "gamma", "last_value", "rows"}:
    "xs" the cart position before each step, "last_value" the model's value of the last observation
    (the bootstrap when the episode was truncated), and one row per probed step that the episode reached:
    {"step", "greedy", "model_value", "model_q": [L, R], "true_q": [L, R], "true_steps": [L, R]}."""
    model_path = os.path.join(run_dir, "model.msgpack")
    if not os.path.isfile(model_path):
        raise FileNotFoundError(
            f"no model.msgpack in {run_dir}: train algos/muzero_jax.py with --save-model "
            f"first (the probe reads the JAX twin's models only)"
        )
    steps = sorted({int(t) for t in steps})
    if steps and steps[0] < 0:
        raise ValueError("steps must be >= 0")

    import flax
    import gymnasium as gym
    import jax
    import jax.numpy as jnp

    import muzero_jax as mz

    args = mz.Args()
    space = gym.make(args.env_id).observation_space
    centre, half_width = mz.obs_scaling(space.low, space.high)  # the twin's default --scale-obs
    network = mz.MuZeroNet(2, args.hidden_size, args.latent_size, args.support_size)
    template = network.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)), jnp.zeros(1, jnp.int32))
    with open(model_path, "rb") as f:
        params = flax.serialization.from_bytes(template, f.read())
    # from_bytes fills the template's structure without comparing shapes: check them here
    expected = jax.tree_util.tree_map(jnp.shape, template)
    if jax.tree_util.tree_map(jnp.shape, params) != expected:
        raise ValueError(
            f"{model_path} does not match the default network (hidden_size {args.hidden_size}, "
            f"latent_size {args.latent_size}, support_size {args.support_size}, CartPole's 4 "
            f"observations and 2 actions): the probe reads default-sized CartPole models only"
        )
    act = mz.make_act(network, args)
    initial = jax.jit(lambda p, o: network.apply(p, o, method=mz.MuZeroNet.initial_inference))
    recurrent = jax.jit(
        lambda p, latent, a: network.apply(p, latent, a, method=mz.MuZeroNet.recurrent_inference)
    )
    key = jax.random.PRNGKey(0)  # unused by the noiseless argmax search

    def scaled(obs):
        return ((np.asarray(obs) - centre) / half_width).astype(np.float32)[None]

    def greedy(obs):
        return int(act(params, scaled(obs), key, sample=False)[0][0])

    def true_q(env, state, elapsed, action):
        """Put env into `state` at step `elapsed`, take `action`, then act greedily to the episode's end."""
        env.reset(seed=0)
        env.unwrapped.state = np.array(state)
        env._elapsed_steps = elapsed  # the TimeLimit wrapper's counter: truncation stays at step 500
        ret, discount, length = 0.0, 1.0, 0
        while True:
            obs, reward, terminated, truncated, _ = env.step(action)
            ret, discount, length = ret + discount * reward, discount * args.gamma, length + 1
            if terminated:
                return ret, length
            if truncated:  # bootstrap as the training targets do
                return ret + discount * float(initial(params, scaled(obs))[2][0]), length
            action = greedy(obs)

    env = gym.make(args.env_id)
    obs, _ = env.reset(seed=env_seed)
    saved, xs, velocities = {}, [], []
    terminated = truncated = False
    while not (terminated or truncated):
        t, action = len(xs), greedy(obs)
        if t in steps:
            saved[t] = (np.array(env.unwrapped.state), obs, action)
        xs.append(float(env.unwrapped.state[0]))
        velocities.append(float(env.unwrapped.state[1]))
        obs, _, terminated, truncated, _ = env.step(action)
    x, _, theta, _ = env.unwrapped.state
    end = (
        "truncated at 500"
        if truncated and not terminated
        else (
            f"cart off the track (x = {x:+.2f})" if abs(x) > 2.4 else f"pole fell (theta = {theta:+.3f} rad)"
        )
    )
    result = {
        "length": len(xs),
        "end": end,
        "terminated": bool(terminated),
        "mean_velocity": float(np.mean(velocities)),
        "xs": xs,
        "gamma": args.gamma,
        "last_value": float(initial(params, scaled(obs))[2][0]),
        "rows": [],
    }

    simulator = gym.make(args.env_id)
    assert isinstance(simulator, gym.wrappers.TimeLimit), (
        "the probe sets TimeLimit's step counter: it must be outermost"
    )
    for t, (state, obs, action) in sorted(saved.items()):
        latent, _, value = initial(params, scaled(obs))
        model_q = []
        for a in (0, 1):
            reward, next_value, _, _ = recurrent(params, latent, jnp.array([a]))
            model_q.append(float(reward[0] + args.gamma * next_value[0]))
        true = [true_q(simulator, state, t, a) for a in (0, 1)]
        result["rows"].append(
            {
                "step": t,
                "greedy": action,
                "model_value": float(value[0]),
                "model_q": model_q,
                "true_q": [q for q, _ in true],
                "true_steps": [n for _, n in true],
            }
        )
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "run_dir", help="a run directory of algos/muzero_jax.py --save-model (holds model.msgpack)"
    )
    parser.add_argument(
        "--steps", default="0,30,60,100,150", help="episode steps at which to compare (comma list)"
    )
    parser.add_argument("--env-seed", type=int, default=777, help="reset seed of the probed episode")
    opts = parser.parse_args()
    steps = [int(t) for t in opts.steps.split(",")]
    try:
        r = probe(opts.run_dir, steps, opts.env_seed)
    except (FileNotFoundError, ValueError) as e:
        sys.exit(str(e))
    xs = r["xs"]
    print(
        f"greedy episode: {r['length']} steps, {r['end']}; mean cart velocity {r['mean_velocity']:+.3f} m/s, "
        f"x at steps 100 / 200 / 300: "
        + " / ".join(f"{xs[k]:+.2f}" if k < len(xs) else "-" for k in (100, 200, 300))
    )
    print(
        f"{'step':>4}  {'greedy':>6}  {'model V':>7}  {'model Q(L)':>10}  {'model Q(R)':>10}  "
        f"{'true Q(L) (steps)':>17}  {'true Q(R) (steps)':>17}"
    )
    for row in r["rows"]:
        (ml, mr), (tl, tr), (nl, nr) = row["model_q"], row["true_q"], row["true_steps"]
        print(
            f"{row['step']:>4}  {'LR'[row['greedy']]:>6}  {row['model_value']:7.1f}  {ml:10.1f}  {mr:10.1f}  "
            f"{tl:10.1f} ({nl:>3})  {tr:10.1f} ({nr:>3})"
        )
    skipped = [t for t in sorted(set(steps)) if t >= r["length"]]
    if skipped:
        print(f"(the episode ended before step {skipped[0]}: steps {skipped} skipped)")


if __name__ == "__main__":
    main()
