"""asyncio: awaiting messages."""

import asyncio
import threading

import pytest

import pinshm


def test_recv_async(pair):
    tx, rx = pair()

    async def main():
        tx.send(b"ready")
        assert await pinshm.recv_async(rx) == b"ready"
        sender = threading.Timer(0.05, tx.send, args=(b"later",))
        sender.start()
        other = asyncio.create_task(asyncio.sleep(0.01))  # the loop runs other tasks meanwhile
        got = await asyncio.wait_for(pinshm.recv_async(rx, inplace=True), 10)
        assert other.done()
        sender.join()
        with got:
            assert bytes(got) == b"later"
        tx.close()
        with pytest.raises(pinshm.PeerGone):
            await asyncio.wait_for(pinshm.recv_async(rx), 10)

    asyncio.run(main())
