"""The kept cluster timings (``saved/training.json``) are timings of the programs ``train`` runs:
the cluster builds each row's programs with ``programs.build_programs`` (``row_programs``), for
the row's registered strategy, its sync and the saved run's sizes, and host 0's link sent what
those programs send. No test asserts a time."""

import statistics

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from course_utils.models.links import FRAME_SHARE, rate_bytes_per_s
from course_utils.problems.classification import PART_FOUR_MLP, padded_size
from course_utils.results.training import saved_training_results
from course_utils.tools.cluster.training import (
    HELDOUT_FREE_ROWS,
    TRAINING_PLANS,
    row_programs,
    step_fits,
)
from course_utils.training.diloco import replica_mesh
from course_utils.training.part_four import PART_FOUR_ROWS, TOPK_FRACTION
from course_utils.training.strategies import spec
from course_utils.training.train import train

SAVED = saved_training_results()
# link bytes per step over what the programs send: TCP/IP's headers add about 0.2 % to large
# ring messages; int8's all-to-all is not a ring, PowerSGD's messages are a few KiB each
OVERHEAD = {"int8": 1.18, "powersgd": 1.32}


def _flat_mesh():
    return Mesh(np.asarray(jax.devices()), ("d",))


def test_the_saved_run_is_of_this_many_devices_and_its_plan_s_rows():
    hosts, per_host = SAVED.cluster.hosts, SAVED.cluster.devices_per_host
    assert jax.device_count() == hosts * per_host
    plan = TRAINING_PLANS[SAVED.cluster.plan]
    wanted = {(r, b) for r in plan["strategies"] for b in plan["batch_sizes"]
              if step_fits(r, b, hosts * per_host, HELDOUT_FREE_ROWS)}
    assert {(r.strategy, r.batch_size) for r in SAVED.rows} == wanted


@pytest.mark.parametrize("row", PART_FOUR_ROWS, ids=[r.name for r in PART_FOUR_ROWS])
def test_each_timed_row_runs_train_s_programs_of_its_strategy_and_sync(row):
    batch_size = min(TRAINING_PLANS[SAVED.cluster.plan]["batch_sizes"])
    programs, state, (x, y) = row_programs(_flat_mesh(), row.name, batch_size,
                                           hosts=SAVED.cluster.hosts)
    entry = spec(row.strategy)
    assert x.shape == (jax.device_count() * batch_size, PART_FOUR_MLP.features)
    n = padded_size(jax.device_count(), PART_FOUR_MLP)
    assert state.params.size in (n, n * jax.device_count())
    assert (programs.micro is not None) == (row.accumulate > 1)
    assert (programs.outer is not None) == (entry.sync.outer is not None)
    assert programs.every == row.local_steps // entry.sync.fragments
    # the same programs as train's, on the mesh it takes (HSDP's: the saved run's hosts)
    mesh = _flat_mesh() if entry.mesh_axes is None else replica_mesh(SAVED.cluster.hosts)
    run = train(mesh, row.strategy, steps=row.local_steps, batch_size=batch_size,
                accumulate=row.accumulate, local_steps=row.local_steps,
                topk_fraction=TOPK_FRACTION, mlp=PART_FOUR_MLP)
    assert programs.collectives == run.collectives
    assert programs.bytes_per_step(row.local_steps) == run.bytes_per_step
    assert programs.bytes_across_replicas == run.bytes_across_replicas


@pytest.mark.parametrize("row", PART_FOUR_ROWS, ids=[r.name for r in PART_FOUR_ROWS])
def test_host_0_s_link_sent_what_the_row_s_programs_send(row):
    """One ring over the hosts crosses host 0's link once per direction: host 0 sends one
    device's ring payload; HSDP's each device sends its slice across the hosts."""
    batch_size = max(TRAINING_PLANS[SAVED.cluster.plan]["batch_sizes"])
    programs, _, _ = row_programs(_flat_mesh(), row.name, batch_size, hosts=SAVED.cluster.hosts)
    if programs.bytes_across_replicas is not None:
        sent = programs.bytes_across_replicas * SAVED.cluster.devices_per_host
    else:  # local SGD's step sends nothing, its averaging once per H steps
        sent = programs.bytes_per_step(programs.every)
    # from 1 Gbit/s the counter reads the payload; at the slower rates, under the 2 ms bucket, it
    # counts every frame's headers too (1 / FRAME_SHARE = 1.046 of the payload) and the ACKs
    # (about 2 % by the counter): the cluster appendix
    for fast in (True, False):
        link = statistics.median(r.link_bytes for r in SAVED.rows if r.strategy == row.name
                                 and (rate_bytes_per_s(r.link_rate) >= 1e9 / 8) == fast)
        headers = 1.0 if fast else 1.02 / FRAME_SHARE
        assert 1.0 <= link / sent <= OVERHEAD.get(row.name, 1.03) * headers, fast
