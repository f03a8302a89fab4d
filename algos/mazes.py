"""The gridworld mazes of Sutton & Barto, chapter 8 -- shared substrate of algos/dyna_q_{torch,jax}.py.

Book:   Sutton & Barto 2018, "Reinforcement Learning: An Introduction" (2nd ed.), section 8.2 (the
        Dyna maze of figure 8.2) and section 8.3 (the blocking maze of figure 8.4 and the shortcut
        maze of figure 8.5).
Docs:   docs/algorithms/dyna_q.md

Framework-neutral (numpy and gymnasium only): the environment, not the algorithm. A maze is a grid
of free cells and walls with a start cell S and a goal cell G. The state is the agent's cell,
row * num_cols + col (a Discrete observation); the four actions move up, down, left and right
(Discrete(4)). Transitions are deterministic: a move into a wall or off the grid leaves the agent
where it is. Reaching the goal gives reward 1 and terminates the episode; every other step gives 0.
There is no time limit (an episode ends only at the goal).

The blocking and shortcut mazes change their wall after `change_at` steps of the environment,
counted over all episodes since it was built (reset does not restart the count): steps 1 ..
change_at are taken in the first layout, every later step in the second. The agent is not moved
by the change; if a new wall appears on its cell, it steps off it normally.

Importing this module registers DynaMaze-v0, BlockingMaze-v0 and ShortcutMaze-v0 with gymnasium
(gym.make("BlockingMaze-v0", change_at=500) overrides the step of the change).
"""

from collections import deque

import gymnasium as gym
import numpy as np

# Layouts, top row first: "." free, "#" wall, "S" start, "G" goal.
DYNA_MAZE = (
    ".......#G",
    "..#....#.",
    "S.#....#.",
    "..#......",
    ".....#...",
    ".........",
)
# Blocking maze: a short way round the right end of the wall, closed after the change; the only
# way left is round the left end.
BLOCKING_MAZE = (
    "........G",
    ".........",
    ".........",
    "########.",
    ".........",
    "...S.....",
)
BLOCKING_MAZE_CHANGED = (
    "........G",
    ".........",
    ".........",
    ".########",
    ".........",
    "...S.....",
)
# Shortcut maze: the long way round the left end; the change opens a short way at the right end.
SHORTCUT_MAZE = BLOCKING_MAZE_CHANGED
SHORTCUT_MAZE_CHANGED = (
    "........G",
    ".........",
    ".........",
    ".#######.",
    ".........",
    "...S.....",
)
# Moves (d_row, d_col) of the actions 0-3.
MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))
ACTION_NAMES = ("up", "down", "left", "right")


def parse_layout(layout):
    """(walls, start, goal) of a layout: a (rows, cols) bool array and two (row, col) tuples."""
    grid = np.array([list(row) for row in layout])
    if len({len(row) for row in layout}) != 1:
        raise ValueError("every row of a maze layout must have the same length")
    (start,), (goal,) = zip(*np.nonzero(grid == "S")), zip(*np.nonzero(grid == "G"))
    return grid == "#", (int(start[0]), int(start[1])), (int(goal[0]), int(goal[1]))


def move(walls, cell, action):
    """The cell reached from `cell` by `action`: a wall or the edge of the grid stops the move."""
    row, col = cell[0] + MOVES[action][0], cell[1] + MOVES[action][1]
    if 0 <= row < walls.shape[0] and 0 <= col < walls.shape[1] and not walls[row, col]:
        return row, col
    return cell


def shortest_path_length(walls, start, goal):
    """Length (in steps) of a shortest path from start to goal, by breadth-first search over the
    free cells; None if the goal cannot be reached."""
    distance = {start: 0}
    frontier = deque([start])
    while frontier:
        cell = frontier.popleft()
        if cell == goal:
            return distance[cell]
        for action in range(len(MOVES)):
            nxt = move(walls, cell, action)
            if nxt not in distance:
                distance[nxt] = distance[cell] + 1
                frontier.append(nxt)
    return None


