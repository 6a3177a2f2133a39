"""A trainer for ``test_tf.py``'s resume tests, run as its own process (killed with
SIGKILL mid-training, then run again): it trains on ``readerd.tf.Reader``'s dataset and
appends the ids of each batch it trained on to a log, one line a step.

    python tf_trainer.py keras|loop ADDR SPEC_JSON BACKUP_DIR LOG EPOCHS SAVE_EVERY [KILL_AT_STEP]
"""

from __future__ import annotations

import json
import os
import signal
import sys

import tensorflow as tf

import readerd.tf

mode, addr, spec_path, backup_dir, log_path = sys.argv[1:6]
epochs, save_every = int(sys.argv[6]), int(sys.argv[7])
kill_at = int(sys.argv[8]) if len(sys.argv) > 8 else 0
with open(spec_path) as f:
    spec = json.load(f)
reader = readerd.tf.Reader(addr, spec, checkpoint_every=5)
steps = 0


def trained(ids) -> None:
    """Logs a step's ids (durably: the process may be killed right after), then dies at
    step KILL_AT_STEP."""
    global steps
    steps += 1
    with open(log_path, "a") as log:
        log.write(json.dumps([int(i) for i in ids]) + "\n")
        log.flush()
        os.fsync(log.fileno())


def die_if_due() -> None:
    if steps == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)


if mode == "keras":

    class Recording(tf.keras.Model):
        def train_step(self, data):
            trained(data[1].numpy())
            return super().train_step(data)

    class Killer(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            die_if_due()

    inputs = tf.keras.Input([2])
    model = Recording(inputs, tf.keras.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
    data = reader.dataset().map(lambda e: (e["x"], e["id"]))
    backup = readerd.tf.BackupAndRestore(backup_dir, reader, save_freq=save_every)
    model.fit(data, epochs=epochs, callbacks=[backup, Killer()], verbose=0)
else:
    step, epoch = tf.Variable(0, dtype=tf.int64), tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(data=reader, step=step, epoch=epoch)
    manager = tf.train.CheckpointManager(checkpoint, backup_dir, max_to_keep=2)
    manager.restore_or_initialize()
    while int(epoch) < epochs:
        for batch in reader:
            trained(batch["id"].numpy())
            step.assign_add(1)
            if int(step) % save_every == 0:
                manager.save()
            die_if_due()
        epoch.assign_add(1)
print("done", flush=True)
