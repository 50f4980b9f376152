"""The I/O shell: AF_PACKET sockets and batched I/O, namespaces, link state, pacing, the asyncio NIC."""