def policy_path_length(walls, start, goal, policy):
    """Steps the deterministic policy (an action per state, state = row * cols + col) takes from
    start to goal; None if it never gets there (it revisits a cell: the walk is then a loop)."""
    cell, visited = start, set()
    while cell != goal:
        if cell in visited:
            return None
        visited.add(cell)
        cell = move(walls, cell, int(policy[cell[0] * walls.shape[1] + cell[1]]))
    return len(visited)


class MazeEnv(gym.Env):
    """A deterministic gridworld maze (see the module docstring); `changed_layout` and `change_at`
    make it change its walls after change_at steps (change_at=None: never)."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, layout=DYNA_MAZE, changed_layout=None, change_at=None, render_mode=None):
        if change_at is not None and (changed_layout is None or change_at < 0):
            raise ValueError(
                f"change_at = {change_at}: only a maze with a second layout changes, at a step >= 0"
            )
        self.layouts = [parse_layout(layout)] + ([parse_layout(changed_layout)] if changed_layout else [])
        self.change_at = change_at
        self.render_mode = render_mode
        self.walls, self.start, self.goal = self.layouts[0]
        self.num_rows, self.num_cols = self.walls.shape
        self.observation_space = gym.spaces.Discrete(self.num_rows * self.num_cols)
        self.action_space = gym.spaces.Discrete(len(MOVES))
        self.steps_taken = 0  # over all episodes: the clock of the wall change
        self.cell = self.start
        if change_at == 0:
            self.walls = self.layouts[1][0]

    @property
    def changed(self):
        """True once the walls have changed (always False for a maze without a second layout)."""
        return self.change_at is not None and self.steps_taken >= self.change_at

    def state(self, cell):
        return cell[0] * self.num_cols + cell[1]

    def shortest_path_length(self):
        """Shortest start-to-goal path in the current layout (the Dyna maze: 14 steps)."""
        return shortest_path_length(self.walls, self.start, self.goal)

    def policy_path_length(self, policy):
        """Steps of the deterministic policy from start to goal in the current layout (None: never)."""
        return policy_path_length(self.walls, self.start, self.goal, policy)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)  # nothing here is random; kept for the gymnasium contract
        self.cell = self.start
        return self.state(self.cell), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        self.cell = move(self.walls, self.cell, int(action))
        terminated = self.cell == self.goal
        self.steps_taken += 1
        if self.change_at is not None and self.steps_taken == self.change_at:
            self.walls = self.layouts[1][0]
        return self.state(self.cell), float(terminated), terminated, False, {}

    def render(self):
        rows = []
        for r in range(self.num_rows):
            row = ""
            for c in range(self.num_cols):
                row += (
                    "A"
                    if (r, c) == self.cell
                    else "G"
                    if (r, c) == self.goal
                    else "S"
                    if (r, c) == self.start
                    else "#"
                    if self.walls[r, c]
                    else "."
                )
            rows.append(row)
        return "\n".join(rows)


def dyna_maze(render_mode=None):
    return MazeEnv(DYNA_MAZE, render_mode=render_mode)


def blocking_maze(change_at=1000, render_mode=None):
    return MazeEnv(BLOCKING_MAZE, BLOCKING_MAZE_CHANGED, change_at, render_mode)


def shortcut_maze(change_at=3000, render_mode=None):
    return MazeEnv(SHORTCUT_MAZE, SHORTCUT_MAZE_CHANGED, change_at, render_mode)


# env id -> constructor; the change steps are S&B's (figures 8.4 and 8.5).
MAZES = {"DynaMaze-v0": dyna_maze, "BlockingMaze-v0": blocking_maze, "ShortcutMaze-v0": shortcut_maze}
CHANGING_MAZES = ("BlockingMaze-v0", "ShortcutMaze-v0")
for _env_id, _make in MAZES.items():
    if _env_id not in gym.registry:
        gym.register(id=_env_id, entry_point=_make)
