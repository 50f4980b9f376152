/* The one trim rule in C (see mrc_trim.h). */
#include "mrc_trim.h"

#include <string.h>

#include "mrc_checksum.h"
#include "mrc_wire.h"

enum {
    OFF_UDP = MRC_WIRE_OFF_UDP,
    OFF_BTH = MRC_WIRE_OFF_BTH,
    OFF_TC_HI = MRC_WIRE_OFF_TC_HI,
    OFF_TC_LO = MRC_WIRE_OFF_TC_LO,
    ADDR_SIZE = MRC_WIRE_IPV6_ADDR_SIZE,
    USID_SIZE = MRC_WIRE_USID_SIZE
};

size_t mrc_trim_header_end(const uint8_t *f, size_t len) {
    if (len < OFF_BTH + MRC_WIRE_BTH_SIZE || f[MRC_WIRE_OFF_NEXT_HEADER] != MRC_WIRE_IPPROTO_UDP) {
        return 0;
    }
    if ((f[MRC_WIRE_OFF_UDP_DST_PORT] << 8 | f[MRC_WIRE_OFF_UDP_DST_PORT + 1]) !=
        MRC_WIRE_MRC_UDP_PORT) {
        return 0;
    }
    uint8_t op = f[OFF_BTH];
    if (op < MRC_WIRE_OP_WRITE_FIRST || op > MRC_WIRE_OP_WRITE_ONLY_IMM) {
        return 0;
    }
    size_t end = OFF_BTH + MRC_WIRE_BTH_SIZE + MRC_WIRE_METH_SIZE + MRC_WIRE_RETH_SIZE;
    if (f[MRC_WIRE_OFF_BTH_FLAGS] & MRC_WIRE_BTH_FLAG_TS) {
        end += MRC_WIRE_TS_SIZE;
    }
    if (op == MRC_WIRE_OP_WRITE_LAST_IMM || op == MRC_WIRE_OP_WRITE_ONLY_IMM) {
        end += MRC_WIRE_IMM_SIZE;
    }
    return end <= len ? end : 0;
}

/* shift the carrier after the block left by one uSID until the bits after its first uSID are
 * all zero */
void mrc_usid_final(const uint8_t *dst, int lblen, uint8_t *out) {
    memcpy(out, dst, ADDR_SIZE);
    size_t lb = (size_t)lblen / 8;
    if (lb + USID_SIZE >= ADDR_SIZE) {
        return; /* room for one uSID only: already final */
    }
    for (;;) {
        int tail_zero = 1;
        for (size_t i = lb + USID_SIZE; i < ADDR_SIZE; i++) {
            if (out[i]) {
                tail_zero = 0;
                break;
            }
        }
        if (tail_zero) {
            return;
        }
        memmove(out + lb, out + lb + USID_SIZE, ADDR_SIZE - lb - USID_SIZE);
        memset(out + ADDR_SIZE - USID_SIZE, 0, USID_SIZE);
    }
}

size_t mrc_trim_cut(const uint8_t *frame, size_t len, uint8_t *t, int32_t keep_bytes,
                    int last_hop, int lblen) {
    size_t end = mrc_trim_header_end(frame, len);
    if (end == 0) {
        return 0;
    }
    size_t keep = end;
    if (keep_bytes > 0 && (size_t)keep_bytes > keep) {
        keep = (size_t)keep_bytes;
    }
    if (keep > len) {
        keep = len;
    }
    if (t != frame) {
        memcpy(t, frame, keep);
    }
    int dscp = last_hop ? MRC_WIRE_DSCP_TRIMMED_LASTHOP : MRC_WIRE_DSCP_TRIMMED;
    t[OFF_TC_HI] = (uint8_t)((t[OFF_TC_HI] & ~MRC_WIRE_TC_HI_DSCP_MASK) | (dscp >> 2));
    t[OFF_TC_LO] = (uint8_t)((t[OFF_TC_LO] & ~MRC_WIRE_TC_LO_DSCP_MASK) | ((dscp & 3) << 6));
    size_t ulen = keep - OFF_UDP;
    t[MRC_WIRE_OFF_PAYLOAD_LENGTH] = t[MRC_WIRE_OFF_UDP_LENGTH] = (uint8_t)(ulen >> 8);
    t[MRC_WIRE_OFF_PAYLOAD_LENGTH + 1] = t[MRC_WIRE_OFF_UDP_LENGTH + 1] = (uint8_t)(ulen & 0xFF);
    t[MRC_WIRE_OFF_UDP_CHECKSUM] = t[MRC_WIRE_OFF_UDP_CHECKSUM + 1] = 0;
    uint8_t final[ADDR_SIZE];
    mrc_usid_final(t + MRC_WIRE_OFF_DST, lblen, final);
    int32_t c = mrc_udp6_checksum(t + MRC_WIRE_OFF_SRC, ADDR_SIZE, final, ADDR_SIZE, t + OFF_UDP,
                                  ulen);
    t[MRC_WIRE_OFF_UDP_CHECKSUM] = (uint8_t)(c >> 8);
    t[MRC_WIRE_OFF_UDP_CHECKSUM + 1] = (uint8_t)(c & 0xFF);
    return keep;
}
