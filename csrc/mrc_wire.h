#ifndef MRC_WIRE_H
#define MRC_WIRE_H
/* The wire facts C uses, one name each: the C side of mrcnic/wire/layout.py (MRC_WIRE_<NAME>
 * is layout.<NAME>; tests/unit/test_wire_facts.py checks every one against the Python value,
 * and that none is missing from its list). An enum, not #defines: this header is part of
 * the cffi cdef, so the values are also visible from Python as mrcnic._mrcfast.lib.MRC_WIRE_*.
 * Byte layouts: docs/design/wire.md. */

enum {
    MRC_WIRE_LAYOUT_VERSION = 1, /* layout.LAYOUT_VERSION */

    /* sizes in bytes */
    MRC_WIRE_ETH_SIZE = 14,
    MRC_WIRE_IPV6_SIZE = 40,
    MRC_WIRE_UDP_SIZE = 8,
    MRC_WIRE_BTH_SIZE = 12,
    MRC_WIRE_METH_SIZE = 4,
    MRC_WIRE_TS_SIZE = 8,
    MRC_WIRE_RETH_SIZE = 16,
    MRC_WIRE_IMM_SIZE = 4,
    MRC_WIRE_ICRC_SIZE = 4,
    MRC_WIRE_IPV6_ADDR_SIZE = 16,
    MRC_WIRE_USID_SIZE = 2, /* one uSID of the carrier (16-bit uSIDs) */

    /* numbers */
    MRC_WIRE_ETHERTYPE_IPV6 = 0x86DD,
    MRC_WIRE_IPV6_VERSION = 6,
    MRC_WIRE_IPPROTO_UDP = 17,
    MRC_WIRE_MRC_UDP_PORT = 4791,

    /* offsets in a whole frame (Ethernet first) */
    MRC_WIRE_OFF_ETHERTYPE = 12,
    MRC_WIRE_OFF_IPV6 = 14,
    MRC_WIRE_OFF_TC_HI = 14,          /* version | DSCP >> 2 */
    MRC_WIRE_OFF_TC_LO = 15,          /* (DSCP & 3) << 6 | ECN << 4 | flow label >> 16 */
    MRC_WIRE_OFF_PAYLOAD_LENGTH = 18, /* big-endian 16 bits */
    MRC_WIRE_OFF_NEXT_HEADER = 20,
    MRC_WIRE_OFF_HOP_LIMIT = 21,
    MRC_WIRE_OFF_SRC = 22,
    MRC_WIRE_OFF_DST = 38,
    MRC_WIRE_OFF_UDP = 54, /* also where the Ethernet + IPv6 headers end */
    MRC_WIRE_OFF_UDP_DST_PORT = 56,
    MRC_WIRE_OFF_UDP_LENGTH = 58,
    MRC_WIRE_OFF_UDP_CHECKSUM = 60,
    MRC_WIRE_OFF_BTH = 62,
    MRC_WIRE_OFF_BTH_FLAGS = 66, /* FECN BECN RTX TS */

    /* bits */
    MRC_WIRE_BTH_FLAG_TS = 0x10,     /* in the byte at OFF_BTH_FLAGS: a TS extension follows METH */
    MRC_WIRE_TC_HI_DSCP_MASK = 0x0F, /* DSCP's upper 4 bits in the byte at OFF_TC_HI */
    MRC_WIRE_TC_LO_DSCP_MASK = 0xC0, /* DSCP's lower 2 bits in the byte at OFF_TC_LO */
    MRC_WIRE_TC_LO_ECN_MASK = 0x30,  /* ECN in the byte at OFF_TC_LO: OR it in to mark CE */
    MRC_WIRE_TC_LO_ECN_SHIFT = 4,

    /* DSCP values (layout.Dscp) */
    MRC_WIRE_DSCP_NO_TRIM = 0,
    MRC_WIRE_DSCP_TRIMMABLE = 4,
    MRC_WIRE_DSCP_TRIMMABLE_RETX = 8,
    MRC_WIRE_DSCP_TRIMMED = 12,
    MRC_WIRE_DSCP_TRIMMED_LASTHOP = 16,
    MRC_WIRE_DSCP_LOSSLESS = 26, /* the PFC class: RoCEv2 data on a lab with PFC */
    MRC_WIRE_DSCP_CONTROL = 46,

    /* ECN codepoints (layout.Ecn) */
    MRC_WIRE_ECN_NOT_ECT = 0,
    MRC_WIRE_ECN_ECT1 = 1,
    MRC_WIRE_ECN_ECT0 = 2,
    MRC_WIRE_ECN_CE = 3,

    /* opcodes (layout.Opcode): the MRC data opcodes are WRITE_FIRST..WRITE_ONLY_IMM */
    MRC_WIRE_OP_WRITE_FIRST = 0xC6,
    MRC_WIRE_OP_WRITE_MIDDLE = 0xC7,
    MRC_WIRE_OP_WRITE_LAST = 0xC8,
    MRC_WIRE_OP_WRITE_LAST_IMM = 0xC9,
    MRC_WIRE_OP_WRITE_ONLY_IMM = 0xCB,
    MRC_WIRE_OP_ACK = 0xD1,
    MRC_WIRE_OP_SACK = 0xDC,
    MRC_WIRE_OP_NACK = 0xDD,
    /* the RC opcodes of the RoCEv2 baseline: data RC_WRITE_FIRST..RC_WRITE_ONLY_IMM */
    MRC_WIRE_OP_RC_WRITE_FIRST = 0x06,
    MRC_WIRE_OP_RC_WRITE_MIDDLE = 0x07,
    MRC_WIRE_OP_RC_WRITE_LAST = 0x08,
    MRC_WIRE_OP_RC_WRITE_LAST_IMM = 0x09,
    MRC_WIRE_OP_RC_WRITE_ONLY = 0x0A,
    MRC_WIRE_OP_RC_WRITE_ONLY_IMM = 0x0B,
    MRC_WIRE_OP_RC_ACK = 0x11,
    MRC_WIRE_DEFAULT_PKEY = 0xFFFF,
    MRC_WIRE_BTH_FLAG_BECN = 0x40, /* in BTH byte 4 (above the destination QP) */

    /* BTH bits beyond the flags byte's TS */
    MRC_WIRE_BTH_FLAG_RTX = 0x20,         /* in the byte at OFF_BTH_FLAGS: a retransmission */
    MRC_WIRE_BTH_ACKREQ = -2147483648, /* 0x80000000 in BTH word 2 (above the PSN), as an int */

    /* NACK reasons (layout.NackReason) */
    MRC_WIRE_NACK_TRIMMED = 1,
    MRC_WIRE_NACK_TRIMMED_LASTHOP = 2,
    MRC_WIRE_NACK_PSN_OOR_WINDOW = 5,
    MRC_WIRE_NACK_UNEXP_EVENT = 6,
    MRC_WIRE_NACK_REMOTE_ACCESS_ERROR = 7,

    /* SACK marks (layout.SackMark) */
    MRC_WIRE_SACK_MARK_SKIP_ONCE = 1,
    MRC_WIRE_SACK_MARK_ALWAYS_SKIP = 2
};

/* MRC_WIRE_LAYOUT_VERSION as compiled into the module (a stale build shows here). */
int mrc_wire_layout_version(void);
#endif
