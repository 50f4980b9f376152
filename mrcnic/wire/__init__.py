"""The wire format: header layouts and codecs, frames, uSID addresses, the RoCEv2 headers, scapy layers."""

from mrcnic.wire.codec import *  # noqa: F403  (the headers' public names, as ``wire.BTH`` etc.)
