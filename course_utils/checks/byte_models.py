"""Every byte or time model of the package a student can reach (``BYTE_MODELS``): the
exercises that ask for bytes or seconds of a collective (steps 18, 21, 22) refuse them all."""

from __future__ import annotations

from course_utils.models import cost, cost_model, latency, links, step
from course_utils.models.link_traffic import ring_traffic
from course_utils.observe import ir
from course_utils.results import diloco_cluster
from course_utils.training import diloco, local, quantize
from course_utils.training.traffic import strategy_traffic

# every byte or time model of the package a student can reach, each as the function its module
# defines: a student's call is caught as that function, and the models they call are not
# followed (``forbidden.uses_forbidden`` follows the notebook's code only), so ``link_bytes``,
# which calls ``link_bytes_sent``, must be named itself
BYTE_MODELS = (cost_model.bytes_sent, cost_model.link_bytes_sent, cost_model.ring_bytes,
               cost_model.ring_time, cost_model.modelled_time, cost_model.bus_factor,
               cost.communication_budget, links.link_bytes, links.link_time_s,
               latency.collective_time, latency.hierarchical_time, step.step_time, ring_traffic,
               local.local_sgd_bytes, strategy_traffic, diloco.sync_traffic,
               diloco.every_h_traffic, local.every_h_traffic, cost.busbw_gbps, ir.ring_payload,
               quantize.exchange_bytes, diloco_cluster.sync_link_bytes)
