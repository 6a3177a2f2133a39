"""A trainer for ``test_torch.py``'s resume test, run as its own process (killed with
SIGKILL mid-training, then run again): it trains on ``readerd.torch.loader``'s batches,
saves the loader's ``state_dict()`` with ``torch.save`` every SAVE_EVERY steps
(atomically), and appends the ids of each batch it trained on to a log, one line a step.

    python torch_trainer.py ADDR SPEC_JSON STATE_FILE LOG WORKERS SAVE_EVERY [KILL_AT_STEP]
"""

from __future__ import annotations

import json
import os
import signal
import sys

import torch

import readerd.torch as readerd_torch

addr, spec_path, state_path, log_path = sys.argv[1:5]
workers, save_every = int(sys.argv[5]), int(sys.argv[6])
kill_at = int(sys.argv[7]) if len(sys.argv) > 7 else 0
with open(spec_path) as f:
    spec = json.load(f)
loader = readerd_torch.loader(readerd_torch.IterableDataset(addr, spec, checkpoint_every=2), num_workers=workers)
step = 0
if os.path.exists(state_path):
    saved = torch.load(state_path)
    loader.load_state_dict(saved["loader"])
    step = saved["step"]
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for batch in loader:
    loss = model(batch["x"]).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    step += 1
    with open(log_path, "a") as log:
        log.write(json.dumps(batch["id"].tolist()) + "\n")
        log.flush()
        os.fsync(log.fileno())
    if step % save_every == 0:
        torch.save({"loader": loader.state_dict(), "step": step}, state_path + ".tmp")
        os.replace(state_path + ".tmp", state_path)
    if step == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
print("done", flush=True)
