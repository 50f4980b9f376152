-- Wireshark / tshark dissector for MRC (Multipath Reliable Connection) as mrc builds it
-- (docs/design/wire.md is the byte-by-byte reference; this file follows it header by header).
--
--   wireshark -X lua_script:contrib/wireshark/mrc.lua capture.pcapng
--   tshark -X lua_script:contrib/wireshark/mrc.lua -r capture.pcapng -Y 'mrc.opcode == 0xdd'
--   (or copy it into ~/.local/lib/wireshark/plugins/)
--
-- MRC rides UDP port 4791 like RoCEv2. This dissector takes the port over and hands every
-- packet whose opcode is not MRC's (the RoCEv2 baseline's RC opcodes) to Wireshark's own
-- InfiniBand dissector, so a capture of both transports reads right.
--
-- Dissected: BTH (with MRC's R and T flags), METH, TS, RETH, ImmDt, payload and ICRC
-- (checked: CRC-32 over BTH .. payload), SACK / ACK, NACK, ReliabilityProbe, EndpointMsg
-- (EV probe, port status). A trimmed packet (DSCP TRIMMED 12 / TRIMMED_LASTHOP 16, cut after
-- its headers) is shown as such, without payload or ICRC. The packet's EV is the UDP source
-- port (high 16 bits) and the IPv6 flow label's low 16 bits.

local mrc = Proto("mrc", "Multipath Reliable Connection")

local OPCODES = {
    [0xC6] = "WRITE_FIRST", [0xC7] = "WRITE_MIDDLE", [0xC8] = "WRITE_LAST",
    [0xC9] = "WRITE_LAST_IMM", [0xCA] = "WRITE_ONLY", [0xCB] = "WRITE_ONLY_IMM",
    [0xD1] = "ACK", [0xD8] = "EP_REQUEST", [0xD9] = "EP_RESPONSE", [0xDC] = "SACK",
    [0xDD] = "NACK", [0xDE] = "RPROBE",
}
local IMM_OPS = { [0xC9] = true, [0xCB] = true }
local MARKS = { [0] = "NONE", [1] = "SKIP_ONCE", [2] = "ALWAYS_SKIP", [3] = "invalid" }
local NACK_REASONS = {
    [1] = "TRIMMED", [2] = "TRIMMED_LASTHOP", [3] = "NO_BITMAP", [4] = "NO_PKT_BUFFER",
    [5] = "PSN_OOR_WINDOW", [6] = "UNEXP_EVENT", [7] = "REMOTE_ACCESS_ERROR",
}
local EP_KINDS = { [1] = "EV_PROBE", [2] = "PORT_STATUS" }
local DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP = 12, 16

local f = mrc.fields
f.opcode = ProtoField.uint8("mrc.opcode", "OpCode", base.HEX, OPCODES)
f.se = ProtoField.bool("mrc.se", "Solicited event", 8, nil, 0x80)
f.mig = ProtoField.bool("mrc.mig", "MigReq", 8, nil, 0x40)
f.pad = ProtoField.uint8("mrc.pad_count", "Pad count", base.DEC, nil, 0x30)
f.tver = ProtoField.uint8("mrc.tver", "Transport version", base.DEC, nil, 0x0F)
f.pkey = ProtoField.uint16("mrc.pkey", "P_Key", base.HEX)
f.fecn = ProtoField.bool("mrc.fecn", "FECN", 8, nil, 0x80)
f.becn = ProtoField.bool("mrc.becn", "BECN", 8, nil, 0x40)
f.rtx = ProtoField.bool("mrc.rtx", "Retransmission (R)", 8, nil, 0x20)
f.ts_present = ProtoField.bool("mrc.ts_present", "Timestamp present (T)", 8, nil, 0x10)
f.dest_qp = ProtoField.uint24("mrc.dest_qp", "Destination QP", base.HEX)
f.ack_req = ProtoField.bool("mrc.ack_req", "AckReq", 8, nil, 0x80)
f.psn = ProtoField.uint24("mrc.psn", "PSN", base.DEC)
f.ev = ProtoField.uint32("mrc.ev", "EV (UDP source port : flow label)", base.HEX)
f.trimmed = ProtoField.bool("mrc.trimmed", "Trimmed")
f.msn = ProtoField.uint16("mrc.meth.msn", "MSN", base.DEC)
f.rqmsn = ProtoField.uint16("mrc.meth.rqmsn", "RQMSN", base.DEC)
f.tx_ts = ProtoField.uint64("mrc.ts.tx_ts_ns", "Transmit timestamp (ns)", base.DEC)
f.va = ProtoField.uint64("mrc.reth.va", "Virtual address", base.HEX)
f.rkey = ProtoField.uint32("mrc.reth.rkey", "R_Key", base.HEX)
f.dmalen = ProtoField.uint32("mrc.reth.length", "DMA length (message)", base.DEC)
f.imm = ProtoField.uint32("mrc.imm", "Immediate data", base.HEX)
f.payload_len = ProtoField.uint32("mrc.payload_length", "Payload length", base.DEC)
f.payload = ProtoField.bytes("mrc.payload", "Payload")
f.icrc = ProtoField.uint32("mrc.icrc", "ICRC", base.HEX)
f.icrc_ok = ProtoField.bool("mrc.icrc_ok", "ICRC correct")
f.sack_mark = ProtoField.uint8("mrc.sack.mark", "Mark", base.DEC, MARKS, 0xC0)
f.sack_ece = ProtoField.bool("mrc.sack.ece", "ECN echo", 8, nil, 0x20)
f.sack_cack = ProtoField.uint24("mrc.sack.cack_psn", "Cumulative ack PSN", base.DEC)
f.sack_offset = ProtoField.uint16("mrc.sack.sack_offset", "SACK offset", base.DEC)
f.sack_pen = ProtoField.uint8("mrc.sack.rcv_cwnd_pen", "Receiver cwnd penalty", base.DEC, nil, 0x7F)
f.sack_bitmap = ProtoField.uint64("mrc.sack.bitmap", "Bitmap", base.HEX)
f.sack_ev = ProtoField.uint32("mrc.sack.ev", "EV", base.HEX)
f.sack_ooo = ProtoField.uint16("mrc.sack.ooo_count", "Out-of-order count", base.DEC)
f.sack_rts = ProtoField.uint64("mrc.sack.reflected_ts_ns", "Reflected timestamp (ns)", base.DEC)
f.sack_rbytes = ProtoField.uint64("mrc.sack.received_bytes", "Received bytes", base.DEC)
f.nack_reason = ProtoField.uint8("mrc.nack.reason", "Reason", base.DEC, NACK_REASONS)
f.nack_psn = ProtoField.uint24("mrc.nack.psn", "PSN", base.DEC)
f.nack_ev = ProtoField.uint32("mrc.nack.ev", "EV", base.HEX)
f.nack_cack = ProtoField.uint24("mrc.nack.cack_psn", "Cumulative ack PSN", base.DEC)
f.nack_rts = ProtoField.uint64("mrc.nack.reflected_ts_ns", "Reflected timestamp (ns)", base.DEC)
f.probe_id = ProtoField.uint32("mrc.rprobe.probe_id", "Probe id", base.DEC)
f.probe_ev = ProtoField.uint32("mrc.rprobe.ev", "EV", base.HEX)
f.probe_ts = ProtoField.uint64("mrc.rprobe.tx_ts_ns", "Transmit timestamp (ns)", base.DEC)
f.ep_kind = ProtoField.uint8("mrc.endpoint.kind", "Kind", base.DEC, EP_KINDS)
f.ep_ident = ProtoField.uint32("mrc.endpoint.ident", "Ident", base.DEC)
f.ep_ev = ProtoField.uint32("mrc.endpoint.ev", "EV", base.HEX)
f.ep_mask = ProtoField.uint32("mrc.endpoint.port_mask", "Port mask", base.HEX)
f.ep_ts = ProtoField.uint64("mrc.endpoint.ts_ns", "Timestamp (ns)", base.DEC)

local e_short = ProtoExpert.new("mrc.short", "Packet shorter than its MRC headers",
                                expert.group.MALFORMED, expert.severity.ERROR)
local e_icrc = ProtoExpert.new("mrc.icrc_bad", "ICRC does not match",
                               expert.group.CHECKSUM, expert.severity.ERROR)
local e_trim = ProtoExpert.new("mrc.trimmed_note", "Trimmed by a switch: headers only",
                               expert.group.SEQUENCE, expert.severity.NOTE)
local e_rtx = ProtoExpert.new("mrc.rtx_note", "Retransmission",
                              expert.group.SEQUENCE, expert.severity.NOTE)
mrc.experts = { e_short, e_icrc, e_trim, e_rtx }

mrc.prefs.roce_to_ib = Pref.bool("Hand RoCEv2 opcodes to the InfiniBand dissector", true,
    "Packets on UDP 4791 whose opcode is not MRC's go to Wireshark's own RoCEv2 dissector")
mrc.prefs.check_icrc = Pref.bool("Check the ICRC", true, "CRC-32 over BTH .. payload")

local fld_dscp = Field.new("ipv6.tclass.dscp")
local fld_flow = Field.new("ipv6.flow")
local fld_sport = Field.new("udp.srcport")

-- CRC-32 (IEEE 802.3, zlib's), table-driven
local CRC_TABLE = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if bit32.band(c, 1) == 1 then
            c = bit32.bxor(0xEDB88320, bit32.rshift(c, 1))
        else
            c = bit32.rshift(c, 1)
        end
    end
    CRC_TABLE[i] = c
end

local function crc32(bytes, offset, length)
    local c = 0xFFFFFFFF
    for i = offset, offset + length - 1 do
        c = bit32.bxor(CRC_TABLE[bit32.band(bit32.bxor(c, bytes:get_index(i)), 0xFF)],
                       bit32.rshift(c, 8))
    end
    return bit32.bxor(c, 0xFFFFFFFF)
end

local roce_dissector = nil  -- Wireshark's RoCEv2 (InfiniBand) dissector, found at init

local BTH, METH, TS, RETH, IMM, ICRC = 12, 4, 8, 16, 4, 4
local BODY = { [0xD1] = 40, [0xDC] = 40, [0xDD] = 20, [0xDE] = 16, [0xD8] = 24, [0xD9] = 24 }

local function dissect_sack(tvb, t, at)
    local s = t:add(mrc, tvb(at, 40), "SACK")
    s:add(f.sack_mark, tvb(at, 1))
    s:add(f.sack_ece, tvb(at, 1))
    s:add(f.sack_cack, tvb(at + 1, 3))
    s:add(f.sack_offset, tvb(at + 4, 2))
    s:add(f.sack_pen, tvb(at + 6, 1))
    s:add(f.sack_bitmap, tvb(at + 8, 8))
    s:add(f.sack_ev, tvb(at + 16, 4))
    s:add(f.sack_ooo, tvb(at + 20, 2))
    s:add(f.sack_rts, tvb(at + 24, 8))
    s:add(f.sack_rbytes, tvb(at + 32, 8))
    return string.format("cack=%d", tvb(at + 1, 3):uint())
end

local function dissect_nack(tvb, t, at)
    local s = t:add(mrc, tvb(at, 20), "NACK")
    s:add(f.nack_reason, tvb(at, 1))
    s:add(f.nack_psn, tvb(at + 1, 3))
    s:add(f.nack_ev, tvb(at + 4, 4))
    s:add(f.nack_cack, tvb(at + 9, 3))
    s:add(f.nack_rts, tvb(at + 12, 8))
    local r = tvb(at, 1):uint()
    return string.format("%s psn=%d", NACK_REASONS[r] or ("reason " .. r), tvb(at + 1, 3):uint())
end

local function dissect_rprobe(tvb, t, at)
    local s = t:add(mrc, tvb(at, 16), "ReliabilityProbe")
    s:add(f.probe_id, tvb(at, 4))
    s:add(f.probe_ev, tvb(at + 4, 4))
    s:add(f.probe_ts, tvb(at + 8, 8))
    return string.format("id=%d", tvb(at, 4):uint())
end

local function dissect_endpoint(tvb, t, at)
    local s = t:add(mrc, tvb(at, 24), "EndpointMsg")
    s:add(f.ep_kind, tvb(at, 1))
    s:add(f.ep_ident, tvb(at + 4, 4))
    s:add(f.ep_ev, tvb(at + 8, 4))
    s:add(f.ep_mask, tvb(at + 12, 4))
    s:add(f.ep_ts, tvb(at + 16, 8))
    local k = tvb(at, 1):uint()
    return EP_KINDS[k] or ("kind " .. k)
end

function mrc.dissector(tvb, pinfo, tree)
    local len = tvb:len()
    if len < 1 then
        return 0
    end
    local op = tvb(0, 1):uint()
    if not OPCODES[op] then
        if mrc.prefs.roce_to_ib and roce_dissector ~= nil then
            return roce_dissector:call(tvb, pinfo, tree)
        end
        return 0
    end
    pinfo.cols.protocol = "MRC"
    local t = tree:add(mrc, tvb(), "Multipath Reliable Connection")
    if len < BTH then
        t:add_proto_expert_info(e_short)
        return len
    end
    local bth = t:add(mrc, tvb(0, BTH), "BTH")
    bth:add(f.opcode, tvb(0, 1))
    bth:add(f.se, tvb(1, 1))
    bth:add(f.mig, tvb(1, 1))
    bth:add(f.pad, tvb(1, 1))
    bth:add(f.tver, tvb(1, 1))
    bth:add(f.pkey, tvb(2, 2))
    bth:add(f.fecn, tvb(4, 1))
    bth:add(f.becn, tvb(4, 1))
    bth:add(f.rtx, tvb(4, 1))
    bth:add(f.ts_present, tvb(4, 1))
    bth:add(f.dest_qp, tvb(5, 3))
    bth:add(f.ack_req, tvb(8, 1))
    bth:add(f.psn, tvb(9, 3))
    local flags = tvb(4, 1):uint()
    local rtx = bit32.band(flags, 0x20) ~= 0
    local ts = bit32.band(flags, 0x10) ~= 0
    local qp, psn = tvb(5, 3):uint(), tvb(9, 3):uint()
    local sport, flow = fld_sport(), fld_flow()
    if sport ~= nil and flow ~= nil then
        local ev = sport.value * 65536 + bit32.band(flow.value, 0xFFFF)
        t:add(f.ev, ev):set_generated()
    end
    local info = string.format("%s QP=0x%06x", OPCODES[op], qp)
    local body = BODY[op]
    if body ~= nil then  -- a control packet: BTH, its body, ICRC
        if len < BTH + body + ICRC then
            t:add_proto_expert_info(e_short)
            pinfo.cols.info = "MRC " .. info .. " [short]"
            return len
        end
        local what
        if op == 0xDD then
            what = dissect_nack(tvb, t, BTH)
        elseif op == 0xDE then
            what = dissect_rprobe(tvb, t, BTH)
        elseif op == 0xD8 or op == 0xD9 then
            what = dissect_endpoint(tvb, t, BTH)
        else
            what = dissect_sack(tvb, t, BTH)
        end
        local ic = t:add(f.icrc, tvb(BTH + body, ICRC))
        if mrc.prefs.check_icrc then
            local ok = crc32(tvb:bytes(), 0, BTH + body) == tvb(BTH + body, ICRC):uint()
            t:add(f.icrc_ok, ok):set_generated()
            if not ok then
                ic:add_proto_expert_info(e_icrc)
            end
        end
        pinfo.cols.info = "MRC " .. info .. " " .. what
        return len
    end
    -- data: BTH METH [TS] RETH [ImmDt] payload ICRC (payload and ICRC gone if trimmed)
    local hdr = BTH + METH + (ts and TS or 0) + RETH + (IMM_OPS[op] and IMM or 0)
    if len < hdr then
        t:add_proto_expert_info(e_short)
        pinfo.cols.info = "MRC " .. info .. string.format(" PSN=%d [short]", psn)
        return len
    end
    local at = BTH
    local meth = t:add(mrc, tvb(at, METH), "METH")
    meth:add(f.msn, tvb(at, 2))
    meth:add(f.rqmsn, tvb(at + 2, 2))
    at = at + METH
    if ts then
        t:add(mrc, tvb(at, TS), "TS"):add(f.tx_ts, tvb(at, TS))
        at = at + TS
    end
    local reth = t:add(mrc, tvb(at, RETH), "RETH")
    reth:add(f.va, tvb(at, 8))
    reth:add(f.rkey, tvb(at + 8, 4))
    reth:add(f.dmalen, tvb(at + 12, 4))
    at = at + RETH
    if IMM_OPS[op] then
        t:add(mrc, tvb(at, IMM), "ImmDt"):add(f.imm, tvb(at, IMM))
        at = at + IMM
    end
    local dscp = fld_dscp()
    local trimmed = (dscp ~= nil and (dscp.value == DSCP_TRIMMED or dscp.value == DSCP_TRIMMED_LASTHOP))
        or len - at < ICRC
    info = info .. string.format(" PSN=%d MSN=%d", psn, tvb(BTH, 2):uint())
    if trimmed then
        t:add(f.trimmed, true):set_generated()
        t:add_proto_expert_info(e_trim)
        if len > at then  -- a switch's trim_bytes kept some payload
            t:add(f.payload, tvb(at, len - at))
        end
        info = info .. " [TRIMMED]"
    else
        local plen = len - at - ICRC
        t:add(f.payload_len, plen):set_generated()
        if plen > 0 then
            t:add(f.payload, tvb(at, plen))
        end
        local ic = t:add(f.icrc, tvb(len - ICRC, ICRC))
        if mrc.prefs.check_icrc then
            local ok = crc32(tvb:bytes(), 0, len - ICRC) == tvb(len - ICRC, ICRC):uint()
            t:add(f.icrc_ok, ok):set_generated()
            if not ok then
                ic:add_proto_expert_info(e_icrc)
            end
        end
        info = info .. string.format(" len=%d", plen)
    end
    if rtx then
        t:add_proto_expert_info(e_rtx)
        info = info .. " [RTX]"
    end
    pinfo.cols.info = "MRC " .. info
    return len
end

-- Take UDP 4791 over, keeping whatever dissected it (Wireshark's RoCEv2) for RC opcodes.
do
    local udp = DissectorTable.get("udp.port")
    roce_dissector = udp:get_dissector(4791) or Dissector.get("infiniband")
    udp:add(4791, mrc)
end
