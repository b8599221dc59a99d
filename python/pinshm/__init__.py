"""pinshm: messages between the processes of one machine over pinned shared memory.

Connect to the pinshm daemon, create or open named channels, and send and
receive messages, by copy or in place::

    import pinshm
    name = pinshm.own_name("jobs")   # "@UID.jobs": only this user's channel
    with pinshm.connect() as client:
        client.create(name, capacity=1 << 20)
        with client.open(name, "producer") as tx, client.open(name, "consumer") as rx:
            tx.send(b"hello")
            with rx.recv_inplace() as msg:      # the record itself, read-only
                print(bytes(msg))

numpy arrays go through send_array() and recv_array(): a received array is
the record in place (no copy).  Messages and reservations speak DLPack
(torch.from_dlpack(msg), numpy.from_dlpack(msg)); a record a GPU copies
from goes back once the copy completed (cuda_device(), Channel.register(),
Message.release_after()).  Errors are pinshm.Error (an OSError) and its
subclasses Full, Empty, Timeout, PeerGone, Corrupt, TooManyHeld, Stale,
each carrying errno and the library's reason in .detail.

The reference is pinshm-python(3).
"""

from _pinshm import (  # noqa: F401  (re-exported)
    CONSUMER,
    HUGEPAGES,
    LAYOUT_VERSION,
    LIBRARY_VERSION,
    MAX_HELD,
    MIN_CAPACITY,
    NAME_MAX,
    OVERRUN,
    PERSISTENT,
    PRODUCER,
    PROTOCOL_VERSION,
    QUEUE,
    REGISTERED,
    REGISTERED_READ_ONLY,
    SPIN_ADAPTIVE,
    TOPIC,
    Channel,
    Client,
    Corrupt,
    Device,
    Empty,
    Error,
    Full,
    Message,
    PeerGone,
    Reservation,
    Stale,
    Timeout,
    TooManyHeld,
    connect,
    cuda_device,
    opencl_device,
    own_name,
    strerror,
)

from . import feed  # noqa: F401  (pinshm.feed.Feed: the DataLoader of records in place)
from .aio import recv_async  # noqa: F401
from .arrays import ARRAY_MAGIC, array_dlpack, as_array, recv_array, send_array  # noqa: F401

__version__ = LIBRARY_VERSION

__all__ = [
    "CONSUMER", "HUGEPAGES", "LAYOUT_VERSION", "LIBRARY_VERSION", "MAX_HELD", "MIN_CAPACITY",
    "NAME_MAX", "OVERRUN", "PERSISTENT", "PRODUCER", "PROTOCOL_VERSION", "QUEUE", "REGISTERED",
    "REGISTERED_READ_ONLY", "SPIN_ADAPTIVE", "TOPIC", "Channel", "Client", "Corrupt", "Device", "Empty", "Error",
    "Full", "Message", "PeerGone",
    "Reservation", "Stale", "Timeout", "TooManyHeld", "connect", "cuda_device", "opencl_device", "own_name",
    "strerror",
    "ARRAY_MAGIC", "array_dlpack", "as_array", "recv_array", "send_array", "recv_async",
]
