"""Where a run's verl processes go (GPU pools), and what follows from it: verl's pool settings and the
Slurm job's shape. One home for the arithmetic; nothing else spells out node or GPU counts.

verl 0.9.1 gives every role its own pool of whole GPUs (paths under the installed `verl` package):
- trainer: `trainer.nnodes x trainer.n_gpus_per_node` (trainer/ppo/v1/trainer_base.py:818-820 synchronous,
  experimental/separation/utils.py:42 fully async);
- teacher: `distillation.nnodes x distillation.n_gpus_per_node` (trainer_base.py:843-845,
  experimental/fully_async_policy/fully_async_rollouter.py:785-788), split into `num_replicas` replicas of
  `tensor_model_parallel_size` GPUs each, which must fill it exactly (experimental/teacher_loop/teacher_model.py:63-72;
  for one teacher verl sets num_replicas = pool // TP, workers/config/distillation.py:291-306);
- rollout: synchronous runs put the vLLM replicas on the trainer's GPUs (hybrid engine), `world // TP`
  replicas (workers/rollout/llm_server.py:434-460; the trainer's world size must be a multiple of the TP,
  workers/engine_workers.py:655-660); the fully-async trainer needs its own rollout pool,
  `rollout.nnodes x rollout.n_gpus_per_node` (fully_async_main.py:235-236, llm_server.py:455-460), and
  refuses the hybrid engine (fully_async_trainer.py:75-76, fully_async_rollouter.py:348-350).

The paper's placement (2 nodes x 4 GPUs: a teacher node; a node with the trainer and 4 rollout replicas) is
the synchronous layout. A k > 0 run adds `rollout_nodes` node(s) for the standalone rollout pool, so its
trainer and its rollout replicas are the synchronous run's (3 nodes x 4 GPUs by default; see the README's
"Known to differ from the paper").
"""
from __future__ import annotations

from dataclasses import dataclass

from opd.rows import Row
from opd.spec import Verl


@dataclass(frozen=True)
class Pool:
    nnodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nnodes * self.gpus_per_node


@dataclass(frozen=True)
class Layout:
    trainer: Pool
    teacher: Pool | None  # None: no teacher (the RL rows)
    rollout: Pool | None  # None: synchronous, the replicas share the trainer's GPUs
    rollout_tp: int = 1
    teacher_tp: int = 1

    @property
    def rollout_replicas(self) -> int:
        return (self.rollout or self.trainer).gpus // self.rollout_tp

    @property
    def teacher_replicas(self) -> int:
        return self.teacher.gpus // self.teacher_tp if self.teacher else 0

    @property
    def pools(self) -> dict[str, Pool]:
        return {k: p for k, p in (("trainer", self.trainer), ("rollout", self.rollout), ("teacher", self.teacher)) if p}

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pools.values())

    def errors(self) -> list[str]:
        """What verl 0.9.1 would refuse about this layout (empty when it fits)."""
        out = []
        if (self.rollout or self.trainer).gpus % self.rollout_tp:
            out.append(f"the rollout pool's {(self.rollout or self.trainer).gpus} GPU(s) are not a multiple of the "
                       f"rollout tensor parallelism {self.rollout_tp}")
        if self.teacher and self.teacher.gpus % self.teacher_tp:
            out.append(f"the teacher pool's {self.teacher.gpus} GPU(s) are not a multiple of the teacher tensor "
                       f"parallelism {self.teacher_tp}")
        return out

    def overrides(self) -> list[str]:
        """verl's settings for these pools."""
        o = [f"trainer.nnodes={self.trainer.nnodes}", f"trainer.n_gpus_per_node={self.trainer.gpus_per_node}",
             f"actor_rollout_ref.rollout.tensor_model_parallel_size={self.rollout_tp}"]
        if self.teacher:
            # verl sets a single teacher's replica count to pool // TP itself (workers/config/distillation.py:291-306)
            o += [f"distillation.nnodes={self.teacher.nnodes}", f"distillation.n_gpus_per_node={self.teacher.gpus_per_node}",
                  f"distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size={self.teacher_tp}"]
        if self.rollout:
            o += [f"rollout.nnodes={self.rollout.nnodes}", f"rollout.n_gpus_per_node={self.rollout.gpus_per_node}"]
        return o

    def slurm(self) -> dict:
        """The Slurm job that holds these pools: whole nodes, one task per node (the Ray head or a worker)."""
        per_node = {p.gpus_per_node for p in self.pools.values()}
        if len(per_node) != 1:
            raise ValueError(f"pools with different GPUs per node {sorted(per_node)} do not make whole Slurm nodes")
        # exclusive: verl's weight-sync sockets are /tmp/rl-colocate-zmq-<Ray job id>-... on every node
        # (workers/rollout/vllm_rollout/vllm_rollout.py:139-141), and the Ray job id starts at the same value in
        # every Ray cluster, so two runs on one node would bind each other's sockets
        return {"nodes": sum(p.nnodes for p in self.pools.values()), "gpus_per_node": per_node.pop(),
                "tasks_per_node": 1, "exclusive": True}


def layout(verl: Verl | dict, row: Row | dict) -> Layout:
    """A row's layout from an experiment's `verl.layout` (config.yaml; defaults: opd.spec.LayoutSettings)."""
    r, L = Row.of(row), Verl.of(verl).layout
    g = L.gpus_per_node
    return Layout(trainer=Pool(L.trainer_nodes, g),
                  teacher=Pool(L.teacher_nodes, g) if r.algorithm == "opd" else None,
                  rollout=Pool(L.rollout_nodes, g) if r.staleness > 0 else None,
                  rollout_tp=L.rollout_tp, teacher_tp=L.teacher_tp)
