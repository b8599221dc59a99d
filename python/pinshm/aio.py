"""asyncio: await the next message of a consumer channel."""

import asyncio

from _pinshm import Empty


async def recv_async(channel, inplace=False):
    """Wait in the running event loop for the next message of channel.

    Returns bytes (a copy), or with inplace=True a Message (in place).  The
    wait is on the channel's wake-up descriptor (Channel.fileno(), armed with
    Channel.arm()); the loop runs other tasks meanwhile.  Raises
    pinshm.PeerGone when the channel is empty and every producer has left.
    Only one task may wait on a channel at a time.
    """
    loop = asyncio.get_running_loop()
    fd = channel.fileno()
    while True:
        try:
            return channel.recv_inplace(0) if inplace else channel.recv(0)
        except Empty:
            pass
        if not channel.arm():
            continue  # a message came meanwhile
        ready = loop.create_future()

        def wake(fut=ready):
            if not fut.done():
                fut.set_result(None)

        loop.add_reader(fd, wake)
        try:
            await ready
        finally:
            loop.remove_reader(fd)
