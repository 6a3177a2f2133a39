"""readerd's Python client: stream a readerd reader's elements as numpy arrays, with
checkpoints, acknowledgements, shared readers across replicas and automatic reconnection.

    import readerd

    client = readerd.Client("127.0.0.1:50051")       # or "a:50051,b:50051": replicas
    with client.read(spec, checkpoint_every=100) as stream:
        for batch in stream:             # {"label": ndarray, "image": Strings, "tokens": Sparse, ...}
            train_step(batch)
            token = stream.last_token    # resume later with client.read(resume=token)

The work is done by the native core, ``readerd._native`` (the Rust client): see
``client.py`` for the stream's semantics and ``tensors.py`` for the tensor types.
"""

from .client import Client, RetryPolicy, Stream
from .errors import ReaderdError
from .tensors import Ragged, Sparse, Strings, Tensor, decode_batch

__all__ = ["Client", "RetryPolicy", "Stream", "ReaderdError", "Sparse", "Ragged", "Strings", "Tensor", "decode_batch"]
__version__ = "0.1.0"
