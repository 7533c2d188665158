"""Part four's strategies, as ``course cluster --measure training`` times them and the step
model reads them: each row's name, the ``train`` strategy it runs, and their settings."""

# strategy of a row → the ``train`` strategy whose updates it makes (zero3: FSDP, the layers
# gathered again for the backward pass, as FSDP does when it frees them after the forward pass;
# hsdp: its own two-axis step, ``training.hsdp``, whose updates are data parallelism's)
STEPS = {"data_parallel": "data_parallel", "accumulation": "data_parallel",
         "zero3": "zero3_regather", "hsdp": "data_parallel", "bf16": "bf16", "int8": "int8",
         "topk_ef": "topk_ef", "powersgd": "powersgd", "local_sgd": "local_sgd"}
SAME_CURVE = {"hsdp": "data_parallel"}  # the same updates, so the same held-out curve
COMPRESSED = ("bf16", "int8", "topk_ef", "powersgd")  # the schemes that send fewer bytes
ACCUMULATION = 4  # micro-steps per optimizer step of "accumulation"
LOCAL_STEPS = 8  # H of "local_sgd": its parameters are averaged once every H steps
TOPK_FRACTION = 0.01  # entries each device sends under top-k, as in step 15
