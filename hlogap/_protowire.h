/* Protobuf's wire format (https://protobuf.dev/programming-guides/encoding/), as both C
   decoders read it: hlogap/trace/_xline.c (XLines) and hlogap/hlo/_hlodecode.c (HloProtos).
   Every read is checked against the end of the buffer it belongs to. */

#ifndef HLOGAP_PROTOWIRE_H
#define HLOGAP_PROTOWIRE_H

#include <stdint.h>

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

/* The varint at *p (at most 10 bytes, within end): 1 and *p moved past it, or 0. Most
   varints (tags, ids, lengths) are one byte: that case is inlined. */
static int read_long_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    const uint8_t *q = *p;
    uint64_t value = 0;
    for (int i = 0; i < 10; i++) {
        if (q >= end) return 0;
        uint8_t byte = *q++;
        value |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (byte < 0x80) {
            *p = q;
            *out = value;
            return 1;
        }
    }
    return 0;
}

static inline int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    if (*p < end && **p < 0x80) {
        *out = *(*p)++;
        return 1;
    }
    return read_long_varint(p, end, out);
}

/* A length-delimited payload at *p: its bounds, *p moved past it; 0 if it overruns end. */
static int read_payload(const uint8_t **p, const uint8_t *end, const uint8_t **body,
                        const uint8_t **body_end) {
    uint64_t size;
    if (!read_varint(p, end, &size) || size > (uint64_t)(end - *p)) return 0;
    *body = *p;
    *body_end = *p + size;
    *p = *body_end;
    return 1;
}

/* Skip a value of wire type `wire`; 0 if it overruns end or is a group (upb reads those). */
static int skip_wire_value(int wire, const uint8_t **p, const uint8_t *end) {
    uint64_t ignored;
    const uint8_t *body, *body_end;
    switch (wire) {
    case WIRE_VARINT:
        return read_varint(p, end, &ignored);
    case WIRE_FIXED64:
        if (end - *p < 8) return 0;
        *p += 8;
        return 1;
    case WIRE_FIXED32:
        if (end - *p < 4) return 0;
        *p += 4;
        return 1;
    case WIRE_LEN:
        return read_payload(p, end, &body, &body_end);
    default:
        return 0;
    }
}

#endif
