"""mrcnic: the software MRC NIC (wire format, uSID codec, transport core, verbs API)."""

__version__ = "0.1.0"
