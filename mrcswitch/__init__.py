"""mrcswitch: the software SRv6 uSID switch (static table, paced egress, ECN, trimming)."""
