"""readerd's Python client: stream a readerd reader's elements as numpy arrays over Arrow
Flight, with checkpoints, acknowledgements and automatic reconnection.

    import readerd

    client = readerd.Client("127.0.0.1:50051")
    with client.read(spec, checkpoint_every=100) as stream:
        for batch in stream:             # {"label": ndarray, "tokens": Sparse, ...}
            train_step(batch)
            token = stream.last_token    # resume later with client.read(resume=token)

See ``client.py`` for the stream's semantics and ``tensors.py`` for the tensor types.
"""

from .client import Client, RetryPolicy, Stream
from .errors import ReaderdError
from .tensors import Ragged, Sparse, Tensor, decode_batch

__all__ = ["Client", "RetryPolicy", "Stream", "ReaderdError", "Sparse", "Ragged", "Tensor", "decode_batch"]
__version__ = "0.1.0"
